package node

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/resharding"
	"github.com/shardnode/shardnode/storage"
)

// lastPasses holds what the senders of moves into this node's replicas
// said their last pass after the ownership flip covered, before that pass
// is recorded through raft (SourceMigrationFinalPass).
//
// Why: a moving bucket's new owner takes its writes (and serves its
// routed reads) only once it holds every write the source acknowledged
// before it applied the flip (see flipUnsettled). The record says so
// after one more raft round, whose commit a follower learns from the
// leader's next message: the writes into the flipping bucket waited
// p50 17 / p99 50 ms under a closed-loop load (`shardnode bench
// --workloads reshard-foreground`), most of what a flip cost them. The
// sender tells the destination's replicas directly instead, once the pass
// is stored, and a replica whose own copy of the bucket covers the pass's
// version lets the bucket's requests in at once. That is the condition
// the record stands for, checked on the replica itself; a replica that
// missed part of the pass waits for the record as before.
type lastPasses struct {
	mu sync.Mutex
	m  map[lastPassKey]changevector.Vector
	ch chan struct{} // closed and replaced on every note
}

// lastPassKey names one migration of one bucket into one shard. The
// migration index (a raft index) tells apart a database deleted and
// created again under the same name.
type lastPassKey struct {
	db     string
	shard  int
	bucket uint32
	index  uint64
}

// lastPassesKept is how many notes a node keeps before it forgets those
// whose record is in (or whose migration is gone).
const lastPassesKept = 1024

func newLastPasses() *lastPasses {
	return &lastPasses{m: map[lastPassKey]changevector.Vector{}, ch: make(chan struct{})}
}

// note records a sender's last pass and wakes the requests waiting for
// one; stale says whether a kept note is no longer needed (its
// migration's record has the pass, or is gone).
func (lp *lastPasses) note(k lastPassKey, v changevector.Vector, stale func(lastPassKey) bool) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if len(lp.m) >= lastPassesKept {
		for old := range lp.m {
			if stale(old) {
				delete(lp.m, old)
			}
		}
	}
	if len(lp.m) < 2*lastPassesKept { // a bound whatever the records say
		lp.m[k] = v
	}
	close(lp.ch)
	lp.ch = make(chan struct{})
}

// changed is closed at the next note.
func (lp *lastPasses) changed() <-chan struct{} {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.ch
}

// noted returns the version the sender of migration m into shard of db
// said its last pass covers, if it told this node (the pass may not be
// stored yet).
func (lp *lastPasses) noted(db string, shard int, m *raftfsm.BucketMigration) (changevector.Vector, bool) {
	if lp == nil {
		return nil, false
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	v, ok := lp.m[lastPassKey{db, shard, m.Bucket, m.MigrationIndex}]
	return v, ok
}

// stored reports whether the sender of migration m into shard of db told
// this node its last pass, and store s (this node's replica of shard)
// holds all of it: the bucket's merged version covers the pass's.
func (lp *lastPasses) stored(db string, shard int, m *raftfsm.BucketMigration, s *storage.Store) bool {
	if lp == nil || s == nil {
		return false
	}
	lp.mu.Lock()
	want, ok := lp.m[lastPassKey{db, shard, m.Bucket, m.MigrationIndex}]
	lp.mu.Unlock()
	if !ok {
		return false
	}
	st, err := s.BucketStats(m.Bucket)
	if err != nil {
		return false
	}
	have, err := changevector.ParseVector(st.ChangeVector)
	return err == nil && have.Covers(want)
}

// lastPassHeader carries a migration batch's LastPass on the bus.
const lastPassHeader = "Shardnode-Last-Pass"

// lastPassNotice is the body of migration.lastpass.
type lastPassNotice struct {
	DB             string `json:"Db"`
	Shard          int    `json:"Shard"`
	Bucket         uint32 `json:"Bucket"`
	MigrationIndex uint64 `json:"MigrationIndex"`
	ChangeVector   string `json:"ChangeVector"`
}

// lastPassNoticeWait bounds the notice to one destination node: it only
// makes the new owner take writes sooner, and the record follows anyway.
const lastPassNoticeWait = time.Second

// AnnounceLastPass tells every reachable replica of p's destination shard
// what the sender's last pass covered (see lastPasses). It is best
// effort: a replica that does not hear it (or runs a version without
// migration.lastpass) waits for the record.
func (c reshardCluster) AnnounceLastPass(ctx context.Context, p resharding.LastPass) {
	rec := c.n.recordOf(p.DB)
	if rec == nil {
		return
	}
	topo, ok := rec.Sharding.Shards[p.Shard]
	if !ok {
		return
	}
	notice := lastPassNotice{DB: p.DB, Shard: p.Shard, Bucket: p.Bucket, MigrationIndex: p.MigrationIndex, ChangeVector: p.ChangeVector}
	var wg sync.WaitGroup
	for _, tag := range topo.Members {
		switch {
		case tag == c.n.cfg.Node.Tag:
			if err := c.n.noteLastPass(notice); err != nil {
				c.n.logger.Debug("last pass notice", "bucket", p.Bucket, "err", err)
			}
		case c.n.health.up(tag):
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, lastPassNoticeWait)
				defer cancel()
				if err := c.n.call(cctx, tag, "migration.lastpass", notice, nil); err != nil {
					c.n.logger.Debug("last pass notice", "node", tag, "bucket", p.Bucket, "err", err)
				}
			})
		}
	}
	wg.Wait()
}

