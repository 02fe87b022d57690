package node

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/resharding"
)

// metrics is what GET /metrics serves in Prometheus' text format: the
// node's view of raft, its replicas' storage and replication, the
// databases' migrations and the HTTP requests it answered. Most figures
// are read when scraped, from the state the node keeps anyway, so the
// request path pays only for the HTTP histogram; the migration phase
// histograms come from the FSM's journal of steps. It is the dashboard
// and alerting side of /healthz, /stats and /events.
type metrics struct {
	reg *prometheus.Registry

	// httpSeconds counts and times requests by route pattern and status.
	httpSeconds *prometheus.HistogramVec
	// phaseSeconds times each phase of a bucket migration as this node
	// saw the raft commands apply: send (start to Moved), confirm (Moved
	// to the flip), cleanup (flip to completion).
	phaseSeconds *prometheus.HistogramVec
	// migrationSeconds times whole migrations, start to completion.
	migrationSeconds *prometheus.HistogramVec
	// lastPassSeconds times the steps of the last passes this node's
	// senders made after a flip (resharding.LastPassTimings): how long
	// the new owner held the bucket's writes, and for what.
	lastPassSeconds *prometheus.HistogramVec
	// migrationsCancelled counts migrations that left the record before
	// their flip (a cancelled operation's bucket).
	migrationsCancelled *prometheus.CounterVec
	// migrationErrors counts failed migration steps the record reported.
	migrationErrors *prometheus.CounterVec
}

func newMetrics(n *Node) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.httpSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shardnode_http_request_duration_seconds",
		Help:    "HTTP requests this node answered, by route pattern and status code, and how long each took.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
	}, []string{"route", "code"})
	m.phaseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shardnode_migration_phase_duration_seconds",
		Help:    "Time bucket migrations spent in each phase, as this node applied their steps: send (start to Moved), confirm (Moved to the ownership flip), cleanup (flip to completion).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"db", "phase"})
	m.migrationSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shardnode_migration_duration_seconds",
		Help:    "Bucket migrations completed, from their start to their completion, as this node applied them.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	}, []string{"db"})
	m.lastPassSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shardnode_last_pass_step_duration_seconds",
		Help:    "Steps of the last passes this node made as a bucket's sender after its ownership flip, while the new owner held the bucket's writes: fence_writes (this replica's writes in flight committing), fence_peers (the source shard's other replicas fenced and their writes arrived; at once with fence_writes), send (the pass stored at the destination), total (flip seen to pass stored).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"db", "step"})
	m.migrationsCancelled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardnode_migrations_cancelled_total",
		Help: "Bucket migrations that left the record before their ownership flip.",
	}, []string{"db"})
	m.migrationErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shardnode_migration_errors_total",
		Help: "Failed bucket migration steps recorded (each raises the migration's Failures; the step is retried with back-off).",
	}, []string{"db"})
	m.reg.MustRegister(m.httpSeconds, m.phaseSeconds, m.migrationSeconds, m.lastPassSeconds, m.migrationsCancelled, m.migrationErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), nodeCollector{n})
	return m
}

// handler serves the registry.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// instrument times every request by the pattern that routed it (set on
// the request by the mux) and the status it got.
func (m *metrics) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = "unrouted" // refused before routing (node starting, removed)
		}
		m.httpSeconds.WithLabelValues(route, statusCode(sw.code)).Observe(time.Since(start).Seconds())
	})
}

// statusCode formats an HTTP status without allocating for common ones.
func statusCode(code int) string {
	switch code {
	case 0, http.StatusOK:
		return "200"
	case http.StatusCreated:
		return "201"
	case http.StatusNoContent:
		return "204"
	case http.StatusNotFound:
		return "404"
	case http.StatusConflict:
		return "409"
	}
	return strconv.Itoa(code)
}

// statusWriter remembers the status a handler wrote. It passes Flush on,
// which the event stream needs, and unwraps for http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// writeOwned passes an answer on without a copy when the writer below
// can take it so (see ownedWriter).
func (w *statusWriter) writeOwned(b []byte) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if o, ok := w.ResponseWriter.(ownedWriter); ok {
		o.writeOwned(b)
		return
	}
	_, _ = w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.code == 0 {
			w.code = http.StatusOK
		}
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// migrationKey names one migration.
type migrationKey struct {
	db     string
	bucket uint32
	index  uint64
}

// migrationSeen is when this node applied a migration's start and its
// current phase.
type migrationSeen struct {
	status  raftfsm.MigrationStatus
	started time.Time
	since   time.Time
}

