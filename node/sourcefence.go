package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/resharding"
	"github.com/shardnode/shardnode/storage"
)

// A moving bucket's sender makes its last pass once it applied the flip and
// the client writes its own replica took before that committed. The source
// shard's other replicas take the bucket's writes too until their nodes
// apply the flip, when a router sends them one (it found the sender down,
// or refusing): such a write, acknowledged and still on its way to the
// sender by replication as the pass was made, stayed behind on the source,
// and the destination took the bucket's writes without it (seen once in
// 20 stress runs of TestIncrementsWhileNodesStopCleanlyDuringMoves: an
// If-Match increment acknowledged by the source after the pass, and one on
// the same version by the destination). So before its last pass the
// sender tells each other reachable source replica of the flip, which from
// then on refuses the bucket's writes as it will once its node applied the
// flip, and asks how far the writes it took itself into the bucket go
// (opSourceFence); it then waits until replication brought them.

// That round trip held the flipped bucket's writes at the new owner
// (p50 6.5 ms, p99 24.6 ms of a last pass with three nodes on two cores).
// So the sender takes it off the flip's path: as the bucket is about to
// reach Moved, it asks the other source replicas for a lease
// (opSourceLease), by which each refuses the bucket's routed writes from
// then on, until its node applies the flip, for at most sourceLeaseWindow,
// and answers how far its own writes go; the sender renews it while the
// bucket stays Moved. At the flip it asks again only a replica whose lease
// does not hold long enough (see sourceLeaseMargin), and waits as before
// for the writes the others answered.

// opSourceFence tells a source replica's peer that the bucket flipped and
// asks how far its own writes into it go.
const opSourceFence = "migration.source-fence"

// opSourceLease asks a source replica's peer to refuse a moving bucket's
// routed writes until the flip (a lease), and how far its own writes into
// it go. A distinct op: an older node answers it unknown, and its sender
// fences it at the flip.
const opSourceLease = "migration.source-lease"

// The lease's bounds. A replica refuses the bucket's routed writes for
// sourceLeaseWindow from when it got the request, unless its record ends
// the lease sooner; the sender asks again well within it while the bucket
// is Moved (resharding's leaseRenewEvery).
//
// At the flip, a lease that holds at least sourceLeaseMargin more spares
// the round trip: a node takes client writes only within freshFor of
// asking for a confirmation that it applied everything the cluster had
// committed (see fresh.go). A write the peer takes without the flip in its
// record was thus taken before the flip's commit plus freshFor, and the
// sender saw the flip after its commit. The margin adds freshEvery and
// room for a write's checks being a moment apart (the freshness check
// comes before the lease's).
const (
	sourceLeaseWindow = 3 * time.Second
	sourceLeaseMargin = freshFor + freshEvery + 300*time.Millisecond
)

// Bounds of a sender's wait for its peers' writes: the question to each,
// and then replication bringing what they answered. A peer that does not
// answer in time is not waited for, as a peer that is down is not.
const (
	sourceFenceAsk  = time.Second
	sourceFenceHold = 2 * time.Second
)

// sourceFenceRequest is opSourceFence's request.
type sourceFenceRequest struct {
	DB     string `json:"Db"`
	Shard  int    `json:"Shard"`
	Bucket uint32 `json:"Bucket"`
	// To is the shard the bucket flipped to, and RecordEtag the etag of
	// the sender's record that shows it: what the peer's refusals name.
	To         int    `json:"To"`
	RecordEtag uint64 `json:"RecordEtag"`
}

// sourceLeaseRequest is opSourceLease's request: the bucket, and the
// sender's node, its migration and the etag of the record it asked by.
type sourceLeaseRequest struct {
	DB             string `json:"Db"`
	Shard          int    `json:"Shard"`
	Bucket         uint32 `json:"Bucket"`
	Sender         string `json:"Sender"`
	MigrationIndex uint64 `json:"MigrationIndex"`
	RecordEtag     uint64 `json:"RecordEtag"`
}

// sourceFenceReply is opSourceFence's (and opSourceLease's) answer: the peer replica's database
// id, and the etag of the newest write it took itself into the bucket (its
// own entry in the bucket's version; 0 for none).
type sourceFenceReply struct {
	DatabaseID string `json:"DatabaseId"`
	OwnEtag    uint64 `json:"OwnEtag"`
}

