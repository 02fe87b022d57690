package bench

import (
	"sync"
	"sync/atomic"
)

// insertCounter hands out the key numbers of inserts and tracks the highest
// key number below which every insert was acknowledged (YCSB's
// AcknowledgedCounterGenerator): reads only pick keys that exist.
type insertCounter struct {
	nextKey atomic.Int64
	limit   atomic.Int64 // keys < limit are all acknowledged

	mu      sync.Mutex
	pending map[int64]bool
}

// newInsertCounter starts after the loaded keys 0..loaded-1.
func newInsertCounter(loaded int64) *insertCounter {
	c := &insertCounter{pending: map[int64]bool{}}
	c.nextKey.Store(loaded)
	c.limit.Store(loaded)
	return c
}

// next returns the key number of a new insert.
func (c *insertCounter) next() int64 { return c.nextKey.Add(1) - 1 }

// ack records that the insert of key k completed.
func (c *insertCounter) ack(k int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending[k] = true
	l := c.limit.Load()
	for c.pending[l] {
		delete(c.pending, l)
		l++
	}
	c.limit.Store(l)
}

// last returns the number of keys that are known to exist: keys
// 0..last()-1.
func (c *insertCounter) last() int64 { return c.limit.Load() }
