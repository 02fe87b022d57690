package node

import (
	"slices"
	"sync"
	"time"
)

// rerouteWindow is how many of a database's latest rerouted writes the
// delay percentiles are taken over.
const rerouteWindow = 4096

// reroutes keeps, per database, what moves cost this node's clients: the
// writes it routed that a shard refused because a move had just flipped
// their bucket to another shard, and the delay the refusal added to each,
// from the write's first attempt to the start of the attempt that reached
// the new owner. The attempt that succeeds is an ordinary write and is not
// counted: this is the pause at the ownership flip, as the client saw it,
// apart from the load's ordinary latency, which a benchmark can only
// estimate from outside.
type reroutes struct {
	mu  sync.Mutex
	dbs map[string]*rerouteLog
}

// rerouteLog is one database's record. A database deleted and created
// again under its name starts a new one.
type rerouteLog struct {
	created uint64 // the raft index that created the database
	count   uint64
	sum     time.Duration
	max     time.Duration
	recent  []time.Duration // a ring of the latest rerouteWindow delays
	next    int
}

// RerouteStats are one node's figures for the writes it rerouted after an
// ownership flip, in GET /databases/{db}/stats.
type RerouteStats struct {
	// Node is the node that routed the writes.
	Node string `json:"Node"`
	// WritesRerouted counts the client writes (a single PUT or DELETE, or
	// a bulk_docs batch) that a shard refused after a flip and that were
	// then applied by the new owner, since this node started.
	WritesRerouted uint64 `json:"WritesRerouted"`
	// DelayP50Ms and DelayP99Ms are taken over the latest Window of them;
	// DelayMaxMs over all since the start.
	DelayP50Ms float64 `json:"DelayP50Ms"`
	DelayP99Ms float64 `json:"DelayP99Ms"`
	DelayMaxMs float64 `json:"DelayMaxMs"`
	Window     int     `json:"Window"`
}

func newReroutes() *reroutes { return &reroutes{dbs: map[string]*rerouteLog{}} }

// HoldStats are one node's figures for the routed writes its replicas held
// because their bucket was arriving at the shard (the source's last pass
// after the ownership flip not recorded yet), in GET
// /databases/{db}/stats: with RerouteStats, what a flip costs writes.
type HoldStats struct {
	// Node is the node whose replicas held the writes.
	Node string `json:"Node"`
	// WritesHeld counts them since this node started.
	WritesHeld uint64 `json:"WritesHeld"`
	// DelayP50Ms and DelayP99Ms are taken over the latest Window of them;
	// DelayMaxMs over all since the start.
	DelayP50Ms float64 `json:"DelayP50Ms"`
	DelayP99Ms float64 `json:"DelayP99Ms"`
	DelayMaxMs float64 `json:"DelayMaxMs"`
	Window     int     `json:"Window"`
}

// holdStats summarises holds' record of database db, created at raft
// index created.
func holdStats(holds *reroutes, node, db string, created uint64) HoldStats {
	s := holds.stats(node, db, created)
	return HoldStats{Node: s.Node, WritesHeld: s.WritesRerouted, DelayP50Ms: s.DelayP50Ms, DelayP99Ms: s.DelayP99Ms, DelayMaxMs: s.DelayMaxMs, Window: s.Window}
}

