package node

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Heartbeats: every node publishes its tag on sn.<cluster>.heartbeat every
// heartbeatEvery; a node not heard from within downAfter is Down. Routing
// prefers nodes that are up, and a request that finds no responder marks
// its node down at once.
const (
	heartbeatEvery = 250 * time.Millisecond
	downAfter      = 1500 * time.Millisecond
)

// health tracks when each node was last heard from.
type health struct {
	self string
	mu   sync.RWMutex
	seen map[string]time.Time
}

func newHealth(self string) *health {
	return &health{self: self, seen: map[string]time.Time{}}
}

func (h *health) heard(tag string) {
	h.mu.Lock()
	h.seen[tag] = time.Now()
	h.mu.Unlock()
}

func (h *health) markDown(tag string) {
	h.mu.Lock()
	delete(h.seen, tag)
	h.mu.Unlock()
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

// lastSeen returns when tag was last heard from.
func (h *health) lastSeen(tag string) time.Time {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.seen[tag]
}

func (n *Node) heartbeatSubject() string { return "sn." + n.cfg.Cluster.Name + ".heartbeat" }

// runHeartbeats publishes this node's heartbeat and records the others'.
func (n *Node) runHeartbeats(ctx context.Context) {
	defer n.wg.Done()
	sub, err := n.bus.nc.Subscribe(n.heartbeatSubject(), func(m *nats.Msg) { n.health.heard(string(m.Data)) })
	if err != nil {
		n.logger.Error("subscribe heartbeats", "err", err)
		return
	}
	defer sub.Unsubscribe()
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		_ = n.bus.nc.Publish(n.heartbeatSubject(), []byte(n.cfg.Node.Tag))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