// observeMigrations feeds the migration histograms from the FSM's journal
// of steps, starting with the commands applied once the node is ready (a
// restart's replay happened in the past, at replay speed). A journal that
// no longer reaches back (this loop fell far behind, or a snapshot was
// restored) forgets the migrations in flight: their phases are not timed.
func (n *Node) observeMigrations(ctx context.Context) {
	defer n.wg.Done()
	select {
	case <-ctx.Done():
		return
	case <-n.readyCh:
	}
	ch, stop := n.fsm.Watch()
	defer stop()
	last := n.fsm.AppliedIndex()
	seen := map[migrationKey]*migrationSeen{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		changes, through, complete := n.fsm.AllChanges(last)
		if !complete {
			clear(seen)
		}
		now := time.Now()
		flipped := false
		for _, c := range changes {
			last = max(last, c.Index)
			flipped = flipped || (c.Kind == raftfsm.ChangeMigration && c.Step == "OwnershipTransferred")
			if c.Kind == raftfsm.ChangeDeleted {
				for k := range seen {
					if k.db == c.Database {
						delete(seen, k)
					}
				}
				continue
			}
			if c.Kind != raftfsm.ChangeMigration {
				continue
			}
			n.metrics.observeStep(seen, c, now)
		}
		// through, not AppliedIndex: a command applied since AllChanges
		// read would be skipped.
		last = max(last, through)
		if flipped {
			n.nudgeFollowers()
		}
	}
}

// nudgeFollowers, on the raft leader, appends a barrier entry, so that the
// followers learn at once that the entries before it committed. Raft tells
// a follower an entry committed in the leader's next AppendEntries, which
// without a new entry comes after CommitTimeout of quiet (50-100 ms). After
// an ownership flip the next entry is the source's last pass, which its
// sender, often on a follower, makes only once it applied the flip, while
// the new owner holds the bucket's writes until then: p50 60-75 ms on the
// leader without the nudge, 4-7 ms with it. A CommitTimeout of 5 ms did
// as well (p50 3-5 ms) but cost an idle 3-node cluster three times the
// CPU (an empty AppendEntries to each follower every 5-10 ms).
func (n *Node) nudgeFollowers() {
	if n.raft == nil || n.raft.r.State() != raft.Leader {
		return
	}
	_ = n.raft.r.Barrier(100 * time.Millisecond) // not waited for: the append is what matters
}

// phaseOf names the phase a migration is in while it has status s.
func phaseOf(s raftfsm.MigrationStatus) string {
	switch s {
	case raftfsm.MigrationMoving:
		return "send"
	case raftfsm.MigrationMoved:
		return "confirm"
	default:
		return "cleanup"
	}
}

// observeStep notes one migration step applied at now.
func (m *metrics) observeStep(seen map[migrationKey]*migrationSeen, c raftfsm.Change, now time.Time) {
	mig := c.Migration
	k := migrationKey{c.Database, mig.Bucket, mig.MigrationIndex}
	s := seen[k]
	switch c.Step {
	case "FinalPass":
		return
	case "Error":
		m.migrationErrors.WithLabelValues(c.Database).Inc()
		return
	case "Completed":
		if s == nil {
			return // started before this node was watching
		}
		delete(seen, k)
		if mig.Status != raftfsm.MigrationOwnershipTransferred {
			m.migrationsCancelled.WithLabelValues(c.Database).Inc()
			return
		}
		m.phaseSeconds.WithLabelValues(c.Database, phaseOf(s.status)).Observe(now.Sub(s.since).Seconds())
		m.migrationSeconds.WithLabelValues(c.Database).Observe(now.Sub(s.started).Seconds())
		return
	}
	if s == nil {
		if mig.Status == raftfsm.MigrationMoving {
			seen[k] = &migrationSeen{status: mig.Status, started: now, since: now}
		}
		return // a later step of a migration started before this node watched
	}
	if s.status != mig.Status {
		m.phaseSeconds.WithLabelValues(c.Database, phaseOf(s.status)).Observe(now.Sub(s.since).Seconds())
		s.status, s.since = mig.Status, now
	}
}

// nodeCollector reads, at each scrape, the figures the node already keeps.
type nodeCollector struct{ n *Node }

