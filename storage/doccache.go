package storage

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// DocCache keeps documents that point reads found, and documents clients
// just wrote, for every replica of a node, within one byte budget. A Pebble
// point read of a document costs ~10-20 µs on these machines, several
// times the rest of a GET's own work, and a document just written is often
// read next (a client showing what it saved): as in a database's buffer
// pool, what was written is already in memory and stays there.
//
// Eviction takes written documents no read has asked for yet first,
// oldest first, and only then turns to the documents being read: second
// chance (CLOCK over the maps' random order), where an entry read since it
// was last passed over survives one more pass. So writes never push the
// read working set out: a load of new documents, or a PUT-only client,
// cycles through its own documents (when their second chance came first,
// 150k new documents written before a GET load of 100k left it hitting 54%
// instead of 71% in its third round: `shardnode bench --workloads put,get`
// against `--workloads get`, the rounds' hit rates in the get row's note).
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
	m    map[string]*docEntry
	size atomic.Int64 // bytes held by this part
	// unread holds the keys of the entries written and not read since,
	// oldest first from unreadHead (and keys of entries read or dropped
	// since, which eviction skips); nUnread counts those entries.
	unread     []string
	unreadHead int
	nUnread    atomic.Int64 // changed under mu; read by evict without it
	// hits and misses count the store's point reads answered here and
	// those that went to Pebble.
	hits, misses atomic.Uint64
}

// docEntry is one cached document. The document is never changed once
// cached; read is guarded by the part's lock.
type docEntry struct {
	doc  *Document
	read bool // read since eviction last passed over it
	// unread marks a written document no read asked for since it was
	// written (see docShard.unread).
	unread bool
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
	p := &docShard{c: c, m: map[string]*docEntry{}}
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
	e, ok := p.m[key]
	if ok {
		e.read = true
		if e.unread {
			e.unread = false
			p.nUnread.Add(-1)
		}
	}
	p.mu.Unlock()
	if !ok {
		p.misses.Add(1)
		return nil, false
	}
	p.hits.Add(1)
	cp := *e.doc // callers own what they get; the body is shared and never written
	return &cp, true
}

// counts returns the store's point reads answered by the cache and
// those that went to Pebble (zeros without a cache).
func (p *docShard) counts() DocCacheStats {
	if p == nil {
		return DocCacheStats{}
	}
	return DocCacheStats{Hits: p.hits.Load(), Misses: p.misses.Load()}
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
		delta -= docSize(key, old.doc)
		if old.unread {
			p.nUnread.Add(-1)
		}
	}
	p.m[key] = &docEntry{doc: &cp, read: true}
	p.size.Add(delta)
	p.mu.Unlock()
	if p.c.size.Add(delta) > p.c.max {
		p.c.evict()
	}
}

// cachedWrite is one item of a committed round, for written.
type cachedWrite struct {
	key string
	doc *Document // the committed version, owned by the cache; nil: drop the key
}

// written applies a committed round: each write's document replaces the
// cached version of its key (keeping whether that was being read), or the
// key is dropped, and the store's generation moves, under one lock, so no
// read that began before the commit caches what it found. A document no
// read asked for before (not cached, or cached unread) enters unread.
func (p *docShard) written(ws []cachedWrite) {
	p.mu.Lock()
	p.gen++
	var delta int64
	for _, w := range ws {
		old, had := p.m[w.key]
		if had {
			delta -= docSize(w.key, old.doc)
			if old.unread {
				p.nUnread.Add(-1)
			}
		}
		if w.doc == nil {
			delete(p.m, w.key)
			continue
		}
		e := &docEntry{doc: w.doc, read: had && old.read, unread: !had || old.unread}
		p.m[w.key] = e
		if e.unread {
			p.nUnread.Add(1)
			p.unread = append(p.unread, w.key)
		}
		delta += docSize(w.key, w.doc)
	}
	p.compactUnread()
	p.size.Add(delta)
	p.mu.Unlock()
	if p.c.size.Add(delta) > p.c.max {
		p.c.evict()
	}
}

