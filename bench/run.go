package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Systems' names as they appear in rows.
const (
	sysShardnode = "shardnode"
	sysPebble    = "pebble"
	sysPG        = "postgresql"
	sysHTTP      = "go-http"
	sysFastHTTP  = "go-fasthttp"
	sysNATS      = "nats"
)

// Row workload names that differ from the option names.
const (
	rowBulk        = "bulk-insert"
	rowNATSRequest = "nats-request"
	rowNATSPublish = "nats-publish"
)

// sysRun is one system during a run: its datasets, or why it is skipped.
type sysRun struct {
	label    string // the rows' system name
	sys      system
	skip     string
	datasets map[string]*dsState
}

// run is the state of one Run.
type run struct {
	o        Options
	started  time.Time
	root     string
	seed     uint64
	progress io.Writer
	hc       *http.Client

	sn, pebble, pg, ceiling, fastCeiling *sysRun
	// ownNode is set when the run started its node (not --url);
	// nodeProc is that node's process when it runs as a child (Binary).
	ownNode  bool
	nodeProc *childProc
}

// Run measures every selected workload and returns the report. A workload
// that fails on one system gets a row with its Error and the run goes on;
// Run itself fails only when it cannot set up (bad options, no node).
func Run(ctx context.Context, opts Options) (*Report, error) {
	o := opts.Defaults()
	want, err := o.validate()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	if o.Dir != "" {
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("bench dir: %w", err)
		}
	}
	root, err := os.MkdirTemp(o.Dir, "shardnode-bench-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(root)
	r := &run{o: o, started: started, root: root, seed: uint64(started.UnixNano()), progress: o.Progress, hc: newHTTPClient(o.Clients)}
	if r.progress == nil {
		r.progress = io.Discard
	}
	defer r.hc.CloseIdleConnections()
	rep := &Report{Started: started, Machine: readMachine(), Options: o, LoadBefore: loadAvg()}
	rep.Options.PG = redactURL(o.PG)

	base := strings.TrimRight(o.URL, "/")
	onlyReshard := true
	for w := range want {
		onlyReshard = onlyReshard && isReshard(w)
	}
	switch {
	case base == "" && onlyReshard:
		// The resharding rows start clusters of their own.
		r.ownNode = true
		rep.Target = fmt.Sprintf("%s %d-node clusters (data in a temporary directory), one per resharding workload", clusterKind(o), reshardNodes)
	case base == "" && o.Binary != "":
		r.logf("starting a node process (%s serve) in %s", o.Binary, root)
		p, url, err := startChildNode(ctx, r.hc, o.Binary, filepath.Join(root, "node"), o.NodeCPUProfile)
		if err != nil {
			return nil, fmt.Errorf("start node: %w", err)
		}
		defer func() {
			if err := p.stop(); err != nil {
				r.logf("stop node: %v", err)
			}
		}()
		base, r.ownNode, r.nodeProc = url, true, p
		rep.Target = fmt.Sprintf("node process %d (%s serve, data in a temporary directory), %s", p.pid(), o.Binary, base)
	case base == "":
		r.logf("starting an in-process node in %s", root)
		n, err := startNode(ctx, filepath.Join(root, "node"), o.Logger)
		if err != nil {
			return nil, fmt.Errorf("start node: %w", err)
		}
		defer n.Close()
		base = n.HTTPURL()
		r.ownNode = true
		rep.Target = "in-process node (data in a temporary directory), " + base
		if slices.ContainsFunc(AllWorkloads(), func(w string) bool { return want[w] && isReshard(w) }) {
			rep.Target += fmt.Sprintf("; resharding rows: %s %d-node clusters, one per workload", clusterKind(o), reshardNodes)
		}
	default:
		var buf bytes.Buffer
		if err := do(ctx, r.hc, http.MethodGet, base+"/healthz", nil, http.StatusOK, &buf); err != nil {
			return nil, fmt.Errorf("node at %s: %w", base, err)
		}
		rep.Target = base
	}
	if o.Binary != "" && want[WorkloadGet] {
		rep.Target += "; HTTP ceilings: child processes (" + o.Binary + " bench-ceiling)"
	}
	prefix := fmt.Sprintf("bench%06x_", r.seed&0xffffff)
	r.sn = &sysRun{label: sysShardnode, sys: &shardnodeSystem{hc: r.hc, base: base, shards: o.Shards, prefix: prefix}}
	r.pebble = &sysRun{label: sysPebble, sys: newPebbleSystem(filepath.Join(root, "pebble"), o.Shards)}
	switch pg, err := r.connectPG(ctx, prefix); {
	case o.PG == "":
		r.pg = &sysRun{label: sysPG, skip: "skipped: no --pg"}
		rep.PostgreSQL = r.pg.skip
	case err != nil:
		r.pg = &sysRun{label: sysPG, skip: "skipped: PostgreSQL unreachable: " + err.Error()}
		rep.PostgreSQL = r.pg.skip
	default:
		r.pg = &sysRun{label: sysPG, sys: pg}
		rep.PostgreSQL = "PostgreSQL " + pg.version(ctx)
	}
	defer r.closeAll()

	sp := specs()
	for _, w := range AllWorkloads() {
		if !want[w] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("benchmark interrupted before %s: %w", w, err)
		}
		switch w {
		case WorkloadRSS:
			rep.Rows = append(rep.Rows, r.rss(ctx))
		case WorkloadBulk:
			rep.Rows = append(rep.Rows, r.bulk(ctx)...)
		case WorkloadNATS:
			rep.Rows = append(rep.Rows, r.nats(ctx)...)
		case WorkloadReshardSmall, WorkloadReshardTwoSources, WorkloadReshardBulk, WorkloadReshardForeground, WorkloadReshardBulkForeground, WorkloadReshardSparse:
			rep.Rows = append(rep.Rows, r.reshard(ctx, w)...)
		case WorkloadGet:
			if r.ceiling == nil {
				r.ceiling, r.fastCeiling = r.startCeiling(ctx, sysHTTP), r.startCeiling(ctx, sysFastHTTP)
			}
			rep.Rows = append(rep.Rows, r.measureSpec(ctx, sp[w], []*sysRun{r.sn, r.ceiling, r.fastCeiling, r.pg, r.pebble})...)
		default:
			rep.Rows = append(rep.Rows, r.measureSpec(ctx, sp[w], []*sysRun{r.sn, r.pg, r.pebble})...)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("benchmark interrupted: %w", err)
	}
	sortRows(rep.Rows)
	fillRatios(rep.Rows)
	rep.Seconds = time.Since(started).Seconds()
	rep.LoadAfter = loadAvg()
	return rep, nil
}

