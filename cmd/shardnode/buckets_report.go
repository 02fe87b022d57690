package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// maxReportGroups is the most groups the node splits a report into.
const maxReportGroups = 4096

// reportFlags are `shardnode buckets report`'s flags.
type reportFlags struct {
	nodeFlags
	from, to int64
	groups   int
	bucket   int64
	ids      int
	json     bool
}

// bucketsReport is GET /databases/{db}/buckets' answer.
type bucketsReport struct {
	From   uint32        `json:"From"`
	To     uint32        `json:"To"`
	Groups []reportGroup `json:"Groups"`
}

// reportGroup is one group of consecutive buckets in the report.
type reportGroup struct {
	From           uint32 `json:"From"`
	To             uint32 `json:"To"`
	Shards         []int  `json:"Shards"`
	DocumentsCount int64  `json:"DocumentsCount"`
	Size           int64  `json:"Size"`
}

// bucketInfo is GET /databases/{db}/buckets/{bucket}'s answer.
type bucketInfo struct {
	Bucket         uint32   `json:"Bucket"`
	Shards         []int    `json:"Shards"`
	DocumentsCount int64    `json:"DocumentsCount"`
	Size           int64    `json:"Size"`
	ChangeVector   string   `json:"ChangeVector"`
	Documents      []string `json:"Documents"`
	// ByShard is absent from servers older than the field.
	ByShard []shardHolding `json:"ByShard"`
}

// shardHolding is what one shard holds of a bucket, and the part of it in
// buckets it does not own, which the bucket's figures leave out.
type shardHolding struct {
	Shard                  int   `json:"Shard"`
	DocumentsCount         int64 `json:"DocumentsCount"`
	Size                   int64 `json:"Size"`
	NotOwnedDocumentsCount int64 `json:"NotOwnedDocumentsCount"`
	NotOwnedSize           int64 `json:"NotOwnedSize"`
}

// newBucketsReportCmd returns `shardnode buckets report`.
func newBucketsReportCmd() *cobra.Command {
	var f reportFlags
	cmd := &cobra.Command{
		Use:   "report --db DB [--from A --to B --groups N | --bucket N]",
		Short: "Show how documents and bytes spread over the buckets, and which shards hold them",
		Long: `Print the buckets report of a database: the bucket range A..B (default the
whole space, 0..1048575) split into N groups of equal width (default 32,
at most 4096), each with the shards that own or hold data in it, its
documents, its size, and a bar of its size relative to the largest group.
Documents and sizes count each document once, on the shard that owns its
bucket, also while the bucket moves and is on two shards.

With --bucket N, print one bucket instead: the shards holding it, its
documents and size (the owner's), any copy on a shard that does not own it
(a move in flight, or leftovers), its merged change vector, and its
document ids (the first --ids of them).`,
		Example: `  shardnode buckets report --db shop
  shardnode buckets report --db shop --from 0 --to 4095 --groups 16
  shardnode buckets report --db shop --bucket 17`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(cmd); err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			_, tty := outputTerminal(cmd.OutOrStdout())
			if cmd.Flags().Changed("bucket") {
				return runBucket(cmd.Context(), c, f, cmd.OutOrStdout())
			}
			return runReport(cmd.Context(), c, f, cmd.OutOrStdout(), tty)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.Int64Var(&f.from, "from", 0, "first bucket of the range")
	fl.Int64Var(&f.to, "to", maxBucket, "last bucket of the range, inclusive")
	fl.IntVar(&f.groups, "groups", 0, "groups to split the range into, 1..4096 (default the node's, 32)")
	fl.Int64Var(&f.bucket, "bucket", 0, "show this one bucket instead of a range")
	fl.IntVar(&f.ids, "ids", 20, "with --bucket: document ids to list")
	fl.BoolVar(&f.json, "json", false, "print the node's JSON answer as is")
	return cmd
}

// validate checks the flags before anything is sent.
func (f *reportFlags) validate(cmd *cobra.Command) error {
	fl := cmd.Flags()
	if fl.Changed("bucket") {
		if fl.Changed("from") || fl.Changed("to") || fl.Changed("groups") {
			return errors.New("--bucket shows one bucket: leave out --from, --to and --groups")
		}
		return validBucket("bucket", f.bucket)
	}
	if fl.Changed("ids") {
		return errors.New("--ids goes with --bucket")
	}
	if err := validBucket("from", f.from); err != nil {
		return err
	}
	if err := validBucket("to", f.to); err != nil {
		return err
	}
	if f.from > f.to {
		return fmt.Errorf("--from %d is after --to %d: the range is from..to, inclusive", f.from, f.to)
	}
	if fl.Changed("groups") && (f.groups < 1 || f.groups > maxReportGroups) {
		return fmt.Errorf("--groups %d: give 1..%d", f.groups, maxReportGroups)
	}
	return nil
}

// runReport prints the report of a bucket range.
func runReport(ctx context.Context, c *apiClient, f reportFlags, out io.Writer, tty bool) error {
	q := url.Values{}
	q.Set("from", strconv.FormatInt(f.from, 10))
	q.Set("to", strconv.FormatInt(f.to, 10))
	if f.groups > 0 {
		q.Set("groups", strconv.Itoa(f.groups))
	}
	b, err := c.send(ctx, "GET", dbPath(f.db, "buckets"), q, nil)
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(out, b)
	}
	var rep bucketsReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("decode buckets report: %w", err)
	}
	_, err = io.WriteString(out, renderReport(f.db, rep, tty))
	return err
}

