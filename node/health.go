package node

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Heartbeats: every node publishes its tag and incarnation (random, new at
// every start) on sn.<cluster>.heartbeat every heartbeatEvery; a node not
// heard from within downAfter is Down. Routing prefers nodes that are up,
// and a request that finds no responder marks its node down at once.
const (
	heartbeatEvery = 250 * time.Millisecond
	downAfter      = 1500 * time.Millisecond
)

// health tracks when each node was last heard from.
type health struct {
	self string
	mu   sync.RWMutex
	seen map[string]time.Time
	inc  map[string]string        // each node's incarnation, from its heartbeats
	down map[string]chan struct{} // closed when the node is found down
	left map[string]string        // the incarnation of each node that announced a clean stop
	// stopping is the incarnation of each node that announced the end of
	// its drain: it still answers, but takes no more writes, nor does it
	// move buckets (see markStopping).
	stopping map[string]string
	// lastSweep is when sweep last ran; a long gap means this process
	// stood still (frozen, starved), not that the others went quiet.
	lastSweep time.Time
	// quietSince is when this node started, or last forgot the others'
	// silence (forgetSilence); asked is when a request first went to
	// each node not heard from since. Such a node is found down once
	// it was asked and stayed silent for reachGrace after both: before
	// then the bus routes may still be connecting.
	quietSince time.Time
	asked      map[string]time.Time
	reachGrace time.Duration
}

func newHealth(self string) *health {
	return &health{self: self, seen: map[string]time.Time{}, inc: map[string]string{}, down: map[string]chan struct{}{}, left: map[string]string{}, stopping: map[string]string{},
		quietSince: time.Now(), asked: map[string]time.Time{}, reachGrace: peerReachWait}
}

// downSignal returns a channel closed when tag is next found down, so a
// request in flight to a node that died stops waiting for its reply.
func (h *health) downSignal(tag string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch, ok := h.down[tag]
	if !ok {
		ch = make(chan struct{})
		h.down[tag] = ch
	}
	if _, heard := h.seen[tag]; !heard {
		if _, ok := h.asked[tag]; !ok {
			h.asked[tag] = time.Now()
		}
	}
	return ch
}

// sweep fires the down signal of every node not heard from in time. It
// runs every heartbeatEvery; when this process stood still in between, the
// others' silence over that gap is its own, and it does not count: their
// last heartbeats are moved forward by the gap, so requests in flight from
// a node that was frozen are not cut short as if their targets had died.
func (h *health) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if !h.lastSweep.IsZero() {
		if stall := now.Sub(h.lastSweep) - heartbeatEvery; stall > downAfter/2 {
			for tag, seen := range h.seen {
				if !seen.IsZero() && tag != h.self {
					h.seen[tag] = seen.Add(stall)
				}
			}
		}
	}
	h.lastSweep = now
	for tag, ch := range h.down {
		seen, heard := h.seen[tag]
		if !heard {
			// Never heard from since this node started (or came back in
			// touch): routing prefers it as a node that is up. Found down
			// only once it was asked and stayed silent while the bus
			// routes had time to connect; from then on it counts down
			// (knownDown) until heard again. Before, requests to it were
			// cut short at the first sweep, right after a start too, and
			// a member that froze before this node ever heard it was
			// never counted down: every write went to it first and ended
			// in a 504.
			since := h.quietSince
			if a := h.asked[tag]; a.After(since) {
				since = a
			}
			if now.Sub(since) < h.reachGrace {
				continue
			}
			h.seen[tag] = time.Time{}
			delete(h.asked, tag)
		}
		if now.Sub(seen) >= downAfter {
			close(ch)
			delete(h.down, tag)
		}
	}
}

// heard records a heartbeat of tag's incarnation inc. A new incarnation
// means the node restarted, perhaps faster than downAfter: whatever was in
// flight to the old process will never be answered, so the down signal
// fires as if the node had been found down.
func (h *health) heard(tag, inc string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.inc[tag]; ok && old != inc {
		if ch, ok := h.down[tag]; ok {
			close(ch)
			delete(h.down, tag)
		}
	}
	h.inc[tag] = inc
	h.seen[tag] = time.Now()
	delete(h.asked, tag)
}

