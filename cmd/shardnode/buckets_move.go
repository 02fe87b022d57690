package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// moveFlags are `shardnode buckets move`'s flags.
type moveFlags struct {
	nodeFlags
	from, to int64
	shard    int
	detach   bool
	plain    bool
}

// newBucketsMoveCmd returns `shardnode buckets move`.
func newBucketsMoveCmd() *cobra.Command {
	var f moveFlags
	cmd := &cobra.Command{
		Use:   "move --db DB --from A --to B --shard S",
		Short: "Move a range of buckets to a shard, online, and follow it to the end",
		Long: `Move buckets A..B (inclusive) of a database to shard S while the database
stays online, then follow the move until it completes.

The node starts a resharding operation that moves, one bucket at a time per
source shard, every bucket of the range not already on S; empty buckets
change owner together. Reads and writes go on during the move: a document
is readable throughout, and no acknowledged write is lost.

While it runs, a terminal shows one progress line redrawn in place: percent
done (of the bytes to move, estimated when following starts from what the
range holds on other shards; of the buckets when there is no estimate),
buckets done of total, documents and bytes moved (of the estimate), the
recent rate (in "data buckets/s", the buckets that moved with data: empty
buckets change owner in bulk, thousands at once, and are not counted in
it; and in bytes/s, what is sent of a bucket still moving included), the
elapsed time and an ETA, and the buckets migrating now with their step
(Moving, Moved, OwnershipTransferred, FinalPass). When the output is not a
terminal (or with --plain) it prints a plain line instead each time the
progress changes (a bucket done, a bucket failing or stuck, the end), and
every 10s while nothing does. Buckets that keep failing or sit in one step
too long are printed once as ALERT lines, and the errors the operation
records as ERROR lines. At the end comes a summary: buckets (with data,
moved one at a time, and empty, moved at once), documents, bytes, duration
and the average time per bucket with data; the last progress line shows
the same rates.

If the operation is cancelled ("buckets cancel"), its bucket in flight still
finishes its move and counts: the command goes on, saying it waits for
that bucket, and prints the summary once no bucket is in flight.

Progress comes from the database's event stream (GET /databases/DB/events);
if the stream fails the command polls the operation every 500ms.

Ctrl-C stops following, not the move: the operation keeps running on the
server, and "shardnode buckets status --id ID --follow" picks it up again.

The command fails at once if the node refuses the move (a bucket range
outside 0..1048575, a shard or database that does not exist, or a range
that overlaps a running operation, which is a 409 Conflict).`,
		Example: `  # Move the first quarter of the bucket space to shard 3:
  shardnode buckets move --url http://127.0.0.1:8080 --db shop --from 0 --to 262143 --shard 3

  # Start a move and return at once with its operation id:
  shardnode buckets move --db shop --from 17 --to 17 --shard 1 --detach`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(cmd); err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return runMove(ctx, c, f, cmd.OutOrStdout(), defaultFollowOptions)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.Int64Var(&f.from, "from", 0, "first bucket of the range, 0..1048575 (required)")
	fl.Int64Var(&f.to, "to", 0, "last bucket of the range, inclusive, from..1048575 (required)")
	fl.IntVar(&f.shard, "shard", 0, "shard to move the buckets to (required)")
	fl.BoolVar(&f.detach, "detach", false, "start the move, print its operation id and return without following it")
	fl.BoolVar(&f.plain, "plain", false, "print one plain line per change even on a terminal")
	return cmd
}

// validate checks the flags before anything is sent.
func (f *moveFlags) validate(cmd *cobra.Command) error {
	var missing []string
	for _, name := range []string{"db", "from", "to", "shard"} {
		if !cmd.Flags().Changed(name) {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s: give the database, the bucket range and the destination shard, e.g. --db shop --from 0 --to 1023 --shard 1", strings.Join(missing, ", "))
	}
	return validateMove(f.from, f.to, f.shard)
}

// validateMove checks a move's bucket range and shard.
func validateMove(from, to int64, shard int) error {
	if err := validBucket("from", from); err != nil {
		return err
	}
	if err := validBucket("to", to); err != nil {
		return err
	}
	if from > to {
		return fmt.Errorf("--from %d is after --to %d: the range is from..to, inclusive", from, to)
	}
	if shard < 0 {
		return fmt.Errorf("--shard %d: shard numbers start at 0", shard)
	}
	return nil
}

// runMove starts the move and follows it.
func runMove(ctx context.Context, c *apiClient, f moveFlags, out io.Writer, opts followOptions) error {
	started := time.Now()
	b, err := c.send(ctx, http.MethodPost, dbPath(f.db, "resharding"), nil, map[string]any{
		"FromBucket": f.from, "ToBucket": f.to, "ToShard": f.shard})
	var se *serverError
	if errors.As(err, &se) {
		return fmt.Errorf("the node refused the move: %s", se.Msg+typeSuffix(se))
	}
	if err != nil {
		return err
	}
	var accepted struct {
		OperationID string `json:"OperationId"`
	}
	if err := json.Unmarshal(b, &accepted); err != nil || accepted.OperationID == "" {
		return fmt.Errorf("unexpected answer to the move: %q", b)
	}
	id := accepted.OperationID
	if f.detach {
		fmt.Fprintln(out, id)
		return nil
	}
	fmt.Fprintf(out, "Moving buckets %d-%d of %q to shard %d: operation %s\n", f.from, f.to, f.db, f.shard, id)
	return followOperation(ctx, c, f.db, id, started, out, f.plain, opts)
}

// typeSuffix renders an error's type and status for a message.
func typeSuffix(se *serverError) string {
	if se.Type == "" {
		return fmt.Sprintf(" (HTTP %d)", se.Status)
	}
	return fmt.Sprintf(" (%s, HTTP %d)", se.Type, se.Status)
}

// followOperation follows operation id of db to its end (for a cancelled
// operation, until its bucket in flight has finished moving) and prints
// its summary. since is when it started (zero: the operation's StartedAt).
func followOperation(ctx context.Context, c *apiClient, db, id string, since time.Time, out io.Writer, plain bool, opts followOptions) error {
	width, tty := outputTerminal(out)
	tr := newTracker(out, tty && !plain, width, time.Now)
	tr.since, tr.plainEvery = since, opts.plainEvery
	tr.estimate = func(op operation) int64 { return estimateTotal(ctx, c, db, op) }
	fl := &follower{c: c, db: db, id: id, opts: opts, tr: tr, now: time.Now}
	op, err := fl.run(ctx)
	tr.end()
	if ctx.Err() != nil && (op == nil || !op.settled()) {
		if op.finished() {
			fmt.Fprintf(out, "\nStopped following. Operation %s is %s; its %s keeps moving on the server.\n", id, strings.ToLower(op.Status),
				plural(len(op.CurrentBuckets), "bucket in flight", "buckets in flight"))
		} else {
			fmt.Fprintf(out, "\nStopped following. Operation %s keeps running on the server.\n", id)
		}
		fmt.Fprintf(out, "Follow it again with:\n  shardnode buckets status --url %s --db %s --id %s --follow\n", c.base, db, id)
		fmt.Fprintf(out, "or watch the raw events with:\n  curl -N %s%s\n", c.base, dbPath(db, "events"))
		return errInterrupted
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("following operation %s: %w", id, err)
	}
	// The duration the last progress line showed, so the summary's rates
	// agree with it.
	fmt.Fprint(out, renderSummary(*op, tr.wall, tr.waited))
	if op.Status != statusCompleted {
		return fmt.Errorf("operation %s ended %s", id, op.Status)
	}
	return nil
}

// estimateTotal estimates the bytes operation op of db moves in all, as of
// the state op: what it moved so far plus what its range holds on shards
// other than its destination (GET /databases/{db}/buckets, each bucket
// counted on its owner). 0 when the node does not tell within 2 s, or the
// operation has finished; progress then counts buckets.
func estimateTotal(ctx context.Context, c *apiClient, db string, op operation) int64 {
	if op.finished() {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var report struct {
		Groups []struct {
			ByShard []struct {
				Shard        int   `json:"Shard"`
				Size         int64 `json:"Size"`
				NotOwnedSize int64 `json:"NotOwnedSize"`
			} `json:"ByShard"`
		} `json:"Groups"`
	}
	q := url.Values{"from": {strconv.FormatUint(uint64(op.FromBucket), 10)}, "to": {strconv.FormatUint(uint64(op.ToBucket), 10)}, "groups": {"1"}}
	if err := c.getJSON(ctx, dbPath(db, "buckets"), q, &report); err != nil {
		return 0
	}
	left := int64(0)
	for _, g := range report.Groups {
		for _, sh := range g.ByShard {
			if sh.Shard != op.ToShard {
				left += max(sh.Size-sh.NotOwnedSize, 0)
			}
		}
	}
	if left == 0 {
		return 0 // nothing left to carry: count buckets
	}
	return movedBytes(op) + left
}