// noteLastPass records a sender's notice (from migration.lastpass).
func (n *Node) noteLastPass(p lastPassNotice) error {
	v, err := changevector.ParseVector(p.ChangeVector)
	if err != nil {
		return badRequest("last pass of bucket %d: change vector: %v", p.Bucket, err)
	}
	if p.DB == "" || p.MigrationIndex == 0 {
		return badRequest("last pass of bucket %d: database and migration index are required", p.Bucket)
	}
	n.lastPasses.note(lastPassKey{p.DB, p.Shard, p.Bucket, p.MigrationIndex}, v, func(k lastPassKey) bool {
		rec := n.recordOf(k.db)
		if rec == nil {
			return true
		}
		m := rec.Sharding.BucketMigrations[k.bucket]
		return m == nil || m.MigrationIndex != k.index || m.FinalPass != nil
	})
	return nil
}

// registerLastPassRPC serves migration.lastpass.
func (n *Node) registerLastPassRPC() {
	n.rpcHandlers["migration.lastpass"] = func(ctx context.Context, data []byte) (any, error) {
		var p lastPassNotice
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, badRequest("decode last pass notice: %v", err)
		}
		if err := n.noteLastPass(p); err != nil {
			return nil, err
		}
		return struct{}{}, nil
	}
}

// passHolder is a replica that may hold a migration's last pass ahead of
// the record (see lastPasses): an interface rather than a closure, so
// that a routed write, which asks on every call, allocates nothing.
type passHolder interface {
	// lastPassIn reports whether m's last pass counts as in at the
	// replica. want, when not nil, is the condition it counts in under:
	// the version the bucket must cover when the request's write commits
	// (see storage.Covers).
	lastPassIn(m *raftfsm.BucketMigration) (want changevector.Vector, in bool)
}

// lastPassIn counts m's last pass in once this replica holds all of it,
// as its sender told this node (see lastPasses).
func (l *localReplica) lastPassIn(m *raftfsm.BucketMigration) (changevector.Vector, bool) {
	return nil, l.n.lastPasses.stored(l.db, l.shard, m, l.s)
}

// passQueued is a local replica as a write into an arriving bucket sees
// it: a last pass its sender told this node of counts in as soon as it
// is queued for the store, not stored yet, on the condition that the
// write commits after it (the pass's version, which the write's commit
// checks). The write then shares the pass's commit round instead of
// waiting for its fsync and then for its own: one fsync less in what a
// flip costs the writes into the bucket.
type passQueued localReplica

func (q *passQueued) lastPassIn(m *raftfsm.BucketMigration) (changevector.Vector, bool) {
	return q.n.lastPasses.noted(q.db, q.shard, m)
}