// compactUnread drops, once they outnumber the unread entries, the keys
// of the unread queue whose entries were read or dropped since, so the
// queue stays in proportion to what it names. The caller holds p.mu.
func (p *docShard) compactUnread() {
	n := int(p.nUnread.Load())
	if len(p.unread)-p.unreadHead <= 2*n+1024 {
		return
	}
	keep := p.unread[:0]
	seen := make(map[string]bool, n)
	for _, k := range p.unread[p.unreadHead:] {
		if e, ok := p.m[k]; ok && e.unread && !seen[k] {
			seen[k] = true
			keep = append(keep, k)
		}
	}
	clear(p.unread[len(keep):])
	p.unread, p.unreadHead = keep, 0
}

// evictUnread drops unread entries, oldest first, until it freed slice
// bytes or the cache's size less what it freed reaches low; it returns
// what it freed. The caller holds p.mu.
func (p *docShard) evictUnread(slice, low int64) int64 {
	var freed int64
	for p.nUnread.Load() > 0 && p.unreadHead < len(p.unread) && freed < slice && p.c.size.Load()-freed > low {
		k := p.unread[p.unreadHead]
		p.unread[p.unreadHead] = ""
		p.unreadHead++
		if e, ok := p.m[k]; ok && e.unread {
			delete(p.m, k)
			p.nUnread.Add(-1)
			freed += docSize(k, e.doc)
		}
	}
	if p.unreadHead == len(p.unread) {
		p.unread, p.unreadHead = p.unread[:0], 0
	}
	return freed
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
	p.unread, p.unreadHead = nil, 0
	p.nUnread.Store(0)
	p.release(p.size.Load())
}

// evict drops entries until the cache is at 90% of its budget, a slice at
// a time from a part picked with a chance in proportion to its size: as
// if entries were picked across the whole cache, so a replica no longer
// read drains while the ones being read keep re-adding theirs. In a part,
// unread written entries go first (evictUnread); then entries not read
// since they were last passed over, an entry read since being passed over
// once (second chance), its mark cleared.
func (c *DocCache) evict() {
	low := c.max * 9 / 10
	slice := max(c.max/64, 1)
	unreadLeft := true
	for c.size.Load() > low {
		var victim *docShard
		if unreadLeft {
			victim = c.pickUnread()
		}
		clock := victim == nil // no part holds unread entries: second chance
		if clock {
			victim = c.pick()
		}
		if victim == nil {
			return
		}
		victim.mu.Lock()
		freed := victim.evictUnread(slice, low)
		spared := 0
		if !clock && freed == 0 {
			unreadLeft = false // they were read or dropped meanwhile
		}
		if clock {
			for k, e := range victim.m {
				if freed >= slice || c.size.Load()-freed <= low {
					break
				}
				if e.read {
					e.read = false
					spared++
					continue
				}
				delete(victim.m, k)
				if e.unread {
					victim.nUnread.Add(-1)
				}
				freed += docSize(k, e.doc)
			}
		}
		victim.release(freed)
		victim.mu.Unlock()
		if clock && freed == 0 && spared == 0 {
			return // its entries went meanwhile; the next put tries again
		}
	}
}

// pickUnread returns a part holding unread entries, with a chance in
// proportion to how many, or nil if none does.
func (c *DocCache) pickUnread() *docShard {
	return c.pickBy(func(p *docShard) int64 { return p.nUnread.Load() })
}

// pick returns a part with a chance in proportion to its size, or nil if
// every part is empty.
func (c *DocCache) pick() *docShard {
	return c.pickBy(func(p *docShard) int64 { return p.size.Load() })
}

// pickBy returns a part with a chance in proportion to its weight, or nil
// if every weight is 0.
func (c *DocCache) pickBy(weight func(*docShard) int64) *docShard {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total int64
	for p := range c.parts {
		total += max(weight(p), 0)
	}
	if total == 0 {
		return nil
	}
	r := rand.Int64N(total)
	var last *docShard
	for p := range c.parts {
		n := max(weight(p), 0)
		if n == 0 {
			continue
		}
		if r < n {
			return p
		}
		r -= n
		last = p
	}
	return last // weights moved while we summed them
}