// clusterKind says how the resharding rows' clusters run.
func clusterKind(o Options) string {
	if o.Binary != "" {
		return "node-process (" + o.Binary + " serve)"
	}
	return "in-process"
}

// startCeiling starts the trivial HTTP server label names (sysHTTP or
// sysFastHTTP); an error skips its rows.
func (r *run) startCeiling(ctx context.Context, label string) *sysRun {
	s := &sysRun{label: label}
	if c, err := startHTTPCeiling(ctx, r.o.Binary, r.root, label); err != nil {
		s.skip = "error: " + err.Error()
	} else {
		s.sys = c
	}
	return s
}

// connectPG connects to o.PG; it returns nil, nil when no URL is given.
func (r *run) connectPG(ctx context.Context, prefix string) (*pgSystem, error) {
	if r.o.PG == "" {
		return nil, nil
	}
	return connectPG(ctx, r.o.PG, prefix)
}

// logf writes one progress line.
func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, "bench %6.1fs: "+format+"\n", append([]any{time.Since(r.started).Seconds()}, args...)...)
}

// nextSeed returns a fresh seed for one measurement's random sources.
func (r *run) nextSeed() uint64 {
	r.seed = r.seed*6364136223846793005 + 1442695040888963407
	return r.seed
}

// closeAll drops every dataset and closes every system.
func (r *run) closeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range []*sysRun{r.sn, r.pg, r.pebble, r.ceiling, r.fastCeiling} {
		if s == nil || s.sys == nil {
			continue
		}
		for name, st := range s.datasets {
			if err := st.ds.drop(ctx); err != nil {
				r.logf("drop %s dataset %s: %v", s.sys.name(), name, err)
			}
		}
		if err := s.sys.close(); err != nil {
			r.logf("close %s: %v", s.sys.name(), err)
		}
	}
}

