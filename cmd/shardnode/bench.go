package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shardnode/shardnode/bench"
)

// benchFlags are `shardnode bench`'s flags beyond bench.Options.
type benchFlags struct {
	out        string
	jsonOut    string
	workloads  string
	cpuProfile string
	inProcess  bool
}

func newBenchCmd() *cobra.Command {
	var o bench.Options
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure shardnode beside raw Pebble, NATS, a Go HTTP handler and PostgreSQL",
		Long: `Measure shardnode and its baselines in one run, on this machine.

Unless --url points at a running node, it starts a node in a temporary
directory as a child process (this binary's serve, with serve's default
scheduler), and the get row's trivial HTTP servers as child processes
too (with Go's default scheduler, their best here); the clients and raw
Pebble run in this process.
The resharding rows start 3-node clusters of such child processes.
--in-process runs the node, those servers and the clusters' nodes in this
process instead, sharing its scheduler with the clients. Workloads
(select with --workloads):

  bulk      bulk insert of 1 KiB documents through bulk_docs (docs/s, MB/s)
  put       durable single-document PUT of new documents
  get       point GET, uniform over the loaded records
  ycsb-a..f the YCSB core workloads (zipfian; latest for D; scans for E)
  nats      NATS request/reply and bulk publish on an embedded server
  rss       peak RSS of the node's process after loading --rss-docs
            documents (not with --url)
  reshard-* resharding on 3-node clusters: small buckets, small
            buckets off two source shards at once against one, one
            bulk bucket, the flip under a write load, a bulk bucket
            under a write load unpaced and paced (--reshard-send-limit),
            and a sparse shard's whole range under writes into every
            bucket

Each shardnode row sits beside baselines on the same workload: raw Pebble
with the storage package's tuned options, a trivial Go HTTP handler (get),
and PostgreSQL when --pg is given (start one with scripts/pg-start.sh).
Throughput is the median over --rounds; p50 and p99 are over every
operation of every round. --quick is a few-second smoke run that still
produces every row.

Defaults (full / --quick): --clients 64/64, --records 100000/2000,
--ops 50000/2000, --rounds 3/1, --scan-records 1000/500, --scan-ops 300/60,
--bulk-docs 100000/4000, --batch 1000/500, --senders 4/4,
--nats-messages 500000/20000, --rss-docs 0/2000.

The table goes to stdout; --out FILE also writes it as markdown, and the
full results as JSON to FILE.json (or --json FILE). The command fails if
any workload failed.`,
		Example: `  shardnode bench --quick
  shardnode bench --pg "$(scripts/pg-start.sh)" --out bench.md
  shardnode bench --url http://127.0.0.1:8080 --workloads get,put`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.workloads != "" {
				o.Workloads = strings.Split(f.workloads, ",")
			}
			o.Progress = cmd.ErrOrStderr()
			if !f.inProcess {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("bench: find this binary to run the node as a child process (or use --in-process): %w", err)
				}
				o.Binary = exe
				if f.cpuProfile != "" && o.URL == "" {
					o.NodeCPUProfile = f.cpuProfile + ".node"
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runBench(ctx, o, f, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.URL, "url", "", "base URL of a running node to measure (default: start one in a temporary directory)")
	fl.BoolVar(&f.inProcess, "in-process", false, "run the node, the HTTP ceilings and the resharding clusters' nodes in this process, sharing its scheduler with the clients, instead of as child processes")
	fl.StringVar(&o.Dir, "dir", "", "directory for temporary data (default: the system's temporary directory)")
	fl.BoolVar(&o.Quick, "quick", false, "a few-second smoke run with small counts that still produces every row")
	fl.IntVar(&o.Clients, "clients", 0, "concurrent clients of the closed-loop workloads (default 64)")
	fl.Int64Var(&o.Records, "records", 0, "records loaded for YCSB A-D, F and get")
	fl.Int64Var(&o.Ops, "ops", 0, "operations per round of YCSB A-D, F, put, get and NATS request/reply")
	fl.IntVar(&o.Rounds, "rounds", 0, "rounds of every workload")
	fl.Int64Var(&o.ScanRecords, "scan-records", 0, "records loaded for YCSB E (queries scan them all server-side today)")
	fl.Int64Var(&o.ScanOps, "scan-ops", 0, "operations per round of YCSB E")
	fl.Int64Var(&o.BulkDocs, "bulk-docs", 0, "documents per round of the bulk insert")
	fl.IntVar(&o.BatchSize, "batch", 0, "documents per bulk_docs request")
	fl.IntVar(&o.Senders, "senders", 0, "concurrent bulk senders")
	fl.Int64Var(&o.NATSMessages, "nats-messages", 0, "messages per round of the NATS bulk publish")
	fl.Int64Var(&o.RSSDocs, "rss-docs", 0, "documents loaded before reading peak RSS; 0 skips the row (in-process node only)")
	fl.IntVar(&o.Shards, "shards", 0, "shards of the databases the benchmark creates (default 3)")
	fl.Int64Var(&o.ReshardSendLimit, "reshard-send-limit", 0, "move bandwidth in bytes per second of reshard-bulk-foreground's paced move (default 20 MiB/s)")
	fl.StringVar(&o.PG, "pg", "", "PostgreSQL URL for the PostgreSQL baselines, e.g. postgres://postgres@127.0.0.1:5432/bench?sslmode=disable")
	fl.StringVar(&f.workloads, "workloads", "", "comma-separated workloads: all, ycsb, "+strings.Join(bench.AllWorkloads(), ", ")+" (default all)")
	fl.StringVar(&f.out, "out", "", "also write the table as markdown to FILE, and the JSON results to FILE.json")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (clients, baselines, and the node with --in-process) to FILE; a child node's goes to FILE.node")
	fl.StringVar(&f.jsonOut, "json", "", "write the JSON results to this file (default FILE.json with --out)")
	cmd.SetContext(context.Background())
	return cmd
}

// runBench runs the benchmark and writes its outputs.
func runBench(ctx context.Context, o bench.Options, f benchFlags, stdout io.Writer) error {
	if f.cpuProfile != "" {
		stop, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer stop()
	}
	rep, err := bench.Run(ctx, o)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := rep.WriteText(stdout); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	if f.out != "" {
		if err := writeFile(f.out, rep.WriteMarkdown); err != nil {
			return err
		}
		if f.jsonOut == "" {
			f.jsonOut = f.out + ".json"
		}
	}
	if f.jsonOut != "" {
		if err := writeFile(f.jsonOut, rep.WriteJSON); err != nil {
			return err
		}
	}
	if failed := rep.Failed(); len(failed) > 0 {
		names := make([]string, len(failed))
		for i, r := range failed {
			names[i] = r.Workload + "/" + r.System
		}
		return fmt.Errorf("bench: %d workloads failed: %s", len(failed), strings.Join(names, ", "))
	}
	return nil
}

// startCPUProfile profiles this process's CPU into path until the
// returned function is called.
func startCPUProfile(path string) (func(), error) {
	fh, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		fh.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = fh.Close()
	}, nil
}

// newBenchCeilingCmd is the hidden `shardnode bench-ceiling`: the get
// row's trivial HTTP server, which `shardnode bench` runs as a child
// process, so that its ratio compares two servers each in its own
// process. It keeps Go's default scheduler, as a Go service is deployed:
// serve's four slots per CPU made it slower here (session 22 in
// docs/benchmarks.md), and a ceiling must be the handler at its best.
func newBenchCeilingCmd() *cobra.Command {
	var server, listen string
	cmd := &cobra.Command{
		Use:    "bench-ceiling",
		Short:  "Serve the benchmark's trivial HTTP handler (run by shardnode bench)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("bench-ceiling: listen: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return bench.ServeCeiling(ctx, server, ln)
		},
	}
	cmd.Flags().StringVar(&server, "server", bench.CeilingGoHTTP, "the HTTP server: "+bench.CeilingGoHTTP+" or "+bench.CeilingFastHTTP)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "the address to serve on")
	cmd.SetContext(context.Background())
	return cmd
}

// writeFile writes one output file with write.
func writeFile(path string, write func(io.Writer) error) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := write(fh); err != nil {
		fh.Close()
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}
