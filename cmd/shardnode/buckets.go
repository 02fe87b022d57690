package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// maxBucket is the highest bucket number: documents live in 2^20 buckets.
const maxBucket = 1<<20 - 1

// defaultNodeURL is where the admin commands look for a node by default,
// `shardnode serve`'s default HTTP address.
const defaultNodeURL = "http://127.0.0.1:8080"

// errInterrupted is returned when the user stops a command that follows an
// operation; the operation itself goes on.
var errInterrupted = errors.New("interrupted")

// nodeFlags are the flags every buckets subcommand has.
type nodeFlags struct {
	url string
	db  string
}

// register adds --url and --db to cmd.
func (f *nodeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "url", defaultNodeURL, "base URL of any node of the cluster")
	cmd.Flags().StringVar(&f.db, "db", "", "database name (required)")
}

// client validates the flags and returns a client of the node.
func (f *nodeFlags) client() (*apiClient, error) {
	if f.db == "" {
		return nil, errors.New("--db is required: the database to work on")
	}
	return newAPIClient(f.url)
}

// newBucketsCmd returns `shardnode buckets` and its subcommands.
func newBucketsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "buckets",
		Short: "Move buckets between shards online and report where data lives",
		Long: `Work with a database's buckets on a running cluster.

Every document belongs to one of 1,048,576 buckets (0..1048575), and every
bucket to one shard. "move" moves a range of buckets to another shard while
the database stays online, and follows the move until it is done; "report"
shows how documents and bytes spread over the bucket space and which shards
hold them; "status" lists the resharding operations and live migrations;
"pace" shows or sets how fast each node sends the buckets it moves out.

The commands talk to any node over HTTP (--url, default ` + defaultNodeURL + `).`,
		Example: `  shardnode buckets report --db shop
  shardnode buckets move --db shop --from 0 --to 262143 --shard 3
  shardnode buckets status --db shop`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newBucketsMoveCmd(), newBucketsReportCmd(), newBucketsStatusCmd(), newBucketsCancelCmd(), newBucketsPaceCmd())
	return cmd
}

// signalContext returns a context cancelled on Ctrl-C or SIGTERM.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// outputTerminal reports whether w is a terminal, and its width.
func outputTerminal(w io.Writer) (width func() int, tty bool) {
	f, ok := w.(*os.File)
	if !ok {
		return nil, false
	}
	if _, ok := terminalWidth(f); !ok {
		return nil, false
	}
	return func() int {
		n, _ := terminalWidth(f)
		return max(n, 20)
	}, true
}

// useColor reports whether a terminal may get colours (see no-color.org).
func useColor() bool {
	return os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

// validBucket checks a bucket number flag.
func validBucket(name string, v int64) error {
	if v < 0 || v > maxBucket {
		return fmt.Errorf("--%s %d: a bucket number is 0..%d", name, v, maxBucket)
	}
	return nil
}