// sourceFences marks the buckets whose sender fenced this node's replica
// of their source shard (opSourceFence), each until a deadline: the record
// that shows their flip may reach this node a moment later, and until it
// does the write guard would let their writes in. It also holds the
// leases the senders took before their flips (opSourceLease), which
// refuse the same writes from before the flip on.
type sourceFences struct {
	n      atomic.Int32 // len(m)+len(leases): every routed write asks, and it is nearly always 0
	mu     sync.Mutex
	m      map[sourceFenceKey]sourceFence
	leases map[sourceFenceKey]sourceLease
}

type sourceFenceKey struct {
	db     string
	shard  int
	bucket uint32
}

// sourceFence is where a fenced bucket's writes go, and until when.
type sourceFence struct {
	to    ownerHint
	until time.Time
}

// sourceLease is a lease a bucket's sender took (opSourceLease): its
// migration, the sender's record it was asked by, and until when it holds.
type sourceLease struct {
	sender     string
	index      uint64
	recordEtag uint64
	until      time.Time
}

// sourceFenceWindow bounds a bucket's fence: the node applies the flip
// within milliseconds, and the write guard refuses from then on.
const sourceFenceWindow = 5 * time.Second

func (f *sourceFences) set(k sourceFenceKey, to ownerHint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[sourceFenceKey]sourceFence{}
	}
	f.m[k] = sourceFence{to: to, until: time.Now().Add(sourceFenceWindow)}
	f.n.Store(int32(len(f.m) + len(f.leases)))
}

// lease refuses k's routed writes for sourceLeaseWindow from now, or
// until this node's record ends the lease (see leaseEnded).
func (f *sourceFences) lease(k sourceFenceKey, l sourceLease) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leases == nil {
		f.leases = map[sourceFenceKey]sourceLease{}
	}
	l.until = time.Now().Add(sourceLeaseWindow)
	f.leases[k] = l
	f.n.Store(int32(len(f.m) + len(f.leases)))
}

// leaseEnded reports whether rec, db's record on this node, ends lease l
// on bucket b: it is at least the sender's record the lease was asked by,
// and shows l's migration flipped, or gone (or another one in its place).
// From then on the write guard decides.
func leaseEnded(rec *raftfsm.DatabaseRecord, b uint32, l sourceLease) bool {
	if rec == nil {
		return true // the database is gone
	}
	if rec.Etag < l.recordEtag {
		return false
	}
	m := rec.Sharding.BucketMigrations[b]
	return m == nil || m.MigrationIndex != l.index || m.Status == raftfsm.MigrationOwnershipTransferred
}

// refuse returns BucketNotOwned, naming the new owner, for a write whose
// op falls in a fenced bucket of db's shard, while this node's record
// (record, asked only when some bucket is fenced or leased) is older than
// the sender's: from the sender's record on, the write guard decides (the
// bucket may even have come back since). For an op in a leased bucket it
// returns the retryable BucketLeaving. Fences and leases that ended, or
// that db's record made moot, are dropped, so routed writes find none
// again.
func (f *sourceFences) refuse(db string, shard int, ops []storage.Op, record func() *raftfsm.DatabaseRecord) error {
	if f.n.Load() == 0 {
		return nil
	}
	rec := record()
	var etag uint64
	if rec != nil {
		etag = rec.Etag
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for k, v := range f.m {
		if now.After(v.until) || (k.db == db && etag >= v.to.RecordEtag) {
			delete(f.m, k)
		}
	}
	for k, v := range f.leases {
		if now.After(v.until) || (k.db == db && leaseEnded(rec, k.bucket, v)) {
			delete(f.leases, k)
		}
	}
	f.n.Store(int32(len(f.m) + len(f.leases)))
	for _, op := range ops {
		k := sourceFenceKey{db, shard, bucket.ForID(op.ID)}
		if v, ok := f.m[k]; ok {
			h := v.to
			return &apiError{Status: http.StatusMisdirectedRequest, Type: "BucketNotOwned", Owner: &h,
				Msg: fmt.Sprintf("shard %d no longer owns the bucket of %q: its sender made the last pass after the flip to shard %d (record etag %d)", shard, op.ID, h.Shard, h.RecordEtag)}
		}
		if v, ok := f.leases[k]; ok {
			return errBucketLeaving(db, shard, k.bucket, v.sender)
		}
	}
	return nil
}

// errBucketLeaving is the retryable refusal of a routed write into a
// bucket whose sender leased this replica (opSourceLease): the sender
// takes the bucket's writes until the flip, and the new owner after it.
func errBucketLeaving(db string, shard int, b uint32, sender string) error {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "BucketLeaving",
		Msg: fmt.Sprintf("bucket %d of %q is leaving shard %d: the replica on node %s, which sends it, takes its writes until the flip; try again shortly", b, db, shard, sender)}
}

