package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// A node removed from the cluster (DELETE /cluster/nodes/{tag}) while it was
// down hears nothing when it restarts: the other members no longer send it
// the log or heartbeats, so it never learns of a leader. Rather than wait
// for its start-up deadline, it asks the nodes it hears on the bus, and
// stops with an error that says what happened.

// Intervals of waitLeader's check for a removal: raft names a leader within
// a heartbeat or an election when this node is a member, so the first
// check waits longer than that.
const (
	removedCheckAfter = 3 * time.Second
	removedCheckEvery = 2 * time.Second
)

// ErrRemoved means this node's data directory belongs to a membership that
// ended: the cluster removed the node.
var ErrRemoved = errors.New("node was removed from the cluster")

// waitLeader waits until raft knows a leader. It fails when ctx ends, or
// at once when a member that follows a leader says this node was removed.
func (n *Node) waitLeader(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	nextCheck := time.Now().Add(removedCheckAfter)
	for {
		if addr, _ := n.raft.r.LeaderWithID(); addr != "" {
			return nil
		}
		if time.Now().After(nextCheck) {
			if by, leader := n.removedBy(ctx); by != "" {
				return fmt.Errorf("%w: node %s (leader %s) no longer lists node %s; its data directory belongs to a membership that ended; start it with an empty data directory to add it again", ErrRemoved, by, leader, n.cfg.Node.Tag)
			}
			nextCheck = time.Now().Add(removedCheckEvery)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for raft leader: %w", ctx.Err())
		case <-n.refused:
			return n.errRefused()
		case <-t.C:
		}
	}
}

// errRefused is Start's error when the leader refused this node's
// registration: because the cluster removed it, or for refuseErr.
func (n *Node) errRefused() error {
	if n.refuseErr != nil {
		return n.refuseErr
	}
	return fmt.Errorf("%w: the leader refused node %s: its data directory belongs to a membership that ended; start it with an empty data directory to add it again", ErrRemoved, n.cfg.Node.Tag)
}

// removedBy asks the nodes it hears on the bus for their view of the
// cluster, and returns one that follows a leader and lists itself but not
// this node, with that leader. Only a node that was a member (its raft
// stores held state at start, or the state listed it since) asks: a new
// one is listed only once its join is done. The bus, not the state, names whom to ask: until a
// leader speaks, a restarted node's state is only its last snapshot's.
func (n *Node) removedBy(ctx context.Context) (by, leader string) {
	if !n.raft.existing && !n.wasMember.Load() {
		return "", ""
	}
	for _, tag := range n.health.heardFrom() {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		var view clusterAnswer
		err := n.call(ctx, tag, "node.cluster", struct{}{}, &view)
		cancel()
		if err != nil || view.Leader == "" || view.Leader == n.cfg.Node.Tag {
			continue
		}
		listed := func(tag string) bool {
			return slices.ContainsFunc(view.Nodes, func(c clusterNode) bool { return c.Tag == tag })
		}
		if listed(tag) && !listed(n.cfg.Node.Tag) {
			return tag, view.Leader
		}
	}
	return "", ""
}
