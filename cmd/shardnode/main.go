// Command shardnode is the shardnode server and its admin tools: `serve`
// runs a node; other subcommands talk to a running cluster.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "shardnode:", err)
		os.Exit(1)
	}
}