// heardRequest records a node-to-node request from tag's run inc as word
// from that run, as its heartbeat would be. A node that stopped cleanly is
// known down from its announcement until it is heard again, and its next
// run's first heartbeat can come a heartbeatEvery after its first
// requests: a restarted replica's catch-up, which asks its peers for their
// last etags and the later members to hand the shard's writes over, could
// end before then. A member that still counted it down dropped the
// hand-over's mark at once (its window lasts while the node handed over to
// is not known down) and took its own router's writes while the restarted
// replica served the others' (the likely cause of If-Match increments
// acknowledged twice in one CI run's rolling restart); and a replica
// refusing a write did not wait for it to hold its writes before the
// router passed the write on to it (see handOff).
//
// A request from a run that announced a clean stop does not count (it may
// still send while it closes), nor one from a run other than the one heard
// within downAfter: that is an earlier run's last word, or a run too new
// to be told from it, and heartbeats settle which.
func (h *health) heardRequest(tag, inc string) {
	if tag == "" || inc == "" || tag == h.self {
		return
	}
	h.mu.RLock()
	cur, seen, left := h.inc[tag], h.seen[tag], h.left[tag]
	h.mu.RUnlock()
	since := time.Since(seen)
	switch {
	case left == inc:
		return
	case cur == inc && since < heartbeatEvery:
		return // heard lately: nothing to record
	case cur != "" && cur != inc && since < downAfter:
		return
	}
	h.heard(tag, inc)
}

// incarnation is the incarnation tag was last heard with ("" if never):
// a leaving message from an earlier run of a node that restarted since
// must not count the new run down.
func (h *health) incarnation(tag string) string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.inc[tag]
}

// markLeft counts a node that announced it stopped cleanly (its
// incarnation inc) down for routing at once. Its down signal fires at the
// next sweep, not now: the node answered every request it took before it
// announced, and an answer may still be on its way here on another
// subscription, which a request cut short now would report as a 504 of
// unknown outcome. Requests in flight to it wait for their answers even
// then (see leftCleanly).
func (h *health) markLeft(tag, inc string) {
	h.mu.Lock()
	h.seen[tag] = time.Time{}
	h.left[tag] = inc
	h.mu.Unlock()
}

// leftCleanly reports that tag's latest incarnation announced a clean
// stop. Such a node runs no request after its announcement and answers
// every one it receives until it closes its bus connection (NodeStopping),
// so a request in flight to it is worth waiting for a little longer than
// its down signal: cut short, it would be a 504 of unknown outcome,
// several per clean stop, as the routers' last writes reached the node
// while it closed.
func (h *health) leftCleanly(tag string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	inc, ok := h.left[tag]
	return ok && inc == h.inc[tag]
}

// markStopping records that tag's run inc ended its drain on its way to a
// clean stop. Until it has closed (seconds, when its HTTP server waits for
// requests in flight) it still beats and answers, so it stays up for
// routing, but it makes no bucket's passes: the other source members took
// it for their shard's sender meanwhile, and no member made the last pass
// of a bucket that had flipped, whose new owner held its writes until the
// node finally left (3-4 s under load, in a test that stops nodes during
// moves).
func (h *health) markStopping(tag, inc string) {
	h.mu.Lock()
	h.stopping[tag] = inc
	h.mu.Unlock()
}

// isStopping reports whether tag's latest run announced the end of its
// drain (see markStopping).
func (h *health) isStopping(tag string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	inc, ok := h.stopping[tag]
	return ok && inc == h.inc[tag]
}

func (h *health) markDown(tag string) {
	h.mu.Lock()
	h.seen[tag] = time.Time{} // heard before, down now
	if ch, ok := h.down[tag]; ok {
		close(ch)
		delete(h.down, tag)
	}
	h.mu.Unlock()
}

// forgetSilence forgets when each other node was last heard from, as if
// this node had just started: it heard none of them because it was cut
// off, and their silence says nothing of whether they run. A node not
// heard from again is counted down only once a request finds it
// unreachable after the bus routes had time to reconnect (see
// routesSettled), the way a just-started node counts its peers.
func (h *health) forgetSilence() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for tag := range h.seen {
		if tag != h.self {
			delete(h.seen, tag)
		}
	}
	clear(h.asked)
	h.quietSince = time.Now()
}

