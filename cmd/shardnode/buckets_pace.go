package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/shardnode/shardnode/config"
)

// newBucketsPaceCmd returns `shardnode buckets pace`.
func newBucketsPaceCmd() *cobra.Command {
	var base, rate string
	cmd := &cobra.Command{
		Use:   "pace [--rate BYTES]",
		Short: "Show or set every node's move bandwidth",
		Long: `Show, or with --rate set, the move bandwidth of every node of the
cluster: how many bytes per second a node sends of the buckets it moves
out, over all its migrations. A large move otherwise takes CPU and disk
from the foreground load; a lower rate leaves more to it, for a longer
move. Only a bucket's copy while it is Moving is paced, never the steps
around the ownership flip, during which writes into the bucket wait.

--rate takes bytes per second, with an optional KiB, MiB or GiB suffix;
0 removes the limit. The change applies at once, to batches already
waiting too, and lasts until each node restarts (the configuration key
resharding.max-send-bytes-per-sec is what a node starts with). A node
that cannot be reached is reported, the others are still set, and the
command then fails.`,
		Example: `  shardnode buckets pace
  shardnode buckets pace --rate 20MiB
  shardnode buckets pace --rate 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var body any
			if cmd.Flags().Changed("rate") {
				v, err := config.ParseSize(rate)
				if err != nil || v < 0 {
					return fmt.Errorf("--rate %q: want bytes per second, 0 or more, optionally with a KiB, MiB or GiB suffix", rate)
				}
				body = map[string]int64{"BytesPerSecond": v}
			}
			c, err := newAPIClient(base)
			if err != nil {
				return err
			}
			var cluster struct {
				Nodes []struct{ Tag, HttpUrl, Status string }
			}
			if err := c.getJSON(cmd.Context(), "/cluster", nil, &cluster); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			failed := 0
			for _, nd := range cluster.Nodes {
				limit, err := nodePace(cmd.Context(), nd.HttpUrl, body)
				if err != nil {
					failed++
					fmt.Fprintf(out, "%-4s %s\n", nd.Tag, err)
					continue
				}
				fmt.Fprintf(out, "%-4s %s\n", nd.Tag, formatPace(limit))
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d nodes did not answer", failed, len(cluster.Nodes))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&base, "url", defaultNodeURL, "base URL of any node of the cluster")
	cmd.Flags().StringVar(&rate, "rate", "", "bytes per second for every node (KiB, MiB, GiB suffixes; 0 removes the limit)")
	return cmd
}

// nodePace reads (body nil) or sets one node's move bandwidth.
func nodePace(ctx context.Context, nodeURL string, body any) (int64, error) {
	c, err := newAPIClient(nodeURL)
	if err != nil {
		return 0, err
	}
	method := http.MethodGet
	if body != nil {
		method = http.MethodPut
	}
	b, err := c.send(ctx, method, "/admin/resharding/send-limit", nil, body)
	if err != nil {
		return 0, err
	}
	var ans struct{ BytesPerSecond int64 }
	if err := json.Unmarshal(b, &ans); err != nil {
		return 0, fmt.Errorf("%s /admin/resharding/send-limit: decode answer: %w", method, err)
	}
	return ans.BytesPerSecond, nil
}

// formatPace renders a move bandwidth.
func formatPace(bytesPerSec int64) string {
	if bytesPerSec == 0 {
		return "no limit"
	}
	switch {
	case bytesPerSec >= 1<<20:
		return fmt.Sprintf("%.1f MiB/s (%d bytes/s)", float64(bytesPerSec)/(1<<20), bytesPerSec)
	case bytesPerSec >= 1<<10:
		return fmt.Sprintf("%.1f KiB/s (%d bytes/s)", float64(bytesPerSec)/(1<<10), bytesPerSec)
	}
	return fmt.Sprintf("%d bytes/s", bytesPerSec)
}