var (
	descReady          = prometheus.NewDesc("shardnode_node_ready", "1 once the node replayed the raft log and opened its replicas.", nil, nil)
	descCurrent        = prometheus.NewDesc("shardnode_node_current", "1 while the node follows the cluster's latest state (writes through it are accepted).", nil, nil)
	descRaftState      = prometheus.NewDesc("shardnode_raft_state", "1 for this node's current raft state.", []string{"state"}, nil)
	descRaftLeader     = prometheus.NewDesc("shardnode_raft_has_leader", "1 when this node knows a raft leader.", nil, nil)
	descRaftTerm       = prometheus.NewDesc("shardnode_raft_term", "The raft term.", nil, nil)
	descRaftCommit     = prometheus.NewDesc("shardnode_raft_commit_index", "The highest raft index known committed.", nil, nil)
	descRaftApplied    = prometheus.NewDesc("shardnode_raft_applied_index", "The highest raft index the cluster state applied here.", nil, nil)
	descRaftContact    = prometheus.NewDesc("shardnode_raft_last_contact_seconds", "Seconds since a follower last heard from the leader (0 on the leader).", nil, nil)
	descNodes          = prometheus.NewDesc("shardnode_cluster_nodes", "Cluster members by status as this node's heartbeats see them.", []string{"status"}, nil)
	descDatabases      = prometheus.NewDesc("shardnode_databases", "Databases in the cluster.", nil, nil)
	descFailing        = prometheus.NewDesc("shardnode_replicas_failing", "Replicas this node should hold that failed to open (retried).", nil, nil)
	descDocuments      = prometheus.NewDesc("shardnode_replica_documents", "Live documents in a local shard replica.", []string{"db", "shard"}, nil)
	descTombstones     = prometheus.NewDesc("shardnode_replica_tombstones", "Tombstones in a local shard replica.", []string{"db", "shard"}, nil)
	descEtag           = prometheus.NewDesc("shardnode_replica_last_etag", "The etag of a local replica's latest change.", []string{"db", "shard"}, nil)
	descCommits        = prometheus.NewDesc("shardnode_replica_commits_total", "Group commits of a local replica.", []string{"db", "shard"}, nil)
	descCommitOps      = prometheus.NewDesc("shardnode_replica_committed_writes_total", "Writes those group commits carried (divide by commits for the batch size).", []string{"db", "shard"}, nil)
	descCommitSeconds  = prometheus.NewDesc("shardnode_replica_commit_seconds_total", "Time spent in group commits.", []string{"db", "shard"}, nil)
	descSyncSeconds    = prometheus.NewDesc("shardnode_replica_sync_seconds_total", "Time spent in the synced batch commit (WAL write and fdatasync).", []string{"db", "shard"}, nil)
	descDisk           = prometheus.NewDesc("shardnode_replica_disk_bytes", "Disk space a local replica's files take.", []string{"db", "shard"}, nil)
	descMemtable       = prometheus.NewDesc("shardnode_replica_memtable_bytes", "Memory a local replica's memtables hold.", []string{"db", "shard"}, nil)
	descL0             = prometheus.NewDesc("shardnode_replica_l0_files", "Sstables in level 0: many mean flushes outpace compactions and writes will stall.", []string{"db", "shard"}, nil)
	descDebt           = prometheus.NewDesc("shardnode_replica_compaction_debt_bytes", "Bytes compactions must rewrite to bring the levels back into shape.", []string{"db", "shard"}, nil)
	descLag            = prometheus.NewDesc("shardnode_replication_lag_etags", "Local changes a peer replica has not acknowledged yet.", []string{"db", "shard", "peer"}, nil)
	descLinkFailing    = prometheus.NewDesc("shardnode_replication_link_failing", "1 while the replication link to a peer is retrying after an error.", []string{"db", "shard", "peer"}, nil)
	descMigrations     = prometheus.NewDesc("shardnode_migrations", "Bucket migrations in the record, by status.", []string{"db", "status"}, nil)
	descOldest         = prometheus.NewDesc("shardnode_migration_status_age_seconds", "The longest time a migration in flight has been in its status: a stuck move shows here, and so does a large or paced bucket that moves on.", []string{"db"}, nil)
	descStuck          = prometheus.NewDesc("shardnode_migrations_stuck", "Migrations in flight flagged Stuck as the resharding status shows them: in one status for over 60 s, and in Moving with no batch stored for as long (a large or paced bucket that moves on is not stuck).", []string{"db"}, nil)
	descFailures       = prometheus.NewDesc("shardnode_migration_failures", "Failures of the migrations in flight (each backs off before its retry).", []string{"db"}, nil)
	descOperations     = prometheus.NewDesc("shardnode_resharding_operations", "Resharding operations the record keeps, by status.", []string{"db", "status"}, nil)
	descBucketsLeft    = prometheus.NewDesc("shardnode_resharding_buckets_remaining", "Buckets the running resharding operations have still to move.", []string{"db"}, nil)
	descCleanupHold    = prometheus.NewDesc("shardnode_resharding_cleanup_hold", "1 while the database's running resharding operations start no new bucket: resharding.max-awaiting-cleanup moved buckets wait for their source cleanup (a source node is down).", []string{"db"}, nil)
	descRerouted       = prometheus.NewDesc("shardnode_writes_rerouted", "Client writes this node routed that a shard refused after an ownership flip, then sent to the new owner, and the delay the refusal added (quantiles over the latest 4096).", []string{"db"}, nil)
	descDocCacheBytes  = prometheus.NewDesc("shardnode_doc_cache_bytes", "Bytes the node's document cache holds.", nil, nil)
	descDocCacheBudget = prometheus.NewDesc("shardnode_doc_cache_budget_bytes", "The document cache's budget.", nil, nil)
	descDocCacheHits   = prometheus.NewDesc("shardnode_replica_doc_cache_hits_total", "Point reads of a local replica answered from the document cache.", []string{"db", "shard"}, nil)
	descDocCacheMisses = prometheus.NewDesc("shardnode_replica_doc_cache_misses_total", "Point reads of a local replica that read Pebble (absent ids included).", []string{"db", "shard"}, nil)
	descFeedReads      = prometheus.NewDesc("shardnode_replica_feed_reads_total", "Reads of a local replica's changes feed, by where they were answered: the newest entries in memory, or Pebble.", []string{"db", "shard", "from"}, nil)
	descSendLimit      = prometheus.NewDesc("shardnode_resharding_send_limit_bytes_per_second", "The move bandwidth: bytes per second this node sends of the buckets it moves out (0: no limit).", nil, nil)
	descSendWait       = prometheus.NewDesc("shardnode_resharding_send_wait_seconds_total", "Time the batches of buckets this node moves out waited for the move bandwidth.", nil, nil)
	descWriteResends   = prometheus.NewDesc("shardnode_routed_write_resends_total", "Copies of client writes this node routed to other nodes that it sent again because no answer came (see shard.write.once).", nil, nil)
	descWritesRemember = prometheus.NewDesc("shardnode_routed_writes_remembered", "Routed writes of other nodes whose answers this node keeps, so that a copy sent again gets the same answer.", nil, nil)
)

