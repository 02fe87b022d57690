package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardnode/shardnode/storage"
)

// catchUpTimeout bounds how long a replica that opened on this node keeps
// client requests away while it catches up with its peers: past it, it
// serves what it has (a peer that answers but sends nothing must not keep
// a shard from being served for ever).
const catchUpTimeout = 30 * time.Second

// catchUps marks the replicas of this node that are behind their peers:
// ones that opened after a restart, or that were just placed here, while
// the other members took writes. Routed client requests (reads, writes,
// queries, listings) skip such a replica for another member; it would
// answer from old data, and a write based on that (an If-Match with the
// change vector it served) would replace an acknowledged newer version.
// Reads through "{db}${n}" still see it as it is.
type catchUps struct {
	n      atomic.Int32 // len(behind): every routed read asks, and it is nearly always 0
	mu     sync.Mutex
	behind map[replicaKey]bool
	// lifted is closed (and replaced) when a replica's mark is lifted:
	// requests waiting for a member to serve look again.
	lifted chan struct{}
}

func (c *catchUps) set(k replicaKey, behind bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.behind == nil {
		c.behind = map[replicaKey]bool{}
	}
	if behind {
		c.behind[k] = true
	} else if c.behind[k] {
		delete(c.behind, k)
		if c.lifted != nil {
			close(c.lifted)
			c.lifted = nil
		}
	}
	c.n.Store(int32(len(c.behind)))
}

// wait returns when a replica of this node serves again after catching
// up, after d, or when ctx ends, whichever comes first.
func (c *catchUps) wait(ctx context.Context, d time.Duration) {
	c.mu.Lock()
	if c.lifted == nil {
		c.lifted = make(chan struct{})
	}
	lifted := c.lifted
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-lifted:
	case <-t.C:
	case <-ctx.Done():
	}
}

func (c *catchUps) isBehind(db string, shard int) bool {
	if c.n.Load() == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.behind[replicaKey{db, shard}]
}

// errCatchingUp refuses a routed client request to a replica that is
// catching up; it is retryable, so the router tries another member.
func errCatchingUp(n *Node, db string, shard int) error {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "ShardCatchingUp",
		Msg: fmt.Sprintf("shard %d of %q on node %s does not serve yet: the node is starting, or the replica is catching up with its other members; ask another member", shard, db, n.cfg.Node.Tag)}
}

