package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
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

// opSourceFence tells a source replica's peer that the bucket flipped and
// asks how far its own writes into it go.
const opSourceFence = "migration.source-fence"

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

// sourceFenceReply is opSourceFence's answer: the peer replica's database
// id, and the etag of the newest write it took itself into the bucket (its
// own entry in the bucket's version; 0 for none).
type sourceFenceReply struct {
	DatabaseID string `json:"DatabaseId"`
	OwnEtag    uint64 `json:"OwnEtag"`
}

// sourceFences marks the buckets whose sender fenced this node's replica
// of their source shard (opSourceFence), each until a deadline: the record
// that shows their flip may reach this node a moment later, and until it
// does the write guard would let their writes in.
type sourceFences struct {
	n  atomic.Int32 // len(m): every routed write asks, and it is nearly always 0
	mu sync.Mutex
	m  map[sourceFenceKey]sourceFence
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
	f.n.Store(int32(len(f.m)))
}

// refuse returns BucketNotOwned, naming the new owner, for a write whose
// op falls in a fenced bucket of db's shard, while this node's record
// (recordEtag, asked only when some bucket is fenced) is older than the
// sender's: from the sender's record on, the write guard decides (the
// bucket may even have come back since). Fences that ended, or that db's
// record made moot, are dropped, so routed writes find none again.
func (f *sourceFences) refuse(db string, shard int, ops []storage.Op, recordEtag func() uint64) error {
	if f.n.Load() == 0 {
		return nil
	}
	etag := recordEtag()
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for k, v := range f.m {
		if now.After(v.until) || (k.db == db && etag >= v.to.RecordEtag) {
			delete(f.m, k)
		}
	}
	f.n.Store(int32(len(f.m)))
	for _, op := range ops {
		if v, ok := f.m[sourceFenceKey{db, shard, bucket.ForID(op.ID)}]; ok {
			h := v.to
			return &apiError{Status: http.StatusMisdirectedRequest, Type: "BucketNotOwned", Owner: &h,
				Msg: fmt.Sprintf("shard %d no longer owns the bucket of %q: its sender made the last pass after the flip to shard %d (record etag %d)", shard, op.ID, h.Shard, h.RecordEtag)}
		}
	}
	return nil
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
	if err := n.replicas.fence(req.DB, req.Shard).wait(ctx); err != nil {
		return nil, fmt.Errorf("fence shard %d of %q for bucket %d: %w", req.Shard, req.DB, req.Bucket, err)
	}
	return ownWrites(l, req.Bucket)
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
// at recordEtag); from then on they refuse the bucket's writes, as they do
// once their nodes applied the flip. A replica that does not answer within
// sourceFenceAsk, or whose writes do not arrive within sourceFenceHold, is
// logged and not waited for; an error only when ctx ends.
func (c reshardCluster) FenceSourceReplicas(ctx context.Context, db string, shard int, b uint32, to int, recordEtag uint64) error {
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
				want[out.DatabaseID] = out.OwnEtag
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

// registerSourceFenceRPC serves opSourceFence.
func (n *Node) registerSourceFenceRPC() {
	n.rpcHandlers[opSourceFence] = n.serveSourceFence
}