// datasetFor returns s's dataset called name, creating and loading it with
// records the first time.
func (r *run) datasetFor(ctx context.Context, s *sysRun, name string, scans bool) (*dsState, error) {
	if st, ok := s.datasets[name]; ok {
		return st, nil
	}
	var records int64
	switch name {
	case dsYCSB:
		records = r.o.Records
	case dsYCSBE:
		records = r.o.ScanRecords
	}
	ds, err := s.sys.dataset(ctx, name, scans)
	if err != nil {
		return nil, err
	}
	st := &dsState{ds: ds, counter: newInsertCounter(records), loaded: records}
	if s.datasets == nil {
		s.datasets = map[string]*dsState{}
	}
	s.datasets[name] = st
	if _, static := s.sys.(*httpCeiling); static || records == 0 {
		return st, nil
	}
	res, err := runBulk(ctx, ds, 0, records, r.o.BatchSize, r.o.Senders, r.nextSeed())
	if err != nil {
		return nil, fmt.Errorf("load %d records: %w", records, err)
	}
	r.logf("%-12s %-10s loaded %d records in %.1fs", name, s.sys.name(), records, res.elapsed.Seconds())
	waited, settled, err := settle(ctx, ds)
	if err != nil {
		return nil, err
	}
	if !settled {
		r.logf("%-12s %-10s still compacting after %.0fs; measuring anyway", name, s.sys.name(), waited.Seconds())
	} else if waited > 0 {
		r.logf("%-12s %-10s compactions settled %.1fs after the load", name, s.sys.name(), waited.Seconds())
	}
	return st, nil
}

// measureSpec runs a closed-loop workload on each system, rounds
// interleaved across systems so drift on a shared machine hits all alike.
func (r *run) measureSpec(ctx context.Context, sp spec, systems []*sysRun) []Row {
	ops := r.o.Ops
	if sp.name == WorkloadYCSBE {
		ops = r.o.ScanOps
	}
	samples := make([]sample, len(systems))
	errs := make([]error, len(systems))
	caches := make([][]cacheCounts, len(systems)) // per round, where the system counts them
	for round := range r.o.Rounds {
		for i, s := range systems {
			if s.skip != "" || errs[i] != nil || ctx.Err() != nil {
				continue
			}
			st, err := r.datasetFor(ctx, s, sp.dataset, sp.scans)
			if err != nil {
				errs[i] = fmt.Errorf("dataset %s: %w", sp.dataset, err)
				continue
			}
			cc, counts := st.ds.(cacheCounter)
			var before cacheCounts
			if counts {
				if before, err = cc.cacheCounts(ctx); err != nil {
					counts = false
				}
			}
			res, err := runSpecRound(ctx, sp, st, r.o.Clients, ops, r.nextSeed())
			if err != nil {
				errs[i] = err
				r.logf("%-12s %-10s round %d/%d: %v", sp.name, s.sys.name(), round+1, r.o.Rounds, err)
				continue
			}
			samples[i].addRound(res)
			r.logRound(sp.name, s.sys.name(), round, res)
			if counts && sp.mix.read > 0 {
				if after, err := cc.cacheCounts(ctx); err == nil {
					d := after.minus(before)
					caches[i] = append(caches[i], d)
					r.logf("%-12s %-10s round %d/%d: document cache %s", sp.name, s.sys.name(), round+1, r.o.Rounds, d)
				}
			}
		}
	}
	rows := make([]Row, len(systems))
	for i, s := range systems {
		name := s.label
		rows[i] = makeRow(sp.name, name, "ops/s", &samples[i], errs[i], s.skip)
		rows[i].Note = noteFor(sp, name, r.o)
		if len(caches[i]) > 0 {
			parts := make([]string, len(caches[i]))
			for j, c := range caches[i] {
				parts[j] = c.String()
			}
			rows[i].Note += "; document cache per round: " + strings.Join(parts, ", ")
		}
	}
	return rows
}

// cacheCounts is how a system's point reads were answered.
type cacheCounts struct{ hits, misses uint64 }

func (c cacheCounts) minus(o cacheCounts) cacheCounts {
	return cacheCounts{c.hits - o.hits, c.misses - o.misses}
}

func (c cacheCounts) String() string {
	if c.hits+c.misses == 0 {
		return "no point reads"
	}
	return fmt.Sprintf("%.0f%% of %d point reads hit", 100*float64(c.hits)/float64(c.hits+c.misses), c.hits+c.misses)
}

// cacheCounter is a dataset whose system counts its point reads by cache
// (shardnode's document cache): a GET row slower than usual says whether
// it read Pebble.
type cacheCounter interface {
	cacheCounts(ctx context.Context) (cacheCounts, error)
}