// replicaCatchUp catches one open replica up with its peers: once when it
// opens, and again each time the node was out of touch with the cluster
// (see kickCatchUps), since its peers may have taken writes meanwhile.
type replicaCatchUp struct {
	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// Close stops the catching up (before the replica's store closes).
func (c *replicaCatchUp) Close() {
	c.cancel()
	<-c.done
}

// startCatchUp starts catching up the replica just opened: it asks every
// other member for its database id and last etag and, while this
// replica's replication progress from one is short of that, marks it
// behind. A member that does not answer is not waited for.
func (n *Node) startCatchUp(db string, shard int, s *storage.Store) *replicaCatchUp {
	k := replicaKey{db, shard}
	if rec := n.recordOf(db); rec != nil && rec.Sharding.Shards[shard] != nil && len(rec.Sharding.Shards[shard].Members) > 1 {
		// Marked from the moment it opens until its peers have been
		// asked, on a node that serves already too: a replica that opened
		// just after its node became ready (a restart) took writes on
		// what it held before its peers answered, though the other member
		// had taken newer ones while it was stopped (an explorer: If-Match
		// increments acknowledged twice after each restart of a node whose
		// stop took seconds). The first catch-up lifts the mark.
		n.catchUps.set(k, true)
	}
	ctx, cancel := context.WithCancel(n.runCtx)
	c := &replicaCatchUp{kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer close(c.done)
		for {
			n.catchUpOnce(ctx, k, s)
			select {
			case <-ctx.Done():
				return
			case <-c.kick:
			}
		}
	}()
	return c
}

// catchUpOnce runs catchUp within catchUpTimeout and then lifts the
// replica's mark. On a node that is starting, it first waits until the
// node is ready, with the replica marked: replication to it goes on
// meanwhile, and a catch-up done before the node serves would let the
// peers take writes for a while after it looked (its routers send them
// there while this node refuses).
func (n *Node) catchUpOnce(ctx context.Context, k replicaKey, s *storage.Store) {
	defer n.catchUps.set(k, false)
	if !n.ready.Load() {
		n.catchUps.set(k, true)
		select {
		case <-n.readyCh:
		case <-ctx.Done():
			return
		}
	}
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	start := time.Now()
	if err := n.catchUp(ctx, k, s); err != nil && n.runCtx.Err() == nil && !errors.Is(err, context.Canceled) {
		n.logger.Warn("replica serves before it caught up with its peers", "db", k.db, "shard", k.shard, "err", err)
		return
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		n.logger.Info("replica caught up with its peers", "db", k.db, "shard", k.shard, "took", d)
	}
}

// kickCatchUps marks every open replica of this node behind at once and
// has each catch up with its peers again: the node was out of touch with
// the cluster (paused, cut off), and the other members may have taken
// writes it lacks. Until a replica's peers are asked, routed requests go
// to another member rather than read old data or base a write on it.
func (n *Node) kickCatchUps() {
	n.replicas.forEachAgent(func(k replicaKey, a io.Closer) {
		ac, ok := a.(agentCloser)
		if !ok || ac.catchUp == nil {
			return
		}
		n.catchUps.set(k, true)
		select {
		case ac.catchUp.kick <- struct{}{}:
		default: // one is pending already
		}
	})
}

// markAllBehind marks every open replica of this node behind, without
// starting their catch-up: the node found it stood still or was cut off,
// and until it confirms it follows the cluster again (which kicks the
// catch-ups, see runFreshness) routed reads go to other members rather
// than answer from what the replicas held before. Catching up at once
// would have the later members hand their writes over to a replica whose
// node cannot take them yet.
func (n *Node) markAllBehind() {
	n.replicas.forEachAgent(func(k replicaKey, a io.Closer) {
		if ac, ok := a.(agentCloser); ok && ac.catchUp != nil {
			n.catchUps.set(k, true)
		}
	})
}

// peerReachWait is how long after its start a node keeps asking a peer
// that no responder answers for, before its catch-up counts the peer
// unreachable: its embedded NATS server's routes to the others connect
// after it starts, and until then every peer looks unreachable. A node
// restarted after kill -9 so served a shard from what it held, without
// the writes the other member took meanwhile, and both members took
// If-Match writes on the same version (an explorer: increments
// acknowledged twice).
const peerReachWait = 3 * time.Second

// peerStats asks tag's replica of the shard for its stats. A peer no
// responder answers for is asked again, every 100 ms, while this node
// started less than peerReachWait ago and has not counted it down.
func (n *Node) peerStats(ctx context.Context, tag, db string, shard int) (replicaStats, error) {
	for {
		sctx, cancel := context.WithTimeout(ctx, readAttemptTimeout)
		st, err := (&remoteReplica{n: n, tag: tag, db: db, shard: shard}).stats(sctx)
		cancel()
		if err == nil || !errors.Is(err, errUnreachable) || n.health.knownDown(tag) || n.routesSettled() {
			return st, err
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return st, err
		case <-t.C:
		}
	}
}

// catchUp marks the replica behind only once a member is known to be
// ahead of it, or while members hand their writes over to it (see
// takeWritesOver): a replica of a shard with no other member never
// refuses anything (while its node starts, the node's own gate refuses
// routed requests).
func (n *Node) catchUp(ctx context.Context, k replicaKey, s *storage.Store) error {
	db, shard := k.db, k.shard
	rec := n.recordOf(db)
	if rec == nil || rec.Sharding.Shards[shard] == nil {
		return nil
	}
	members := rec.Sharding.Shards[shard].Members
	want := map[string]uint64{} // peer replica's database id → its last etag
	var answered []string       // the peers that did, in member order
	for _, tag := range members {
		if tag == n.cfg.Node.Tag {
			continue
		}
		if n.health.knownDown(tag) {
			n.logger.Info("replica does not wait for a member that is down", "db", db, "shard", shard, "member", tag)
			continue
		}
		st, err := n.peerStats(ctx, tag, db, shard)
		if err != nil {
			// Not there (yet), or down: nothing to wait for. What only it
			// holds is served once it is back (docs/operations.md, "What
			// holds").
			n.logger.Info("replica does not wait for a member it cannot reach", "db", db, "shard", shard, "member", tag, "err", err)
			continue
		}
		answered = append(answered, tag)
		if st.LastEtag > 0 && st.DatabaseID != "" {
			want[st.DatabaseID] = st.LastEtag
		}
	}
	if err := n.waitProgress(ctx, k, s, want); err != nil {
		return err
	}
	self := slices.Index(members, n.cfg.Node.Tag)
	var later []string
	for _, tag := range answered {
		if self >= 0 && slices.Index(members, tag) > self {
			later = append(later, tag)
		}
	}
	return n.takeWritesOver(ctx, k, s, later)
}

// waitProgress waits until the replica's replication progress from each
// peer replica (by database id) reaches the etag want names, with the
// replica marked behind while it has not.
func (n *Node) waitProgress(ctx context.Context, k replicaKey, s *storage.Store, want map[string]uint64) error {
	for {
		changed := s.Changed()
		behind := false
		for id, etag := range want {
			behind = behind || s.ReplicationProgress(id) < etag
		}
		if !behind {
			return nil
		}
		n.catchUps.set(k, true)
		select {
		case <-changed:
		case <-ctx.Done():
			var short []string
			for id, etag := range want {
				if got := s.ReplicationProgress(id); got < etag {
					short = append(short, fmt.Sprintf("%s at %d of %d", id, got, etag))
				}
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("timed out behind peer replicas (%s)", strings.Join(short, ", "))
			}
			return fmt.Errorf("wait for peer replicas (%s): %w", strings.Join(short, ", "), ctx.Err())
		}
	}
}

// takeWritesOver has the peers that come after this node in the shard's
// member order (routers prefer this one to them once it serves; they
// took the shard's writes while it did not) hand the shard's writes over
// (opHandOver), and waits until the replica holds what each had then. A
// write its router sent to a peer while this replica refused it may
// commit there after the first look at the peer's etag: serving without
// it, the replica would take an If-Match write based on the version
// before it, and both members would accept a write with the same
// If-Match (a conflict).
//
// The peers refuse routed writes for handOverWindow from the request on;
// when the replica does not hold their etags within half of it, it asks
// again (which renews the window) until catchUpTimeout. A peer of an
// earlier version, which does not know the op, or one that does not
// answer, is not waited for: the replica serves as it did before.
func (n *Node) takeWritesOver(ctx context.Context, k replicaKey, s *storage.Store, peers []string) error {
	if len(peers) == 0 {
		return nil
	}
	n.catchUps.set(k, true) // no routed request until the peers handed over
	for {
		want := map[string]uint64{}
		for _, tag := range peers {
			hctx, cancel := context.WithTimeout(ctx, readAttemptTimeout)
			ho, err := (&remoteReplica{n: n, tag: tag, db: k.db, shard: k.shard}).askHandOver(hctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("ask %s to hand the writes over: %w", tag, ctx.Err())
				}
				if isUnknownOp(err) {
					n.logger.Info("member of an earlier version cannot hand the shard's writes over; serving once caught up", "db", k.db, "shard", k.shard, "member", tag)
				} else {
					n.logger.Info("member did not hand the shard's writes over; serving without them", "db", k.db, "shard", k.shard, "member", tag, "err", err)
				}
				continue
			}
			if ho.LastEtag > 0 && ho.DatabaseID != "" {
				want[ho.DatabaseID] = ho.LastEtag
			}
		}
		wctx, cancel := context.WithTimeout(ctx, handOverWindow/2)
		err := n.waitProgress(wctx, k, s, want)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		n.logger.Info("replica does not hold what its members handed over yet; asking again", "db", k.db, "shard", k.shard, "members", peers)
	}
}
