package node

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// A node routes and guards client requests by its copy of the database
// records. A node that stopped hearing the cluster (a long GC pause, a
// SIGSTOP, a cut link) wakes up with records that may be out of date: a
// database deleted and created again meanwhile was written into through
// its old, dropped replicas, and those acknowledged writes vanished. Raft's
// last contact says nothing here: hashicorp/raft's heartbeats carry no
// commit index, so a follower hears them while its log lags.
//
// So every node confirms, every freshEvery, that it applied everything the
// cluster had committed: the leader by a round of heartbeats to a quorum
// (VerifyLeader), a follower by applying through the commit index of a
// leader that has just confirmed it is leader. A node takes client writes
// only within freshFor of the moment its last confirmation was asked for;
// past it, a write waits for the next confirmation, at most freshWait, and
// then gets a retryable 503 NodeCatchingUp (so writes pause while the
// cluster elects a leader); a write routed to a replica on such a node
// waits at most routedFreshWait. A replica trusts a router's newer record
// only while its own node is fresh. Reads are served throughout: a stale node
// answers from what it holds, and its replicas catch up again once it is
// back (kickCatchUps); a routed read first waits up to routedFreshWait for
// a confirmation (localReplica.servesReads). A replica that refused a
// routed write while its node was stale (another member may have taken
// it, see refusedWhileStale) serves nothing until it caught up.
//
// Staleness is thereby bounded by freshFor, and a database delete waits
// freshFor before it answers: any request a client sends after the answer
// finds every node either aware of the delete or refusing.
const (
	// routedFreshWait is how long a write routed to a replica on a node
	// that is not current waits for it to be (see localReplica.write).
	routedFreshWait = time.Second
	freshEvery      = 200 * time.Millisecond
	freshFor        = time.Second
	freshWait       = 2 * time.Second
)

// freshness is when this node last confirmed it follows the cluster's
// committed state.
type freshness struct {
	base time.Time    // a monotonic origin
	at   atomic.Int64 // ns since base at which the last confirmed check was asked; 0: never
	mu   sync.Mutex
	ch   chan struct{} // closed and replaced at each confirmation
}

func newFreshness() *freshness {
	return &freshness{base: time.Now(), ch: make(chan struct{})}
}

// confirm records a check asked at asked that succeeded.
func (f *freshness) confirm(asked time.Time) {
	at := int64(asked.Sub(f.base)) + 1
	for {
		cur := f.at.Load()
		if at <= cur || f.at.CompareAndSwap(cur, at) {
			break
		}
	}
	f.mu.Lock()
	close(f.ch)
	f.ch = make(chan struct{})
	f.mu.Unlock()
}

// fresh reports whether the last confirmation is recent enough to serve by.
func (f *freshness) fresh() bool {
	age, ok := f.age()
	return ok && age < freshFor
}

// age is how long ago the last confirmed check was asked; false if never.
func (f *freshness) age() (time.Duration, bool) {
	at := f.at.Load()
	return time.Since(f.base) - time.Duration(at), at != 0
}

