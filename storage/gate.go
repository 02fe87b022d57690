package storage

import (
	"sync"
	"sync/atomic"
)

// readGate lets Close wait for the reads of Pebble in flight and refuse new
// ones. Pebble panics on a read of a closed DB, and a replica is closed
// while others may be reading it: its database deleted, or its shard taken
// off the node, during a GET, a query's scan or a replication pull.
//
// Entering and leaving are one atomic add each, so reads of one replica
// never wait on each other. A read that enters while another is in flight
// (a walk's callback reading the same store) is fine, and once the gate
// closes such a nested read is refused instead of deadlocking.
type readGate struct {
	n        atomic.Int64 // reads in flight, minus closingBias once closing
	idle     chan struct{}
	idleOnce sync.Once
}

// closingBias makes the count negative once the gate closes.
const closingBias = 1 << 62

func newReadGate() *readGate { return &readGate{idle: make(chan struct{})} }

// enter begins a read; false means the store is closing or closed.
func (g *readGate) enter() bool {
	if g.n.Add(1) < 0 {
		g.leave()
		return false
	}
	return true
}

// leave ends a read that enter began (or undoes a refused one).
func (g *readGate) leave() {
	if g.n.Add(-1) == -closingBias {
		g.idleOnce.Do(func() { close(g.idle) })
	}
}

// close refuses new reads and waits until those in flight have left.
func (g *readGate) close() {
	if g.n.Add(-closingBias) != -closingBias {
		<-g.idle
	}
}