// LastPassStats are one node's figures for the last passes its senders
// made after an ownership flip, in GET /databases/{db}/stats: the new
// owner holds the bucket's writes until the pass is stored (HoldStats),
// so these say what the holds waited for, and how much of it was the
// fence of the source shard's other replicas.
type LastPassStats struct {
	// Node is the node whose senders made the passes.
	Node string `json:"Node"`
	// Passes counts them since this node started.
	Passes uint64 `json:"Passes"`
	// TotalP50Ms, TotalP99Ms and TotalMaxMs time each pass from its
	// sender seeing the flip to the pass stored at the destination;
	// FencePeersP50Ms and FencePeersP99Ms its wait for the source shard's
	// other replicas, FenceWritesP50Ms and FenceWritesP99Ms the wait, at
	// once, for the client writes its own replica had in flight, and
	// SendP50Ms and SendP99Ms the pass after both, to its batch stored.
	// Percentiles over the latest Window, Max since the start.
	TotalP50Ms       float64 `json:"TotalP50Ms"`
	TotalP99Ms       float64 `json:"TotalP99Ms"`
	TotalMaxMs       float64 `json:"TotalMaxMs"`
	FencePeersP50Ms  float64 `json:"FencePeersP50Ms"`
	FencePeersP99Ms  float64 `json:"FencePeersP99Ms"`
	FenceWritesP50Ms float64 `json:"FenceWritesP50Ms"`
	FenceWritesP99Ms float64 `json:"FenceWritesP99Ms"`
	SendP50Ms        float64 `json:"SendP50Ms"`
	SendP99Ms        float64 `json:"SendP99Ms"`
	Window           int     `json:"Window"`
}

// lastPassStats summarises the last passes of database db, created at
// raft index created, that this node's senders made (see
// Node.passTotals).
func (n *Node) lastPassStats(db string, created uint64) LastPassStats {
	node := n.cfg.Node.Tag
	t, f := n.passTotals.stats(node, db, created), n.passFences.stats(node, db, created)
	o, s := n.passOwnFences.stats(node, db, created), n.passSends.stats(node, db, created)
	return LastPassStats{Node: node, Passes: t.WritesRerouted, TotalP50Ms: t.DelayP50Ms, TotalP99Ms: t.DelayP99Ms, TotalMaxMs: t.DelayMaxMs,
		FencePeersP50Ms: f.DelayP50Ms, FencePeersP99Ms: f.DelayP99Ms, FenceWritesP50Ms: o.DelayP50Ms, FenceWritesP99Ms: o.DelayP99Ms,
		SendP50Ms: s.DelayP50Ms, SendP99Ms: s.DelayP99Ms, Window: t.Window}
}

// record notes one rerouted write of database db, created at raft index
// created, that the flip delayed by d.
func (r *reroutes) record(db string, created uint64, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.dbs[db]
	if l == nil || l.created != created {
		l = &rerouteLog{created: created}
		r.dbs[db] = l
	}
	l.count++
	l.sum += d
	l.max = max(l.max, d)
	if len(l.recent) < rerouteWindow {
		l.recent = append(l.recent, d)
		return
	}
	l.recent[l.next] = d
	l.next = (l.next + 1) % rerouteWindow
}

// stats summarises the record of database db, created at raft index
// created.
func (r *reroutes) stats(node, db string, created uint64) RerouteStats {
	r.mu.Lock()
	l := r.dbs[db]
	if l == nil || l.created != created {
		r.mu.Unlock()
		return RerouteStats{Node: node}
	}
	s := RerouteStats{Node: node, WritesRerouted: l.count, DelayMaxMs: millis(l.max), Window: len(l.recent)}
	sorted := slices.Clone(l.recent)
	r.mu.Unlock()
	slices.Sort(sorted)
	s.DelayP50Ms, s.DelayP99Ms = millis(rank(sorted, 50)), millis(rank(sorted, 99))
	return s
}

// rank is the nearest-rank q-th percentile of sorted.
func rank(sorted []time.Duration, q int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (q*len(sorted)+99)/100 - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// rerouteSummary is one database's record in the shape of a Prometheus
// summary: count and sum since the start, quantiles over the window.
type rerouteSummary struct {
	count    uint64
	sum      time.Duration
	p50, p99 time.Duration
}

// summary returns database db's record, if any write was rerouted since
// it was created at raft index created.
func (r *reroutes) summary(db string, created uint64) (rerouteSummary, bool) {
	r.mu.Lock()
	l := r.dbs[db]
	if l == nil || l.created != created {
		r.mu.Unlock()
		return rerouteSummary{}, false
	}
	s := rerouteSummary{count: l.count, sum: l.sum}
	sorted := slices.Clone(l.recent)
	r.mu.Unlock()
	slices.Sort(sorted)
	s.p50, s.p99 = rank(sorted, 50), rank(sorted, 99)
	return s, true
}