// wait waits until fresh, at most max; it reports whether it is.
func (f *freshness) wait(ctx context.Context, max time.Duration) bool {
	t := time.NewTimer(max)
	defer t.Stop()
	for !f.fresh() {
		f.mu.Lock()
		ch := f.ch
		f.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return f.fresh()
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// runFreshness confirms, every freshEvery, that this node follows the
// cluster's committed state (see freshness). While no leader is known it
// also asks the other nodes whether the cluster removed this one.
func (n *Node) runFreshness(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(freshEvery)
	defer t.Stop()
	var leaderless time.Time
	// cutOff: during the current lapse this process stood still (this loop
	// did not run for freshFor) or heard no other node; its replicas may
	// then lack writes their peers took. A lapse that is only a leader
	// election, while replication ran on, is not one.
	cutOff := false
	alone := false     // during the lapse this node heard no other node
	stood := false     // during the lapse this process stood still
	refused := false   // see refusedWhileStale
	marked := false    // the replicas were marked behind for this lapse
	last := time.Now() // when the previous check returned
	// markBehind marks the replicas once per lapse that cut this node
	// off: reads that queued while the process stood still run now, and
	// go to other members until the replicas caught up (kicked at the
	// next confirmation).
	markBehind := func() {
		if cutOff && !marked && n.ready.Load() {
			n.markAllBehind()
			marked = true
		}
	}
	for {
		asked := time.Now()
		// The ticker wakes this loop freshEvery after a check returned
		// (or at once after a slow one): a much longer gap is this
		// process standing still. A check that waited on a hung leader
		// is not.
		if asked.Sub(last) > freshFor {
			cutOff, stood = true, true
		}
		markBehind()
		asOf, err := n.checkFresh(ctx, asked)
		last = time.Now()
		// A check gives up after freshFor; one that took much longer was
		// frozen with its process.
		if last.Sub(asked) > freshFor+freshFor/2 {
			cutOff, stood = true, true
		}
		if err != nil && n.health.heardNone(freshFor) {
			cutOff, alone = true, true
		}
		markBehind()
		if n.staleRefusals.Swap(false) {
			// A replica refused routed writes for want of a confirmation,
			// and their routers sent them to other members: it is marked
			// behind, and catches up at the next confirmation, even one
			// that comes before this loop sees the node lapsed.
			refused = true
		}
		switch {
		case err == nil:
			if ((!n.fresh.fresh() && cutOff) || refused || marked) && n.ready.Load() {
				// Back in touch: the replicas' peers may hold writes these
				// lack. Marked before the node serves again.
				n.logger.Info("node is back in touch with the cluster; its replicas catch up with their peers", "heard_none", alone, "stood_still", stood)
				if alone || stood {
					// Every peer looks down from here only because this
					// node was cut off, or heard nothing while its process
					// stood still: a catch-up that skipped them would
					// serve without the writes they took meanwhile (reads
					// queued during a SIGSTOP answered the version from
					// before it, once in a CI run). Count them as at a
					// start instead.
					n.rejoined.Store(time.Now().UnixNano())
					n.health.forgetSilence()
				}
				n.kickCatchUps()
			}
			cutOff, alone, stood, refused, marked = false, false, false, false, false
			n.fresh.confirm(asOf)
			leaderless = time.Time{}
		case ctx.Err() != nil:
			return
		default:
			n.logger.Debug("confirm the node follows the cluster", "err", err)
			if addr, _ := n.raft.r.LeaderWithID(); addr != "" {
				leaderless = time.Time{}
			} else if leaderless.IsZero() {
				leaderless = asked
			} else if time.Since(leaderless) > removedCheckAfter {
				if by, leader := n.removedBy(ctx); by != "" {
					n.removedForGood.Store(true)
					n.logger.Warn("this node was removed from the cluster", "told_by", by, "leader", leader)
				}
				leaderless = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkFresh confirms once that this node applied everything the cluster
// had committed at the returned moment, at or before asked.
func (n *Node) checkFresh(ctx context.Context, asked time.Time) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, freshFor)
	defer cancel()
	if n.raft.r.State() == raft.Leader {
		if err := n.raft.r.VerifyLeader().Error(); err != nil {
			return asked, err
		}
		return asked, n.replicas.waitSettled(ctx, n.fsm.AppliedIndex())
	}
	url := n.leaderURL()
	if url == "" {
		return asked, fmt.Errorf("no leader known")
	}
	var rep applyReply
	if err := n.postJSON(ctx, url+"/internal/raft/commit-index", nil, &rep); err != nil {
		return asked, err
	}
	// The leader's commit index covers what was committed when it last
	// confirmed it leads, which may be before this node asked. The
	// replicas must follow what was applied too: a deleted database's
	// replica is closed before the node counts as current again.
	if err := n.waitAppliedThrough(ctx, rep.Index); err != nil {
		return asked, err
	}
	return asked.Add(-rep.FreshAgo), n.replicas.waitSettled(ctx, n.fsm.AppliedIndex())
}

// refusedWhileStale notes that a replica of this node refused a routed
// write because the node could not confirm it follows the cluster. The
// router then sends the write to another member, which may take it (a
// member on a node that still hears the leader): an If-Match write this
// replica took later, against the version it holds, would pass against an
// older version than the latest acknowledged one. So the replica is behind
// from now on (reads go to another member too), and when the node
// confirms again its replicas catch up (and have their later members hand
// the writes over) before they serve, as after a pause.
func (n *Node) refusedWhileStale(db string, shard int) {
	n.catchUps.set(replicaKey{db, shard}, true)
	n.staleRefusals.Store(true)
}

// errNotFresh answers a client request on a node that could not confirm
// it follows the cluster.
func (n *Node) errNotFresh() error { // always an *apiError
	return &apiError{Status: http.StatusServiceUnavailable, Type: "NodeCatchingUp",
		Msg: fmt.Sprintf("node %s has not confirmed for %v that it follows the cluster's state (no leader reachable, or it was paused or cut off); it serves databases again once it has caught up; retry shortly or ask another node", n.cfg.Node.Tag, freshFor)}
}
