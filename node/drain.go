package node

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/raft"
)

// drainTimeout bounds how long a node that stops cleanly waits for its
// shards' other members to hold every write it acknowledged.
const drainTimeout = 10 * time.Second

// drainWrites is a clean stop's first step. A write is acknowledged once
// it is durable on the member that took it; replication to the shard's
// other members follows. A node stopped right after acknowledging writes
// (a rolling restart's SIGTERM) used to leave them on its disk only, and
// the member that took the shard's writes next accepted updates based on
// the older versions: acknowledged writes ended as conflict losers, and
// an If-Match check passed against a version that was no longer the
// latest.
//
// From the call on, a write reaching one of this node's replicas waits
// until the drain ends and is then refused with a retryable 503, so its
// router sends it to another member, which by then holds everything; the
// writes already committing finish, and each replica waits until every
// peer that is up and reachable acknowledged its last change, for at most
// drainTimeout.
func (n *Node) drainWrites() {
	n.draining.Store(true)
	defer close(n.drained)
	if !n.ready.Load() || n.replicas == nil {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	var lagging []string
	waited := 0
	for _, r := range n.replicas.local() {
		if r.rep == nil {
			continue
		}
		// Writes that entered before draining was set commit first.
		if err := n.replicas.fence(r.key.db, r.key.shard).wait(ctx); err != nil {
			break
		}
		last := r.store.LastEtag()
		if last == 0 {
			continue
		}
		waited++
		if behind := r.rep.Drain(ctx, last, func(peer string) bool { return !n.health.up(peer) }); len(behind) > 0 {
			lagging = append(lagging, fmt.Sprintf("%s$%d→%v", r.key.db, r.key.shard, behind))
		}
	}
	if len(lagging) > 0 {
		n.logger.Warn("stopping before every peer held this node's last writes; they reach them when this node is back",
			"waited", time.Since(start).Round(time.Millisecond), "behind", lagging)
		return
	}
	if waited > 0 {
		n.logger.Info("replication drained before stopping", "replicas", waited, "took", time.Since(start).Round(time.Millisecond))
	}
}

// refuseWhileStopping holds a write that reached a replica of a stopping
// node until the drain ends, then refuses it (retryable): the shard's
// next member takes it once it holds everything this node acknowledged.
func (n *Node) refuseWhileStopping(ctx context.Context, db string, shard int) error {
	select {
	case <-n.drained:
	case <-ctx.Done():
	}
	return n.errStopping(db, shard)
}

// errStopping is the retryable refusal of a stopping node's replica.
func (n *Node) errStopping(db string, shard int) error {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "NodeStopping",
		Msg: fmt.Sprintf("node %s is stopping: shard %d of %q takes requests on another member", n.cfg.Node.Tag, shard, db)}
}

// drainedAway reports whether this node stopping cleanly finished its
// drain: the shards' other members hold its writes and take the new ones,
// so a routed read it answered could miss writes acknowledged since.
func (n *Node) drainedAway() bool {
	if !n.draining.Load() {
		return false
	}
	select {
	case <-n.drained:
		return true
	default:
		return false
	}
}

// handOverLeadership makes another voter the raft leader before this one
// stops, when it leads: the cluster then has a leader at once instead of
// after an election timeout, during which no node confirms it follows the
// cluster and writes everywhere pause (a rolling restart stopped the
// leader once per round). It picks a voter this node hears from, and
// returns once that one leads, or after handOverWait.
func (n *Node) handOverLeadership() {
	if n.raft == nil || n.raft.r.State() != raft.Leader {
		return
	}
	f := n.raft.r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	var to *raft.Server
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.Node.Tag && n.health.up(string(s.ID)) {
			to = &s
			break
		}
	}
	if to == nil {
		return
	}
	start := time.Now()
	if err := n.raft.r.LeadershipTransferToServer(to.ID, to.Address).Error(); err != nil {
		n.logger.Warn("could not hand raft leadership over before stopping; the others elect a leader", "to", to.ID, "err", err)
		return
	}
	// The transfer ends when this node steps down; wait until it hears
	// from the new leader, so the cluster is not between leaders as this
	// node goes.
	deadline := time.Now().Add(handOverWait)
	for time.Now().Before(deadline) {
		if _, id := n.raft.r.LeaderWithID(); id != "" && string(id) != n.cfg.Node.Tag {
			n.logger.Info("handed raft leadership over before stopping", "to", id, "took", time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	n.logger.Warn("handed raft leadership over, but heard from no new leader before stopping", "to", to.ID, "waited", handOverWait)
}

// handOverWait bounds the wait for the new leader after a hand-over.
const handOverWait = 2 * time.Second
