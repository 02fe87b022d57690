package storage

import "sync"

// DocCache keeps documents that point reads found, for every replica of a
// node, within a byte budget. A Pebble point read costs ~14 µs on these
// machines (a memtable seek misses the caches at every level of its
// skiplist), as much as the rest of a GET's own work.
//
// It never serves a version older than one a write has acknowledged: the
// committer invalidates every key of a round, and bumps its store's
// generation, after the round is in Pebble and before any writer of the
// round hears back; a read adds what it found only if its store's
// generation did not move since the read began (both under the cache's
// lock), so a read that raced a commit leaves nothing behind.
type DocCache struct {
	mu   sync.Mutex
	max  int64
	size int64
	m    map[cacheKey]*Document
	gens map[*Store]uint64 // each store's write generation
}

type cacheKey struct {
	store *Store
	key   string
}

// NewDocCache returns a cache of at most maxBytes of documents (0 disables
// it: nil is returned and every read goes to Pebble).
func NewDocCache(maxBytes int64) *DocCache {
	if maxBytes <= 0 {
		return nil
	}
	return &DocCache{max: maxBytes, m: map[cacheKey]*Document{}, gens: map[*Store]uint64{}}
}

func docSize(key string, d *Document) int64 {
	return int64(len(key) + len(d.ID) + len(d.Collection) + len(d.ChangeVector) + len(d.Body) + 160)
}

// get returns a copy of the cached document, if any.
func (c *DocCache) get(store *Store, key string) (*Document, bool) {
	c.mu.Lock()
	d, ok := c.m[cacheKey{store, key}]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	cp := *d // callers own what they get; the body is shared and never written
	return &cp, true
}

// generation returns the store's write generation, read before a Pebble
// read whose result may be cached.
func (c *DocCache) generation(store *Store) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gens[store]
}

// put caches d, read from Pebble after generation returned gen, unless a
// commit of the store came in between.
func (c *DocCache) put(store *Store, key string, d *Document, gen uint64) {
	cp := *d
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gens[store] != gen {
		return
	}
	k := cacheKey{store, key}
	if old, ok := c.m[k]; ok {
		c.size -= docSize(key, old)
	}
	c.m[k] = &cp
	c.size += docSize(key, &cp)
	if c.size > c.max {
		for k, v := range c.m { // arbitrary entries, down to 90%
			if c.size <= c.max*9/10 {
				break
			}
			delete(c.m, k)
			c.size -= docSize(k.key, v)
		}
	}
}

// invalidate drops keys of store and moves its generation, under one lock.
func (c *DocCache) invalidate(store *Store, keys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gens[store]++
	for _, key := range keys {
		k := cacheKey{store, key}
		if v, ok := c.m[k]; ok {
			delete(c.m, k)
			c.size -= docSize(key, v)
		}
	}
}

// drop forgets a closed store.
func (c *DocCache) drop(store *Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.m {
		if k.store == store {
			delete(c.m, k)
			c.size -= docSize(k.key, v)
		}
	}
	delete(c.gens, store)
}
