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
)

// A replica that caught up after a restart (or after its node was out of
// touch) asked each peer for its last etag once. The writes its router
// sent to a peer while it refused them (ShardCatchingUp) may commit there
// after that look; had the replica then served, it would have taken an
// If-Match write based on the version before such a write, and both
// members would have accepted a write with the same If-Match: a
// conflict. So, before it serves, the replica asks each peer that took
// the shard's writes in its place to hand them over (opHandOver): the
// peer stops taking routed writes for the shard, waits for those already
// committing (the write fence), and answers its last etag, which the
// replica then waits to hold.

// opHandOver asks a replica's peer to stop taking routed client writes
// for the shard and answer its last etag once the writes in flight have
// committed (see handOverRequest).
const opHandOver = "shard.hand-over"

// handOverWindow is how long a peer refuses routed writes for a shard it
// handed over: long enough for the replica to hold what the peer took and
// for every router to hear that the replica is up again, short enough that
// a replica that never serves keeps the shard unwritable only briefly. It
// ends sooner when the replica is known down.
const handOverWindow = 5 * time.Second

// handOverRequest is opHandOver's request.
type handOverRequest struct {
	DB    string `json:"Db"`
	Shard int    `json:"Shard"`
	// To is the node whose replica takes the writes over.
	To string `json:"To"`
}

// handOverReply is opHandOver's answer: the peer replica's database id
// and its last etag once the writes that were committing have committed.
type handOverReply struct {
	DatabaseID string `json:"DatabaseId"`
	LastEtag   uint64 `json:"LastEtag"`
}

// handOvers marks the replicas of this node that handed their shard's
// writes over to another member, each until a deadline.
type handOvers struct {
	n  atomic.Int32 // len(to): every routed write asks, and it is nearly always 0
	mu sync.Mutex
	to map[replicaKey]handOver
}

// handOver is one hand-over: to which node, and until when.
type handOver struct {
	to    string
	until time.Time
}

func (h *handOvers) set(k replicaKey, to string, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.to == nil {
		h.to = map[replicaKey]handOver{}
	}
	h.to[k] = handOver{to: to, until: until}
	h.n.Store(int32(len(h.to)))
}

// active returns the hand-over of k in force, if any; one that expired,
// or whose node stillUp no longer reports up, is dropped.
func (h *handOvers) active(k replicaKey, stillUp func(tag string) bool) (handOver, bool) {
	if h.n.Load() == 0 {
		return handOver{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ho, ok := h.to[k]
	if !ok {
		return handOver{}, false
	}
	if time.Now().After(ho.until) || !stillUp(ho.to) {
		delete(h.to, k)
		h.n.Store(int32(len(h.to)))
		return handOver{}, false
	}
	return ho, true
}

// handingOver refuses a routed client write to a replica that handed its
// shard's writes over to another member, while that lasts (retryable: the
// router asks the member that took them).
func (n *Node) handingOver(db string, shard int) error {
	ho, ok := n.handOvers.active(replicaKey{db, shard}, func(tag string) bool { return !n.health.knownDown(tag) })
	if !ok {
		return nil
	}
	return &apiError{Status: http.StatusServiceUnavailable, Type: "ShardHandingOver",
		Msg: fmt.Sprintf("shard %d of %q on node %s handed its writes over to node %s, which caught up with it; ask that member (for at most %v more)",
			shard, db, n.cfg.Node.Tag, ho.to, time.Until(ho.until).Round(time.Millisecond))}
}

// serveHandOver is the peer's side of opHandOver. From the mark on, routed
// writes entering the shard's write fence are refused; the fence's wait
// lets the ones that entered before commit first, so the etag answered
// covers every write this replica acknowledged.
func (n *Node) serveHandOver(ctx context.Context, data []byte) (any, error) {
	var req handOverRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, badRequest("decode hand-over request: %v", err)
	}
	l, err := n.local(req.DB, req.Shard)
	if err != nil {
		return nil, err
	}
	rec := n.recordOf(req.DB)
	if rec == nil || rec.Sharding.Shards[req.Shard] == nil || req.To == n.cfg.Node.Tag || !slices.Contains(rec.Sharding.Shards[req.Shard].Members, req.To) {
		return nil, &apiError{Status: http.StatusConflict, Type: "NotAMember",
			Msg: fmt.Sprintf("node %s is not another member of shard %d of %q in node %s's record", req.To, req.Shard, req.DB, n.cfg.Node.Tag)}
	}
	return n.handOver(ctx, l, req.To)
}

// handOver marks l's shard handed over to node to for handOverWindow and
// answers l's last etag once the writes that entered the write fence
// before the mark have committed. The mark lasts while to is not known
// down here; the request that asked, from to's current run, counts as
// word from it (health.heardRequest), so a node known down since it
// announced a clean stop is not taken for down by its own hand-over.
func (n *Node) handOver(ctx context.Context, l *localReplica, to string) (handOverReply, error) {
	n.handOvers.set(replicaKey{l.db, l.shard}, to, time.Now().Add(handOverWindow))
	if err := n.replicas.fence(l.db, l.shard).wait(ctx); err != nil {
		return handOverReply{}, fmt.Errorf("hand over shard %d of %q to %s: wait for the writes committing: %w", l.shard, l.db, to, err)
	}
	return handOverReply{DatabaseID: l.s.DatabaseID(), LastEtag: l.s.LastEtag()}, nil
}

// askHandOver asks tag's replica of the shard to hand its writes over to
// this node's.
func (r *remoteReplica) askHandOver(ctx context.Context) (handOverReply, error) {
	var out handOverReply
	err := r.n.call(ctx, r.tag, opHandOver, handOverRequest{DB: r.db, Shard: r.shard, To: r.n.cfg.Node.Tag}, &out)
	return out, err
}
