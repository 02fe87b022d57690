package storage

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// DocCache keeps documents that point reads found, for every replica of a
// node, within one byte budget. A Pebble point read of a large document
// costs ~20 µs on these machines (the item, then its body), several times
// the rest of a GET's own work.
//
// Each store has its own part (docShard): its map and lock, so reads of
// different replicas never wait on each other, and the budget is shared.
// When the cache is over budget, a put evicts arbitrary entries, picking
// parts in proportion to their size, so a replica that stopped being read
// gives its memory to the ones that are.
//
// It never serves a version older than one a write has acknowledged: the
// committer invalidates every key of a round, and bumps its store's
// generation, after the round is in Pebble and before any writer of the
// round hears back; a read adds what it found only if its store's
// generation did not move since the read began (both under the part's
// lock), so a read that raced a commit leaves nothing behind.
type DocCache struct {
	max  int64
	size atomic.Int64 // bytes held by every part

	mu    sync.Mutex // guards parts
	parts map[*docShard]struct{}
}

// docShard is one store's part of a DocCache.
type docShard struct {
	c    *DocCache
	mu   sync.Mutex
	gen  uint64 // the store's write generation
	m    map[string]*Document
	size atomic.Int64 // bytes held by this part
}

// NewDocCache returns a cache of at most maxBytes of documents (0 disables
// it: nil is returned and every read goes to Pebble).
func NewDocCache(maxBytes int64) *DocCache {
	if maxBytes <= 0 {
		return nil
	}
	return &DocCache{max: maxBytes, parts: map[*docShard]struct{}{}}
}

// Usage returns the bytes the cache holds and its budget (zeros for a
// nil cache).
func (c *DocCache) Usage() (held, budget int64) {
	if c == nil {
		return 0, 0
	}
	return c.size.Load(), c.max
}

// open returns a new store's part (nil when c is nil: no cache).
func (c *DocCache) open() *docShard {
	if c == nil {
		return nil
	}
	p := &docShard{c: c, m: map[string]*Document{}}
	c.mu.Lock()
	c.parts[p] = struct{}{}
	c.mu.Unlock()
	return p
}

func docSize(key string, d *Document) int64 {
	return int64(len(key) + len(d.ID) + len(d.Collection) + len(d.ChangeVector) + len(d.Body) + 160)
}

// get returns a copy of the cached document, if any.
func (p *docShard) get(key string) (*Document, bool) {
	p.mu.Lock()
	d, ok := p.m[key]
	p.mu.Unlock()
	if !ok {
		return nil, false
	}
	cp := *d // callers own what they get; the body is shared and never written
	return &cp, true
}

// generation returns the store's write generation, read before a Pebble
// read whose result may be cached.
func (p *docShard) generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// put caches d, read from Pebble after generation returned gen, unless a
// commit of the store came in between.
func (p *docShard) put(key string, d *Document, gen uint64) {
	cp := *d
	p.mu.Lock()
	if p.gen != gen || p.m == nil { // a commit raced the read, or the store closed
		p.mu.Unlock()
		return
	}
	delta := docSize(key, &cp)
	if old, ok := p.m[key]; ok {
		delta -= docSize(key, old)
	}
	p.m[key] = &cp
	p.size.Add(delta)
	p.mu.Unlock()
	if p.c.size.Add(delta) > p.c.max {
		p.c.evict()
	}
}

// invalidate drops keys and moves the store's generation, under one lock.
func (p *docShard) invalidate(keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	var freed int64
	for _, key := range keys {
		if v, ok := p.m[key]; ok {
			delete(p.m, key)
			freed += docSize(key, v)
		}
	}
	p.release(freed)
}

// release subtracts freed bytes from the part's and the cache's sizes.
func (p *docShard) release(freed int64) {
	if freed != 0 {
		p.size.Add(-freed)
		p.c.size.Add(-freed)
	}
}

// close forgets the part of a closed store (nil: no cache).
func (p *docShard) close() {
	if p == nil {
		return
	}
	p.c.mu.Lock()
	delete(p.c.parts, p)
	p.c.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m = nil // a read finishing after the close caches nothing
	p.release(p.size.Load())
}

// evict drops arbitrary entries until the cache is at 90% of its budget,
// a slice at a time from a part picked with a chance in proportion to its
// size: as if entries were picked across the whole cache, so a replica no
// longer read drains while the ones being read keep re-adding theirs.
func (c *DocCache) evict() {
	low := c.max * 9 / 10
	slice := max(c.max/64, 1)
	for c.size.Load() > low {
		victim := c.pick()
		if victim == nil {
			return
		}
		victim.mu.Lock()
		var freed int64
		for k, v := range victim.m {
			if freed >= slice || c.size.Load()-freed <= low {
				break
			}
			delete(victim.m, k)
			freed += docSize(k, v)
		}
		victim.release(freed)
		victim.mu.Unlock()
		if freed == 0 {
			return // its entries went meanwhile; the next put tries again
		}
	}
}

// pick returns a part with a chance in proportion to its size, or nil if
// every part is empty.
func (c *DocCache) pick() *docShard {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total int64
	for p := range c.parts {
		total += max(p.size.Load(), 0)
	}
	if total == 0 {
		return nil
	}
	r := rand.Int64N(total)
	var last *docShard
	for p := range c.parts {
		n := max(p.size.Load(), 0)
		if n == 0 {
			continue
		}
		if r < n {
			return p
		}
		r -= n
		last = p
	}
	return last // sizes moved while we summed them
}
