package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// columns returns the table's headings.
func columns() []string {
	return []string{"workload", "system", "throughput", "MB/s", "p50 ms", "p99 ms", "sn/base ops", "sn/base p99", "note"}
}

// cells renders one row's table cells.
func cells(r Row) []string {
	dash := "-"
	c := []string{r.Workload, r.System, dash, dash, dash, dash, dash, dash, r.Note}
	switch {
	case r.Skipped != "":
		c[8] = r.Skipped
		return c
	case r.Error != "":
		c[8] = "ERROR: " + r.Error
		return c
	}
	c[2] = fmt.Sprintf("%.0f %s", r.OpsPerSec, r.Unit)
	if r.MBPerSec > 0 {
		c[3] = fmt.Sprintf("%.1f", r.MBPerSec)
	}
	if r.P99Ms > 0 {
		c[4], c[5] = fmtMs(r.P50Ms), fmtMs(r.P99Ms)
	}
	if r.VsOps > 0 {
		c[6] = fmt.Sprintf("%.2f", r.VsOps)
	}
	if r.VsP99 > 0 {
		c[7] = fmt.Sprintf("%.2f", r.VsP99)
	}
	return c
}

// WriteText writes the report as an aligned plain-text table.
func (r *Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "shardnode bench: %s; %d rounds, %d clients; %s; load average %s before, %s after\n",
		r.Target, r.Options.Rounds, r.Options.Clients, r.PostgreSQL, r.LoadBefore, r.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(columns(), "\t"))
	for _, row := range r.Rows {
		fmt.Fprintln(tw, strings.Join(cells(row), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%.0fs on %d × %s, %d MiB, %s\n", r.Seconds, r.Machine.Cores, r.Machine.CPU, r.Machine.MemoryMiB, r.Machine.GoVersion)
	return err
}

// WriteMarkdown writes the report as a markdown section: the run's
// parameters and machine, then the table.
func (r *Report) WriteMarkdown(w io.Writer) error {
	o := r.Options
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s, %.0f s. Target: %s. %s.\n\n", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Seconds, r.Target, r.PostgreSQL)
	fmt.Fprintf(&b, "Machine: %d × %s (GOMAXPROCS %d), %d MiB, Linux %s, %s; load average (1, 5, 15 min) %s before the run, %s after",
		r.Machine.Cores, r.Machine.CPU, r.Machine.GOMAXPROCS, r.Machine.MemoryMiB, r.Machine.Kernel, r.Machine.GoVersion, r.LoadBefore, r.LoadAfter)
	if r.Machine.Revision != "" {
		fmt.Fprintf(&b, ", revision %s", r.Machine.Revision)
	}
	b.WriteString(".\n\n")
	if slices.ContainsFunc(r.Rows, func(row Row) bool { return !isReshard(row.Workload) }) {
		fmt.Fprintf(&b, "Parameters: %d clients, %d records, %d ops per round, %d rounds; YCSB E: %d records, %d ops; bulk: %d docs in batches of %d from %d senders; NATS publish: %d messages; RSS: %d docs; %d shards.\n\n",
			o.Clients, o.Records, o.Ops, o.Rounds, o.ScanRecords, o.ScanOps, o.BulkDocs, o.BatchSize, o.Senders, o.NATSMessages, o.RSSDocs, o.Shards)
	}
	if slices.ContainsFunc(r.Rows, func(row Row) bool { return isReshard(row.Workload) }) {
		fmt.Fprintf(&b, "Resharding (one move per workload, each on its own in-process %d-node cluster, databases of %d shards with replication factor %d; measured once, --rounds does not apply): %d small buckets; a bulk bucket of %d MB (moved again in a database of replication factor 1, row shardnode-rf1); %d buckets under %d writers, %.0f s without a move; the bulk bucket under the same writers, unpaced, then paced at %.1f MiB/s.\n\n",
			reshardNodes, reshardShards, reshardRF, o.ReshardBuckets, o.ReshardBulkMB, o.ReshardForegroundBuckets, o.ReshardClients, o.ReshardForegroundSeconds, float64(o.ReshardSendLimit)/(1<<20))
	}
	b.WriteString("Throughput is the median over rounds; p50 and p99 are over every operation of every round. `sn/base ops` is shardnode's throughput divided by the baseline's on the same workload, the median of the per-round ratios (higher is better for shardnode); `sn/base p99` divides the p99s (lower is better).\n\n")
	b.WriteString("| " + strings.Join(columns(), " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(columns())) + "\n")
	for _, row := range r.Rows {
		c := cells(row)
		for i := range c {
			c[i] = strings.ReplaceAll(c[i], "|", `\|`)
		}
		c[0], c[1] = "`"+c[0]+"`", "**"+c[1]+"**"
		if row.Baseline {
			c[1] = row.System
		}
		b.WriteString("| " + strings.Join(c, " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the whole report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// fmtMs formats milliseconds with three significant digits or more.
func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}