// renderReport formats the buckets report as a table.
func renderReport(db string, rep bucketsReport, tty bool) string {
	const barWidth = 20
	var maxSize, docs, size int64
	for _, g := range rep.Groups {
		maxSize = max(maxSize, g.Size)
		docs += g.DocumentsCount
		size += g.Size
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "Buckets %d-%d of %q in %d %s\n\n", rep.From, rep.To, db, len(rep.Groups), plural(len(rep.Groups), "group", "groups"))
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BUCKETS\tSHARDS\tDOCUMENTS\tSIZE\t\t")
	for _, g := range rep.Groups {
		fmt.Fprintf(tw, "%d-%d\t%s\t%s\t%s\t\t%s\n", g.From, g.To, joinInts(g.Shards), humanCount(g.DocumentsCount), humanBytes(g.Size), sizeBar(g.Size, maxSize, barWidth, tty))
	}
	fmt.Fprintf(tw, "total\t\t%s\t%s\t\t\n", humanCount(docs), humanBytes(size))
	tw.Flush()
	// The right alignment pads the last (bar) column too: trim it.
	lines := strings.Split(buf.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// sizeBar draws size relative to the largest as up to width cells; any
// non-zero size gets at least one.
func sizeBar(size, maxSize int64, width int, tty bool) string {
	cell := "#"
	if tty {
		cell = "█"
	}
	if size <= 0 || maxSize <= 0 {
		return ""
	}
	n := max(1, int(float64(size)/float64(maxSize)*float64(width)+0.5))
	return strings.Repeat(cell, n)
}

// joinInts formats shard numbers: "0,2", or "-" for none.
func joinInts(v []int) string {
	if len(v) == 0 {
		return "-"
	}
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// runBucket prints one bucket.
func runBucket(ctx context.Context, c *apiClient, f reportFlags, out io.Writer) error {
	b, err := c.send(ctx, "GET", dbPath(f.db, "buckets", strconv.FormatInt(f.bucket, 10)), nil, nil)
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(out, b)
	}
	var info bucketInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return fmt.Errorf("decode bucket: %w", err)
	}
	_, err = io.WriteString(out, renderBucket(f.db, info, f.ids))
	return err
}

// renderBucket formats one bucket and its first ids.
func renderBucket(db string, info bucketInfo, ids int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Bucket %d of %q\n", info.Bucket, db)
	fmt.Fprintf(&b, "  Shards         %s\n", joinInts(info.Shards))
	fmt.Fprintf(&b, "  Documents      %s\n", humanCount(info.DocumentsCount))
	fmt.Fprintf(&b, "  Size           %s\n", humanBytes(info.Size))
	// The figures are the owner's; a copy elsewhere (the bucket is
	// moving, or leftovers of a move) is shown apart.
	for _, h := range info.ByShard {
		if h.NotOwnedDocumentsCount > 0 || h.NotOwnedSize > 0 {
			fmt.Fprintf(&b, "  Not counted    shard %d also holds %s %s (%s) without owning the bucket: a move in flight, or leftovers\n",
				h.Shard, humanCount(h.NotOwnedDocumentsCount), plural(int(h.NotOwnedDocumentsCount), "document", "documents"), humanBytes(h.NotOwnedSize))
		}
	}
	cv := info.ChangeVector
	if cv == "" {
		cv = "-"
	}
	fmt.Fprintf(&b, "  Change vector  %s\n", cv)
	if len(info.Documents) == 0 {
		return b.String()
	}
	b.WriteString("  Document ids:\n")
	shown := info.Documents[:min(max(ids, 0), len(info.Documents))]
	for _, id := range shown {
		fmt.Fprintf(&b, "    %s\n", id)
	}
	total := max(int64(len(info.Documents)), info.DocumentsCount)
	if more := total - int64(len(shown)); more > 0 {
		fmt.Fprintf(&b, "    ... and %s more\n", humanCount(more))
	}
	return b.String()
}

// printJSON prints a JSON answer indented.
func printJSON(out io.Writer, b []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		buf.Reset()
		buf.Write(b)
	}
	buf.WriteByte('\n')
	_, err := out.Write(buf.Bytes())
	return err
}
