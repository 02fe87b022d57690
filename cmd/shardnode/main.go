// Command shardnode is the shardnode server and its admin tools: `serve`
// runs a node; other subcommands talk to a running cluster.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "shardnode:", err)
		if errors.Is(err, errInterrupted) {
			os.Exit(130) // as shells report a command stopped by SIGINT
		}
		os.Exit(1)
	}
}