func (r *run) logRound(workload, sys string, round int, res roundResult) {
	lat := append([]time.Duration(nil), res.lat...)
	slices.Sort(lat)
	r.logf("%-12s %-10s round %d/%d: %9.0f/s  p50 %7.3f ms  p99 %7.3f ms", workload, sys, round+1, r.o.Rounds,
		res.opsPerSec(), ms(percentile(lat, 50)), ms(percentile(lat, 99)))
}

// bulk measures bulk insert into a fresh dataset per round and system.
func (r *run) bulk(ctx context.Context) []Row {
	systems := []*sysRun{r.sn, r.pg, r.pebble}
	samples := make([]sample, len(systems))
	errs := make([]error, len(systems))
	for round := range r.o.Rounds {
		for i, s := range systems {
			if s.skip != "" || errs[i] != nil || ctx.Err() != nil {
				continue
			}
			res, err := r.bulkRound(ctx, s.sys, fmt.Sprintf("bulk%d", round), r.o.BulkDocs)
			if err != nil {
				errs[i] = err
				continue
			}
			samples[i].addRound(res)
			r.logRound(rowBulk, s.sys.name(), round, res)
		}
	}
	rows := make([]Row, len(systems))
	for i, s := range systems {
		name := s.label
		rows[i] = makeRow(rowBulk, name, "docs/s", &samples[i], errs[i], s.skip)
		rows[i].Note = bulkNote(name, r.o)
	}
	return rows
}

// bulkRound loads docs records into a fresh dataset and drops it.
func (r *run) bulkRound(ctx context.Context, sys system, name string, docs int64) (roundResult, error) {
	ds, err := sys.dataset(ctx, name, false)
	if err != nil {
		return roundResult{}, err
	}
	res, err := runBulk(ctx, ds, 0, docs, r.o.BatchSize, r.o.Senders, r.nextSeed())
	res.units = docs
	if derr := ds.drop(context.WithoutCancel(ctx)); derr != nil && err == nil {
		err = derr
	}
	return res, err
}

// rss loads RSSDocs documents into the run's own node and reads the peak
// RSS of its process: the node's alone when it is a child, else the whole
// bench process.
func (r *run) rss(ctx context.Context) Row {
	row := Row{Workload: WorkloadRSS, System: sysShardnode, Unit: "docs/s"}
	switch {
	case !r.ownNode:
		row.Skipped = "skipped: needs the run's own node (not with --url)"
		return row
	case r.o.RSSDocs == 0:
		row.Skipped = "skipped: --rss-docs 0"
		return row
	}
	pid, whose := 0, "the whole bench process, node and its HTTP client together"
	if r.nodeProc != nil {
		pid, whose = r.nodeProc.pid(), fmt.Sprintf("the node's process (%d)", r.nodeProc.pid())
	}
	reset := resetPeakRSS(pid)
	res, err := r.bulkRound(ctx, r.sn.sys, "rss", r.o.RSSDocs)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	peak, err := peakRSSMiB(pid)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	var s sample
	s.addRound(res)
	row = makeRow(WorkloadRSS, sysShardnode, "docs/s", &s, nil, "")
	row.PeakRSSMiB = peak
	row.Note = fmt.Sprintf("peak RSS (VmHWM) %.0f MiB of %s, while loading %d docs through bulk_docs", peak, whose, r.o.RSSDocs)
	if !reset {
		row.Note += "; VmHWM could not be reset first, so it includes start-up"
	}
	r.logf("%-12s %-10s peak RSS %.0f MiB after %d docs", WorkloadRSS, sysShardnode, peak, r.o.RSSDocs)
	return row
}

// nats measures the bus limits on an embedded nats-server.
func (r *run) nats(ctx context.Context) []Row {
	var req, pub sample
	var reqErr, pubErr error
	nb, err := startNATS()
	if err != nil {
		reqErr, pubErr = err, err
	} else {
		defer nb.close()
		for round := range r.o.Rounds {
			if reqErr == nil && ctx.Err() == nil {
				res, err := nb.requestReply(ctx, r.o.Clients, r.o.Ops)
				if reqErr = err; err == nil {
					req.addRound(res)
					r.logRound(rowNATSRequest, sysNATS, round, res)
				}
			}
			if pubErr == nil && ctx.Err() == nil {
				res, err := nb.publish(ctx, r.o.NATSMessages)
				if pubErr = err; err == nil {
					pub.addRound(res)
					r.logRound(rowNATSPublish, sysNATS, round, res)
				}
			}
		}
	}
	rq := makeRow(rowNATSRequest, sysNATS, "ops/s", &req, reqErr, "")
	rq.Note = fmt.Sprintf("request/reply round trips of %d B, %d requesters sharing one connection, one responder", natsPayload, r.o.Clients)
	pb := makeRow(rowNATSPublish, sysNATS, "msgs/s", &pub, pubErr, "")
	pb.Note = fmt.Sprintf("%d messages of %d B published on one connection until one subscriber got them all", r.o.NATSMessages, natsPayload)
	return []Row{rq, pb}
}