// serveSourceFence is the peer's side of opSourceFence: from the mark on,
// routed writes into the bucket are refused as the write guard refuses
// them once this node applied the flip (with the new owner named); the
// fence lets those that passed before commit.
func (n *Node) serveSourceFence(ctx context.Context, data []byte) (any, error) {
	var req sourceFenceRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, badRequest("decode source fence request: %v", err)
	}
	l, err := n.local(req.DB, req.Shard)
	if err != nil {
		return nil, err
	}
	n.sourceFences.set(sourceFenceKey{req.DB, req.Shard, req.Bucket}, ownerHint{Shard: req.To, RecordEtag: req.RecordEtag})
	return n.fencedOwnWrites(ctx, l, req.Bucket)
}

// fencedOwnWrites waits until the client writes to l that passed before
// the call (before the caller marked b fenced or leased) have committed,
// then answers how far l's own writes into bucket b go, those included.
func (n *Node) fencedOwnWrites(ctx context.Context, l *localReplica, b uint32) (sourceFenceReply, error) {
	if err := n.replicas.fence(l.db, l.shard).wait(ctx); err != nil {
		return sourceFenceReply{}, fmt.Errorf("fence shard %d of %q for bucket %d: %w", l.shard, l.db, b, err)
	}
	return ownWrites(l, b)
}

// serveSourceLease is the peer's side of opSourceLease: from the lease on,
// routed writes into the bucket are refused as leaving (the sender takes
// them) until this node's record ends it or its window does; the fence
// lets those that passed before commit, and the answer covers them.
func (n *Node) serveSourceLease(ctx context.Context, data []byte) (any, error) {
	var req sourceLeaseRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, badRequest("decode source lease request: %v", err)
	}
	l, err := n.local(req.DB, req.Shard)
	if err != nil {
		return nil, err
	}
	n.sourceFences.lease(sourceFenceKey{req.DB, req.Shard, req.Bucket}, sourceLease{sender: req.Sender, index: req.MigrationIndex, recordEtag: req.RecordEtag})
	return n.fencedOwnWrites(ctx, l, req.Bucket)
}