// up reports whether tag was heard from recently (this node always is).
func (h *health) up(tag string) bool {
	if tag == h.self {
		return true
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	return time.Since(h.seen[tag]) < downAfter
}

// knownDown reports a node that was heard from and then went quiet: a
// node not heard from yet (this node just started) is not known down.
func (h *health) knownDown(tag string) bool {
	if tag == h.self {
		return false
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	seen, ok := h.seen[tag]
	return ok && time.Since(seen) >= downAfter
}

// heardNone reports whether no other node was heard from within d while
// some are known: this node is cut off from the rest, not just missing one
// that is down.
func (h *health) heardNone(d time.Duration) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	known := false
	for tag, seen := range h.seen {
		if tag == h.self {
			continue
		}
		known = true
		if time.Since(seen) <= d {
			return false
		}
	}
	return known
}

// heardFrom lists the other nodes heard from, in no particular order.
func (h *health) heardFrom() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]string, 0, len(h.seen))
	for tag := range h.seen {
		if tag != h.self {
			out = append(out, tag)
		}
	}
	return out
}

// lastSeen returns when tag was last heard from.
func (h *health) lastSeen(tag string) time.Time {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.seen[tag]
}

func (n *Node) heartbeatSubject() string { return "sn." + n.cfg.Cluster.Name + ".heartbeat" }

// leavingSubject carries the tag of a node that stops cleanly, once its
// heartbeats ended: the others count it down at once instead of after
// downAfter, so routers stop sending it requests it would refuse.
func (n *Node) leavingSubject() string { return "sn." + n.cfg.Cluster.Name + ".leaving" }

// stoppingSubject carries the tag of a node that ended its drain on its
// way to a clean stop (see health.markStopping).
func (n *Node) stoppingSubject() string { return "sn." + n.cfg.Cluster.Name + ".stopping" }

// announceStopping tells the others that this node's drain ended (best
// effort): it makes no more of its shards' passes from now on.
func (n *Node) announceStopping() {
	if n.bus == nil || n.bus.nc == nil {
		return
	}
	if err := n.bus.nc.Publish(n.stoppingSubject(), []byte(n.cfg.Node.Tag+" "+n.incarnation)); err == nil {
		_ = n.bus.nc.FlushTimeout(time.Second)
	}
}

// announceLeaving tells the others that this node stops (best effort).
func (n *Node) announceLeaving() {
	if n.bus == nil || n.bus.nc == nil {
		return
	}
	if err := n.bus.nc.Publish(n.leavingSubject(), []byte(n.cfg.Node.Tag+" "+n.incarnation)); err == nil {
		_ = n.bus.nc.FlushTimeout(time.Second)
	}
}

// runHeartbeats publishes this node's heartbeat and records the others'.
func (n *Node) runHeartbeats(ctx context.Context) {
	defer n.wg.Done()
	sub, err := n.bus.nc.Subscribe(n.heartbeatSubject(), func(m *nats.Msg) {
		tag, inc, _ := strings.Cut(string(m.Data), " ")
		n.health.heard(tag, inc)
	})
	if err != nil {
		n.logger.Error("subscribe heartbeats", "err", err)
		return
	}
	defer sub.Unsubscribe()
	leaving, err := n.bus.nc.Subscribe(n.leavingSubject(), func(m *nats.Msg) {
		tag, inc, _ := strings.Cut(string(m.Data), " ")
		if tag != n.cfg.Node.Tag && n.health.incarnation(tag) == inc {
			n.health.markLeft(tag, inc)
		}
	})
	if err != nil {
		n.logger.Error("subscribe leaving nodes", "err", err)
		return
	}
	defer leaving.Unsubscribe()
	stopping, err := n.bus.nc.Subscribe(n.stoppingSubject(), func(m *nats.Msg) {
		tag, inc, _ := strings.Cut(string(m.Data), " ")
		if tag != n.cfg.Node.Tag && n.health.incarnation(tag) == inc {
			n.health.markStopping(tag, inc)
		}
	})
	if err != nil {
		n.logger.Error("subscribe stopping nodes", "err", err)
		return
	}
	defer stopping.Unsubscribe()
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		_ = n.bus.nc.Publish(n.heartbeatSubject(), []byte(n.cfg.Node.Tag+" "+n.incarnation))
		n.health.sweep()
		n.checkRemoved()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkRemoved notes whether raft's configuration, as this node last
// received it, still lists this node. A node removed from the cluster
// (DELETE /cluster/nodes/{tag}) hears no more of the log, so its records
// only grow staler; from then on it refuses to serve databases (see
// untilReady) instead of routing by them.
func (n *Node) checkRemoved() {
	if !n.ready.Load() {
		return
	}
	f := n.raft.r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.Node.Tag {
			n.removed.Store(false)
			return
		}
	}
	n.removed.Store(true)
}