// makeRow summarises a sample.
func makeRow(workload, system, unit string, s *sample, err error, skip string) Row {
	row := Row{Workload: workload, System: system, Baseline: system != sysShardnode && system != sysShardnodeRF1, Unit: unit, Skipped: skip}
	if err != nil {
		row.Error = err.Error()
	}
	if skip != "" || err != nil || s == nil {
		return row
	}
	row.Rounds = len(s.opsPerSec)
	row.Ops = s.ops
	row.OpsPerSec = median(s.opsPerSec)
	row.RoundOpsPerSec = s.opsPerSec
	row.MBPerSec = median(s.bytesSec) / 1e6
	if unit == "ops/s" {
		row.MBPerSec = 0 // payload rates are reported for bulk rows only
	}
	slices.Sort(s.lat)
	row.P50Ms = ms(percentile(s.lat, 50))
	row.P99Ms = ms(percentile(s.lat, 99))
	return row
}

func workloadRank(w string) int {
	order := []string{rowBulk, WorkloadPut, WorkloadGet, WorkloadYCSBA, WorkloadYCSBB, WorkloadYCSBC,
		WorkloadYCSBD, WorkloadYCSBE, WorkloadYCSBF, rowNATSRequest, rowNATSPublish, WorkloadRSS,
		WorkloadReshardSmall, WorkloadReshardTwoSources, WorkloadReshardBulk, WorkloadReshardForeground, rowReshardOpenLoop,
		WorkloadReshardBulkForeground, rowReshardBulkPaced, WorkloadReshardSparse}
	if i := slices.Index(order, w); i >= 0 {
		return i
	}
	return len(order)
}

func systemRank(s string) int {
	order := []string{sysShardnode, sysShardnodeRF1, sysNoMove, sysOneSource, sysPebble, sysPG, sysHTTP, sysFastHTTP, sysNATS}
	if i := slices.Index(order, s); i >= 0 {
		return i
	}
	return len(order)
}

// sortRows puts rows in presentation order.
func sortRows(rows []Row) {
	slices.SortStableFunc(rows, func(a, b Row) int {
		if d := workloadRank(a.Workload) - workloadRank(b.Workload); d != 0 {
			return d
		}
		return systemRank(a.System) - systemRank(b.System)
	})
}

// fillRatios sets each measured baseline row's shardnode/baseline ratios.
func fillRatios(rows []Row) {
	for i := range rows {
		b := &rows[i]
		if !b.Baseline || !b.Measured() {
			continue
		}
		for _, s := range rows {
			if s.Workload != b.Workload || s.System != sysShardnode || !s.Measured() {
				continue
			}
			b.VsOps = opsRatio(s, *b)
			if b.P99Ms > 0 && s.P99Ms > 0 {
				b.VsP99 = s.P99Ms / b.P99Ms
			}
		}
	}
}

// opsRatio is a's throughput over b's: the median of the per-round ratios
// when both have the same rounds, else the ratio of the medians.
func opsRatio(a, b Row) float64 {
	if len(a.RoundOpsPerSec) > 0 && len(a.RoundOpsPerSec) == len(b.RoundOpsPerSec) {
		var rs []float64
		for i, x := range a.RoundOpsPerSec {
			if y := b.RoundOpsPerSec[i]; y > 0 {
				rs = append(rs, x/y)
			}
		}
		if len(rs) == len(a.RoundOpsPerSec) {
			return median(rs)
		}
	}
	if b.OpsPerSec <= 0 {
		return 0
	}
	return a.OpsPerSec / b.OpsPerSec
}

// redactURL hides a password in a connection URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// isReshard reports whether workload w is one of the resharding workloads
// (or rows).
func isReshard(w string) bool {
	switch w {
	case WorkloadReshardSmall, WorkloadReshardTwoSources, WorkloadReshardBulk, WorkloadReshardForeground, rowReshardOpenLoop, WorkloadReshardBulkForeground, rowReshardBulkPaced, WorkloadReshardSparse:
		return true
	}
	return false
}
