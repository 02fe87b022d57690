package bench

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
)

// Workload names accepted by Options.Workloads, in the order they run.
const (
	WorkloadRSS   = "rss"
	WorkloadBulk  = "bulk"
	WorkloadPut   = "put"
	WorkloadGet   = "get"
	WorkloadYCSBA = "ycsb-a"
	WorkloadYCSBB = "ycsb-b"
	WorkloadYCSBC = "ycsb-c"
	WorkloadYCSBF = "ycsb-f"
	WorkloadYCSBD = "ycsb-d"
	WorkloadYCSBE = "ycsb-e"
	WorkloadNATS  = "nats"
)

// AllWorkloads lists every workload name in run order. "ycsb" in
// Options.Workloads stands for the six YCSB workloads, "reshard" for the
// six resharding workloads and "all" for everything.
func AllWorkloads() []string {
	return []string{
		WorkloadRSS, WorkloadBulk, WorkloadPut, WorkloadGet,
		WorkloadYCSBC, WorkloadYCSBB, WorkloadYCSBA, WorkloadYCSBF, WorkloadYCSBD, WorkloadYCSBE,
		WorkloadNATS,
		WorkloadReshardSmall, WorkloadReshardTwoSources, WorkloadReshardBulk, WorkloadReshardForeground, WorkloadReshardBulkForeground,
		WorkloadReshardSparse,
	}
}

// Options configure a run. Zero values take the defaults of the mode
// (Quick or full); see Defaults.
type Options struct {
	// URL is the base URL of a running shardnode node to measure; empty
	// starts a node in a temporary directory: a child process when Binary
	// is set, else in this process.
	URL string
	// Binary is a shardnode executable. When set, the node (`serve`, with
	// the scheduler a deployed node has), the nodes of the resharding
	// rows' clusters (likewise) and the get row's HTTP ceilings
	// (`bench-ceiling`, with Go's default scheduler) run as child
	// processes, while the load's clients and the raw Pebble baselines stay
	// in this process: the arrangement of servers and their clients. Empty
	// runs them all in this process, sharing one Go scheduler (tests do
	// this).
	Binary string
	// NodeCPUProfile, with Binary, is passed to the node process as serve's
	// --cpuprofile: the node's own CPU profile, written when it stops.
	NodeCPUProfile string
	// Dir is where temporary data (the node, raw Pebble) goes; empty means
	// the system's temporary directory.
	Dir string
	// Quick selects the few-second smoke mode's small counts.
	Quick bool
	// Clients is the number of concurrent clients of the closed-loop
	// workloads (YCSB, put, get, NATS request/reply).
	Clients int
	// Records is the number of records loaded for YCSB A–D, F and get.
	Records int64
	// Ops is the number of operations per round of YCSB A–D, F, put, get
	// and NATS request/reply.
	Ops int64
	// Rounds repeats every workload; rows give the median ops/s over
	// rounds and latency percentiles over every operation of every round.
	Rounds int
	// ScanRecords is the number of records loaded for YCSB E. Queries scan
	// every document server-side today, so E's cost grows with it.
	ScanRecords int64
	// ScanOps is the number of operations per round of YCSB E.
	ScanOps int64
	// BulkDocs is the number of documents inserted per round of the bulk
	// workload.
	BulkDocs int64
	// BatchSize is the number of documents per bulk_docs request (and per
	// batch of the baselines' bulk loads).
	BatchSize int
	// Senders is the number of concurrent bulk senders.
	Senders int
	// NATSMessages is the number of messages per round of NATS bulk
	// publish.
	NATSMessages int64
	// RSSDocs is the number of documents loaded before reading the peak
	// RSS; 0 skips the row (in quick mode it defaults to a small number).
	RSSDocs int64
	// PG is a PostgreSQL URL for the PostgreSQL baselines; empty or
	// unreachable skips those rows with a note.
	PG string
	// Workloads selects workloads by name (see AllWorkloads); empty runs
	// all.
	Workloads []string
	// Shards is the shard count of the databases the benchmark creates.
	Shards int
	// ReshardBuckets is the number of non-empty buckets (10 documents of
	// ~1 KiB each) reshard-small-buckets moves; reshard-sparse-range
	// loads ten times as many documents with random ids.
	ReshardBuckets int64
	// ReshardBulkMB is the size of reshard-bulk-transfer's bucket, in MB
	// (10^6 bytes) of 4 KiB documents.
	ReshardBulkMB int64
	// ReshardForegroundBuckets is the number of non-empty buckets
	// reshard-foreground moves under its write load.
	ReshardForegroundBuckets int64
	// ReshardForegroundSeconds is how long reshard-foreground measures its
	// load without a move.
	ReshardForegroundSeconds float64
	// ReshardClients is the number of reshard-foreground's and
	// reshard-bulk-foreground's writers.
	ReshardClients int
	// ReshardSendLimit is the move bandwidth (bytes per second) of
	// reshard-bulk-foreground's paced move.
	ReshardSendLimit int64
	// Progress receives one line per finished measurement; nil discards.
	Progress io.Writer `json:"-"`
	// Logger receives the in-process node's log; nil discards.
	Logger *slog.Logger `json:"-"`
}