// Describe sends nothing: the collector is unchecked, as its label values
// (databases, shards, peers) come and go.
func (nodeCollector) Describe(chan<- *prometheus.Desc) {}

// Collect reads the node's figures.
func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descReady, b2f(n.ready.Load()))
	gauge(descSendLimit, float64(n.sendLimit.limit()))
	counter(descSendWait, time.Duration(n.sendLimit.waited.Load()).Seconds())
	counter(descWriteResends, float64(n.writeResends.Load()))
	gauge(descWritesRemember, float64(n.writesOnce.size()))
	gauge(descCurrent, b2f(n.fresh.fresh()))
	if n.raft != nil {
		state := n.raft.r.State()
		for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
			gauge(descRaftState, b2f(s == state), s.String())
		}
		leader, _ := n.raft.r.LeaderWithID()
		gauge(descRaftLeader, b2f(leader != ""))
		term, _ := strconv.ParseUint(n.raft.r.Stats()["term"], 10, 64)
		gauge(descRaftTerm, float64(term))
		gauge(descRaftCommit, float64(n.raft.r.CommitIndex()))
		contact := 0.0
		if state != raft.Leader {
			if t := n.raft.r.LastContact(); !t.IsZero() {
				contact = time.Since(t).Seconds()
			}
		}
		gauge(descRaftContact, contact)
	}
	gauge(descRaftApplied, float64(n.fsm.AppliedIndex()))
	up, down := 0, 0
	for _, m := range n.fsm.Nodes() {
		if n.health.up(m.Tag) {
			up++
		} else {
			down++
		}
	}
	gauge(descNodes, float64(up), "Up")
	gauge(descNodes, float64(down), "Down")

	records := n.fsm.Records()
	gauge(descDatabases, float64(len(records)))
	if n.ready.Load() {
		// While the node replays the raft log, its records are of the
		// past: a migration long finished looked stuck for minutes.
		for _, rec := range records {
			c.collectResharding(ch, rec)
		}
	}
	if n.replicas == nil {
		return
	}
	failing, _ := n.replicas.failures()
	gauge(descFailing, float64(failing))
	for _, r := range n.replicas.local() {
		st := r.store.Stats()
		db, shard := r.key.db, strconv.Itoa(r.key.shard)
		gauge(descDocuments, float64(st.DocumentsCount), db, shard)
		gauge(descTombstones, float64(st.TombstonesCount), db, shard)
		gauge(descEtag, float64(st.LastEtag), db, shard)
		counter(descCommits, float64(st.Commits), db, shard)
		counter(descCommitOps, float64(st.CommittedOps), db, shard)
		counter(descCommitSeconds, st.CommitMillis/1e3, db, shard)
		counter(descSyncSeconds, st.SyncMillis/1e3, db, shard)
		gauge(descDisk, float64(st.Engine.DiskBytes), db, shard)
		gauge(descMemtable, float64(st.Engine.MemtableBytes), db, shard)
		gauge(descL0, float64(st.Engine.L0Files), db, shard)
		gauge(descDebt, float64(st.Engine.CompactionDebtBytes), db, shard)
		counter(descDocCacheHits, float64(st.DocCache.Hits), db, shard)
		counter(descDocCacheMisses, float64(st.DocCache.Misses), db, shard)
		counter(descFeedReads, float64(st.Feed.FromMemory), db, shard, "memory")
		counter(descFeedReads, float64(st.Feed.FromDisk), db, shard, "disk")
		if r.rep == nil {
			continue
		}
		for _, p := range r.rep.Status() {
			lag := 0.0
			if st.LastEtag > p.AckedEtag {
				lag = float64(st.LastEtag - p.AckedEtag)
			}
			gauge(descLag, lag, db, shard, p.Peer)
			gauge(descLinkFailing, b2f(p.LastError != ""), db, shard, p.Peer)
		}
	}
	if used, budget := n.replicas.docs.Usage(); budget > 0 {
		gauge(descDocCacheBytes, float64(used))
		gauge(descDocCacheBudget, float64(budget))
	}
}

