package bench

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Row is one measured (or skipped) workload on one system.
type Row struct {
	// Workload names what was measured (bulk-insert, put, get, ycsb-a..f,
	// nats-request, nats-publish, rss, reshard-small-buckets,
	// reshard-bulk-transfer, reshard-foreground).
	Workload string
	// System is shardnode or a baseline: pebble, postgresql, go-http, nats,
	// no-move (reshard-foreground's load without a move).
	System string
	// Baseline is true for every system but shardnode.
	Baseline bool
	// Unit names what OpsPerSec counts: ops/s, docs/s or msgs/s.
	Unit string
	// OpsPerSec is the median over rounds of each round's throughput.
	OpsPerSec float64
	// MBPerSec is the median payload throughput (10^6 bytes/s), where it
	// applies.
	MBPerSec float64 `json:",omitempty"`
	// P50Ms and P99Ms are latency percentiles over every operation of
	// every round, in milliseconds (for bulk rows: per batch).
	P50Ms, P99Ms float64
	// RoundOpsPerSec is each round's throughput, in round order.
	RoundOpsPerSec []float64 `json:",omitempty"`
	// Ops is the number of operations measured over all rounds.
	Ops int64
	// Rounds is the number of rounds measured.
	Rounds int
	// VsOps is, on a baseline row, shardnode's throughput divided by this
	// row's: the median over rounds of the per-round ratios (each round
	// runs the systems one after the other, seconds apart, so a ratio
	// within a round is the least disturbed by drift in the machine's
	// load); 0 when it does not apply.
	VsOps float64 `json:",omitempty"`
	// VsP99 is, on a baseline row, shardnode's p99 divided by this row's.
	VsP99 float64 `json:",omitempty"`
	// PeakRSSMiB is the rss row's peak resident set size (VmHWM), MiB.
	PeakRSSMiB float64 `json:",omitempty"`
	// Reshard holds a resharding row's own figures (per-bucket times,
	// bytes moved, the write pause at the flip).
	Reshard *ReshardFigures `json:",omitempty"`
	// Skipped says why the row was not measured ("" when it was).
	Skipped string `json:",omitempty"`
	// Error is the error that stopped the measurement ("" when none).
	Error string `json:",omitempty"`
	// Note says what exactly was measured.
	Note string `json:",omitempty"`
}

// Measured reports whether the row holds figures.
func (r Row) Measured() bool { return r.Skipped == "" && r.Error == "" && r.Ops > 0 }

// Machine describes where the run happened.
type Machine struct {
	// CPU is the model name from /proc/cpuinfo.
	CPU string
	// Cores is the number of logical CPUs.
	Cores int
	// GOMAXPROCS is the Go scheduler's parallelism.
	GOMAXPROCS int
	// MemoryMiB is MemTotal from /proc/meminfo.
	MemoryMiB int64
	// Kernel is the kernel release.
	Kernel string
	// GoVersion is the Go toolchain of the binary.
	GoVersion string
	// Revision is the VCS revision the binary was built from, if known.
	Revision string `json:",omitempty"`
}

// Report is the outcome of a run.
type Report struct {
	// Started is when the run began.
	Started time.Time
	// Seconds is how long the run took.
	Seconds float64
	// Target says what shardnode was measured: an in-process node or a URL.
	Target string
	// PostgreSQL is the server version, or why its rows are skipped.
	PostgreSQL string
	// LoadBefore and LoadAfter are /proc/loadavg at the start and the end:
	// the machine may be shared, and a busy one lowers every figure.
	LoadBefore, LoadAfter string
	// Machine is where the run happened.
	Machine Machine
	// Options are the options in force (defaults applied).
	Options Options
	// Rows are the results, in presentation order.
	Rows []Row
}

// Row returns the row of workload on system, if there is one.
func (r *Report) Row(workload, system string) (Row, bool) {
	for _, row := range r.Rows {
		if row.Workload == workload && row.System == system {
			return row, true
		}
	}
	return Row{}, false
}

// Failed lists the rows that stopped on an error.
func (r *Report) Failed() []Row {
	var out []Row
	for _, row := range r.Rows {
		if row.Error != "" {
			out = append(out, row)
		}
	}
	return out
}

// readMachine reads the machine's description from /proc.
func readMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if kb, err := procField("/proc/meminfo", "MemTotal"); err == nil {
		m.MemoryMiB = kb / 1024
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				m.Revision = s.Value
			}
		}
	}
	return m
}

// loadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// procField reads a "Name:   1234 kB" line of a /proc file, in kB.
func procField(path, name string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			break
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, os.ErrNotExist
}