// Defaults returns o with every zero count replaced by the default of its
// mode.
func (o Options) Defaults() Options {
	d := Options{Clients: 64, Records: 100_000, Ops: 50_000, Rounds: 3, ScanRecords: 1_000, ScanOps: 300,
		BulkDocs: 100_000, BatchSize: 1000, Senders: 4, NATSMessages: 500_000, Shards: 3,
		ReshardBuckets: 1000, ReshardBulkMB: 200, ReshardForegroundBuckets: 200, ReshardForegroundSeconds: 10, ReshardClients: 16,
		ReshardSendLimit: 20 << 20}
	if o.Quick {
		d = Options{Clients: 64, Records: 2_000, Ops: 2_000, Rounds: 1, ScanRecords: 500, ScanOps: 60,
			BulkDocs: 4_000, BatchSize: 500, Senders: 4, NATSMessages: 20_000, RSSDocs: 2_000, Shards: 3,
			ReshardBuckets: 20, ReshardBulkMB: 2, ReshardForegroundBuckets: 10, ReshardForegroundSeconds: 1, ReshardClients: 16,
			ReshardSendLimit: 1 << 20}
	}
	set := func(v *int64, def int64) {
		if *v == 0 {
			*v = def
		}
	}
	seti := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	seti(&o.Clients, d.Clients)
	set(&o.Records, d.Records)
	set(&o.Ops, d.Ops)
	seti(&o.Rounds, d.Rounds)
	set(&o.ScanRecords, d.ScanRecords)
	set(&o.ScanOps, d.ScanOps)
	set(&o.BulkDocs, d.BulkDocs)
	seti(&o.BatchSize, d.BatchSize)
	seti(&o.Senders, d.Senders)
	set(&o.NATSMessages, d.NATSMessages)
	set(&o.RSSDocs, d.RSSDocs)
	seti(&o.Shards, d.Shards)
	set(&o.ReshardBuckets, d.ReshardBuckets)
	set(&o.ReshardBulkMB, d.ReshardBulkMB)
	set(&o.ReshardForegroundBuckets, d.ReshardForegroundBuckets)
	if o.ReshardForegroundSeconds == 0 {
		o.ReshardForegroundSeconds = d.ReshardForegroundSeconds
	}
	seti(&o.ReshardClients, d.ReshardClients)
	set(&o.ReshardSendLimit, d.ReshardSendLimit)
	if len(o.Workloads) == 0 {
		o.Workloads = []string{"all"}
	}
	return o
}

// validate checks the counts and expands the workload names.
func (o Options) validate() (map[string]bool, error) {
	for _, c := range []struct {
		name string
		v    int64
	}{
		{"clients", int64(o.Clients)}, {"records", o.Records}, {"ops", o.Ops}, {"rounds", int64(o.Rounds)},
		{"scan-records", o.ScanRecords}, {"scan-ops", o.ScanOps}, {"bulk-docs", o.BulkDocs},
		{"batch", int64(o.BatchSize)}, {"senders", int64(o.Senders)}, {"nats-messages", o.NATSMessages},
		{"shards", int64(o.Shards)},
		{"reshard-buckets", o.ReshardBuckets}, {"reshard-bulk-mb", o.ReshardBulkMB},
		{"reshard-foreground-buckets", o.ReshardForegroundBuckets}, {"reshard-clients", int64(o.ReshardClients)},
		{"reshard-send-limit", o.ReshardSendLimit},
	} {
		if c.v <= 0 {
			return nil, fmt.Errorf("%s must be positive, got %d", c.name, c.v)
		}
	}
	if o.RSSDocs < 0 {
		return nil, fmt.Errorf("rss-docs must not be negative, got %d", o.RSSDocs)
	}
	if !(o.ReshardForegroundSeconds > 0) {
		return nil, fmt.Errorf("reshard-foreground-seconds must be positive, got %g", o.ReshardForegroundSeconds)
	}
	if o.Records < 2 || o.ScanRecords < 2 {
		return nil, fmt.Errorf("records and scan-records must be at least 2")
	}
	want := map[string]bool{}
	for _, w := range o.Workloads {
		w = strings.ToLower(strings.TrimSpace(w))
		switch {
		case w == "all":
			for _, a := range AllWorkloads() {
				want[a] = true
			}
		case w == "ycsb" || w == "reshard":
			for _, a := range AllWorkloads() {
				if strings.HasPrefix(a, w+"-") {
					want[a] = true
				}
			}
		case slices.Contains(AllWorkloads(), w):
			want[w] = true
		case w == "":
		default:
			return nil, fmt.Errorf("unknown workload %q: choose from all, ycsb, reshard, %s", w, strings.Join(AllWorkloads(), ", "))
		}
	}
	return want, nil
}
