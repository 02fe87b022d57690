package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// statusFlags are `shardnode buckets status`'s flags.
type statusFlags struct {
	nodeFlags
	id     string
	follow bool
	plain  bool
	json   bool
}

// reshardingList is GET /databases/{db}/resharding's answer.
type reshardingList struct {
	Operations       []operation       `json:"Operations"`
	BucketMigrations []bucketMigration `json:"BucketMigrations"`
}

// newBucketsStatusCmd returns `shardnode buckets status`.
func newBucketsStatusCmd() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status --db DB [--id OP [--follow]]",
		Short: "List resharding operations and the bucket migrations in flight",
		Long: `List a database's resharding operations, newest first (the node keeps the
running ones and the last 50 finished), and every bucket migration in
flight, including the ones the documents migrator started for leftovers.

With --id, show one operation in detail: its counts, times, the buckets
migrating now, its alerts and its errors. Add --follow to follow it to the
end with the same progress output as "buckets move", for instance after
pressing Ctrl-C in "buckets move". A cancelled operation is followed until
its bucket in flight has finished its move.`,
		Example: `  shardnode buckets status --db shop
  shardnode buckets status --db shop --id 3f9c2a1b7d4e5f60
  shardnode buckets status --db shop --id 3f9c2a1b7d4e5f60 --follow`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.id == "" && (f.follow || f.plain) {
				return errors.New("--follow and --plain need --id: the operation to follow")
			}
			if f.follow && f.json {
				return errors.New("--follow and --json do not go together")
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if f.follow {
				ctx, stop := signalContext(cmd.Context())
				defer stop()
				return followOperation(ctx, c, f.db, f.id, time.Time{}, out, f.plain, defaultFollowOptions)
			}
			return runStatus(cmd.Context(), c, f, out, time.Now())
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.id, "id", "", "show this operation only")
	fl.BoolVarP(&f.follow, "follow", "f", false, "with --id: follow the operation until it ends")
	fl.BoolVar(&f.plain, "plain", false, "with --follow: print one plain line per change even on a terminal")
	fl.BoolVar(&f.json, "json", false, "print the node's JSON answer as is")
	return cmd
}

// runStatus prints the operations, or one of them.
func runStatus(ctx context.Context, c *apiClient, f statusFlags, out io.Writer, now time.Time) error {
	path := dbPath(f.db, "resharding")
	if f.id != "" {
		path = dbPath(f.db, "resharding", f.id)
	}
	b, err := c.send(ctx, "GET", path, nil, nil)
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(out, b)
	}
	if f.id != "" {
		var op operation
		if err := json.Unmarshal(b, &op); err != nil {
			return fmt.Errorf("decode operation: %w", err)
		}
		_, err = io.WriteString(out, renderOperation(op, now))
		return err
	}
	var list reshardingList
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("decode operations: %w", err)
	}
	_, err = io.WriteString(out, renderStatus(f.db, list, now))
	return err
}

// operationDuration is how long op ran, or has run until now.
func operationDuration(op operation, now time.Time) time.Duration {
	if op.StartedAt.IsZero() {
		return 0
	}
	if !op.EndedAt.IsZero() {
		return op.EndedAt.Sub(op.StartedAt)
	}
	return now.Sub(op.StartedAt)
}

// renderStatus formats the list of operations and migrations as tables.
func renderStatus(db string, list reshardingList, now time.Time) string {
	var b strings.Builder
	if len(list.Operations) == 0 {
		fmt.Fprintf(&b, "No resharding operations in %q.\n", db)
	} else {
		fmt.Fprintf(&b, "Resharding operations of %q, newest first:\n\n", db)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "OPERATION\tBUCKETS\tTO SHARD\tSTATUS\tDONE\tDOCUMENTS\tBYTES\tSTARTED\tDURATION\tALERTS\tERRORS")
		for _, op := range list.Operations {
			fmt.Fprintf(tw, "%s\t%d-%d\t%d\t%s\t%s/%s (%.1f%%)\t%s\t%s\t%s\t%s\t%d\t%d\n", op.OperationID, op.FromBucket, op.ToBucket, op.ToShard, op.Status,
				humanCount(op.BucketsDone), humanCount(op.BucketsTotal), percent(op), humanCount(op.DocumentsMoved), humanBytes(op.BytesMoved),
				formatTime(op.StartedAt), formatElapsed(operationDuration(op, now)), len(op.Alerts), len(op.Errors))
		}
		tw.Flush()
	}
	if len(list.BucketMigrations) == 0 {
		b.WriteString("\nNo bucket migrations in flight.\n")
		return b.String()
	}
	b.WriteString("\nBucket migrations in flight:\n\n")
	renderMigrations(&b, list.BucketMigrations)
	return b.String()
}

// renderMigrations writes a table of bucket migrations.
func renderMigrations(w io.Writer, ms []bucketMigration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BUCKET\tFROM\tTO\tSTATUS\tFOR\tINDEX\tOPERATION\tTROUBLE")
	for _, m := range ms {
		op := m.OperationID
		if op == "" {
			op = "-"
			if m.Leftovers {
				op = "(leftovers)"
			}
		}
		var trouble []string
		if m.Stuck {
			stuck := "STUCK"
			if len(m.WaitingFor) > 0 {
				stuck += " (waits for " + strings.Join(m.WaitingFor, ", ") + ")"
			}
			trouble = append(trouble, stuck)
		}
		if m.Failures > 0 {
			trouble = append(trouble, fmt.Sprintf("%d failures: %s", m.Failures, m.LastError))
		}
		if len(trouble) == 0 {
			trouble = []string{"-"}
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%d\t%s\t%s\n", m.Bucket, m.SourceShard, m.DestinationShard, m.statusText(), m.InStatusFor, m.MigrationIndex, op, strings.Join(trouble, "; "))
	}
	tw.Flush()
}

// renderOperation formats one operation in detail.
func renderOperation(op operation, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Operation %s: buckets %d-%d to shard %d\n", op.OperationID, op.FromBucket, op.ToBucket, op.ToShard)
	fmt.Fprintf(&b, "  Status      %s\n", op.Status)
	fmt.Fprintf(&b, "  Buckets     %s of %s (%.1f%%)%s\n", humanCount(op.BucketsDone), humanCount(op.BucketsTotal), percent(op), bucketsSplit(op))
	fmt.Fprintf(&b, "  Documents   %s\n", humanCount(op.DocumentsMoved))
	fmt.Fprintf(&b, "  Bytes       %s\n", humanBytes(op.BytesMoved))
	fmt.Fprintf(&b, "  Started     %s\n", formatTime(op.StartedAt))
	if !op.EndedAt.IsZero() {
		fmt.Fprintf(&b, "  Ended       %s\n", formatTime(op.EndedAt))
	}
	fmt.Fprintf(&b, "  Duration    %s\n", formatElapsed(operationDuration(op, now)))
	if len(op.CurrentBuckets) > 0 {
		b.WriteString("\nMigrating now:\n\n")
		renderMigrations(&b, op.CurrentBuckets)
	}
	if len(op.Alerts) > 0 {
		b.WriteString("\nAlerts:\n")
		for _, a := range op.Alerts {
			fmt.Fprintf(&b, "  ALERT %s\n", a)
		}
	}
	if len(op.Errors) > 0 {
		b.WriteString("\nErrors (latest last):\n")
		for _, e := range op.Errors {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	return b.String()
}

// formatTime formats a server time in UTC to the second, or "-".
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