// LeaseSourceReplicas asks the other reachable replicas of db's shard for
// a lease on bucket b (opSourceLease), all at once, and returns what those
// that answered within sourceFenceAsk promised.
func (c reshardCluster) LeaseSourceReplicas(ctx context.Context, db string, shard int, b uint32, index, recordEtag uint64) []resharding.PeerLease {
	n := c.n
	rec := n.recordOf(db)
	if rec == nil || rec.Sharding.Shards[shard] == nil || len(rec.Sharding.Shards[shard].Members) < 2 {
		return nil
	}
	req := sourceLeaseRequest{DB: db, Shard: shard, Bucket: b, Sender: n.cfg.Node.Tag, MigrationIndex: index, RecordEtag: recordEtag}
	var mu sync.Mutex
	var out []resharding.PeerLease
	var wg sync.WaitGroup
	for _, tag := range rec.Sharding.Shards[shard].Members {
		if tag == n.cfg.Node.Tag || !n.health.up(tag) {
			continue
		}
		wg.Go(func() {
			asked := time.Now() // the peer's window starts later
			actx, cancel := context.WithTimeout(ctx, sourceFenceAsk)
			defer cancel()
			var r sourceFenceReply
			if err := n.call(actx, tag, opSourceLease, req, &r); err != nil {
				if !isUnknownOp(err) && ctx.Err() == nil {
					n.logger.Debug("source replica gave no lease on a leaving bucket; the sender fences it at the flip",
						"db", db, "shard", shard, "bucket", b, "member", tag, "err", err)
				}
				return
			}
			mu.Lock()
			out = append(out, resharding.PeerLease{Node: tag, DatabaseID: r.DatabaseID, OwnEtag: r.OwnEtag, Until: asked.Add(sourceLeaseWindow)})
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// ownWrites answers how far l's own writes into bucket b go.
func ownWrites(l *localReplica, b uint32) (sourceFenceReply, error) {
	id := l.s.DatabaseID()
	st, err := l.s.BucketStats(b)
	if err != nil {
		return sourceFenceReply{}, fmt.Errorf("bucket %d of shard %d of %q: %w", b, l.shard, l.db, err)
	}
	v, err := changevector.ParseVector(st.ChangeVector)
	if err != nil {
		return sourceFenceReply{}, fmt.Errorf("bucket %d of shard %d of %q: version: %w", b, l.shard, l.db, err)
	}
	return sourceFenceReply{DatabaseID: id, OwnEtag: v.EtagOf(id)}, nil
}

// FenceSourceReplicas returns once this node's replica of the source shard
// holds every write the shard's other reachable replicas took themselves
// into bucket b before they were told of its flip to shard to (the record
// at recordEtag), or before they gave the lease they still hold (leases,
// with at least sourceLeaseMargin left: those are not asked again); from
// then on they refuse the bucket's writes, as they do once their nodes
// applied the flip. A replica that does not answer within sourceFenceAsk,
// or whose writes do not arrive within sourceFenceHold, is logged and not
// waited for; an error only when ctx ends.
func (c reshardCluster) FenceSourceReplicas(ctx context.Context, db string, shard int, b uint32, to int, recordEtag uint64, leases []resharding.PeerLease) error {
	n := c.n
	rec := n.recordOf(db)
	if rec == nil || rec.Sharding.Shards[shard] == nil || len(rec.Sharding.Shards[shard].Members) < 2 {
		return nil
	}
	l, err := n.local(db, shard)
	if err != nil {
		return nil // no replica here: no pass to make from it
	}
	req := sourceFenceRequest{DB: db, Shard: shard, Bucket: b, To: to, RecordEtag: recordEtag}
	var mu sync.Mutex
	want := map[string]uint64{} // peer replica's database id → its own writes' etag
	var wg sync.WaitGroup
	for _, tag := range rec.Sharding.Shards[shard].Members {
		if tag == n.cfg.Node.Tag || !n.health.up(tag) {
			continue
		}
		if i := slices.IndexFunc(leases, func(l resharding.PeerLease) bool { return l.Node == tag }); i >= 0 && time.Until(leases[i].Until) >= sourceLeaseMargin {
			if l := leases[i]; l.DatabaseID != "" && l.OwnEtag > 0 {
				mu.Lock() // the asks of the members before run meanwhile
				want[l.DatabaseID] = max(want[l.DatabaseID], l.OwnEtag)
				mu.Unlock()
			}
			continue
		}
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, sourceFenceAsk)
			defer cancel()
			var out sourceFenceReply
			if err := n.call(actx, tag, opSourceFence, req, &out); err != nil {
				if !isUnknownOp(err) {
					n.logger.Info("source replica did not say how far its writes into a flipped bucket go; the last pass does not wait for them",
						"db", db, "shard", shard, "bucket", b, "member", tag, "err", err)
				}
				return
			}
			if out.DatabaseID != "" && out.OwnEtag > 0 {
				mu.Lock()
				want[out.DatabaseID] = max(want[out.DatabaseID], out.OwnEtag)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	hctx, cancel := context.WithTimeout(ctx, sourceFenceHold)
	defer cancel()
	for {
		changed := l.s.Changed()
		var short []string
		for id, etag := range want {
			if got := l.s.ReplicationProgress(id); got < etag {
				short = append(short, fmt.Sprintf("%s at %d of %d", id, got, etag))
			}
		}
		if len(short) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-hctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			n.logger.Warn("last pass made without writes another source replica took into the bucket; they stay behind as leftovers",
				"db", db, "shard", shard, "bucket", b, "behind", short)
			return nil
		}
	}
}

// registerSourceFenceRPC serves opSourceFence and opSourceLease.
func (n *Node) registerSourceFenceRPC() {
	n.rpcHandlers[opSourceFence] = n.serveSourceFence
	n.rpcHandlers[opSourceLease] = n.serveSourceLease
}