// collectResharding reports one database's migrations and operations.
func (c nodeCollector) collectResharding(ch chan<- prometheus.Metric, rec *raftfsm.DatabaseRecord) {
	db := rec.DatabaseName
	byStatus := map[raftfsm.MigrationStatus]int{raftfsm.MigrationMoving: 0, raftfsm.MigrationMoved: 0, raftfsm.MigrationOwnershipTransferred: 0}
	var oldest time.Duration
	failures, stuck := 0, 0
	now := time.Now()
	for _, m := range rec.Sharding.BucketMigrations {
		byStatus[m.Status]++
		failures += m.Failures
		if !m.StatusSince.IsZero() {
			oldest = max(oldest, now.Sub(m.StatusSince))
			// Viewed only when long in its status: a view of a long
			// Moving step asks its sender (bounded by sendProgressWait;
			// a sender that does not answer counts as stuck).
			if now.Sub(m.StatusSince) > resharding.StuckAfter && c.n.viewMigration(context.Background(), db, rec.Sharding.Shards, m).Stuck {
				stuck++
			}
		}
	}
	for s, v := range byStatus {
		ch <- prometheus.MustNewConstMetric(descMigrations, prometheus.GaugeValue, float64(v), db, string(s))
	}
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, oldest.Seconds(), db)
	ch <- prometheus.MustNewConstMetric(descStuck, prometheus.GaugeValue, float64(stuck), db)
	ch <- prometheus.MustNewConstMetric(descFailures, prometheus.GaugeValue, float64(failures), db)
	ops := map[string]int{}
	var left int64
	running := false
	for _, op := range rec.Sharding.Resharding {
		ops[op.Status]++
		if op.EndedAt.IsZero() {
			left += max(op.BucketsTotal-op.BucketsDone, 0)
		}
		running = running || op.Status == raftfsm.OperationRunning
	}
	_, hold := resharding.CleanupHold(rec, int(c.n.cfg.Resharding.MaxAwaitingCleanup))
	ch <- prometheus.MustNewConstMetric(descCleanupHold, prometheus.GaugeValue, b2f(running && hold), db)
	for s, v := range ops {
		ch <- prometheus.MustNewConstMetric(descOperations, prometheus.GaugeValue, float64(v), db, s)
	}
	ch <- prometheus.MustNewConstMetric(descBucketsLeft, prometheus.GaugeValue, float64(left), db)
	if s, ok := c.n.reroutes.summary(db, rec.CreatedIndex); ok {
		ch <- prometheus.MustNewConstSummary(descRerouted, s.count, s.sum.Seconds(),
			map[float64]float64{0.5: s.p50.Seconds(), 0.99: s.p99.Seconds()}, db)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
