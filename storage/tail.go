package storage

import (
	"slices"
	"sort"
	"sync/atomic"
	"time"
)

// The feed's tail is kept in memory for tailers that keep up with it.
const (
	// tailMaxEntries and tailMaxBytes bound the tail: a tailer further
	// behind reads Pebble, as it did before it caught up.
	tailMaxEntries = 4096
	tailMaxBytes   = 4 << 20
	// tailIdle is how long the committer keeps filling the tail after the
	// last read of the feed: a replica nothing tails (a shard with one
	// replica, no ETL, no subscription) copies nothing.
	tailIdle = 10 * time.Second
)

// feedTail holds the newest entries of the changes feed, each with the
// item as its commit stored it, so that a tailer that keeps up (the
// replicators of a shard's other replicas, an ETL task, a subscription)
// reads what was just written from memory instead of opening a snapshot
// and an iterator and reading each item back from Pebble: with two peers
// that was two reads of every write.
//
// It is the feed exactly, not an approximation: every entry of the feed
// above floor is in entries, and an entry the feed lost since (its item was
// written again, under a newer etag, or removed) is in entries as a dead
// one (doc nil). Entries are appended under the store's lock with the
// commit that made them durable, so a reader that takes the lock sees the
// same state a snapshot of Pebble would show.
type feedTail struct {
	floor   uint64      // every feed entry above floor is in entries
	entries []tailEntry // ascending etag; entries[:head] are evicted
	head    int
	bytes   int
	// maxEntries and maxBytes bound the tail (tailMaxEntries and
	// tailMaxBytes but in tests).
	maxEntries, maxBytes int
	// lastRead is when the feed was last read (unix nanoseconds), by any
	// tailer: the committer fills the tail only while it is read.
	lastRead atomic.Int64
	// fromMemory and fromDisk count the reads of the feed the tail
	// answered and those that went to Pebble (Stats.Feed).
	fromMemory, fromDisk atomic.Uint64
}

type tailEntry struct {
	etag uint64
	doc  *Document // nil: the entry has left the feed
	size int
}

// tailSize is what an item counts against tailMaxBytes.
func tailSize(d *Document) int {
	return len(d.Body) + len(d.ID) + len(d.Collection) + len(d.ChangeVector) + 96
}

// reset empties the tail: every feed entry above etag is yet to come.
func (t *feedTail) reset(etag uint64) {
	clear(t.entries)
	t.entries, t.head, t.bytes, t.floor = t.entries[:0], 0, 0, etag
}

// wanted reports whether the feed was read lately.
func (t *feedTail) wanted(now time.Time) bool {
	return now.UnixNano()-t.lastRead.Load() < int64(tailIdle)
}

// commit applies a committed round to the tail, under the store's lock:
// items are the round's items with a feed entry, in etag order; gone the
// etags of the feed entries the round deleted; etag the round's last etag.
// An item it cannot copy as a read would return it (see
// pendingItem.storedDoc) starts the tail over after the round.
func (t *feedTail) commit(items []*pendingItem, gone []uint64, etag uint64, now time.Time) {
	if !t.wanted(now) {
		if t.floor != etag || len(t.entries) > 0 {
			t.reset(etag)
		}
		return
	}
	for _, e := range gone {
		t.kill(e)
	}
	from := t.kept(items)
	if from > 0 {
		t.reset(items[from-1].doc.Etag)
	}
	for _, p := range items[from:] {
		d := p.storedDoc()
		if d == nil {
			t.reset(etag)
			return
		}
		s := tailSize(d)
		t.entries = append(t.entries, tailEntry{etag: d.Etag, doc: d, size: s})
		t.bytes += s
	}
	for len(t.entries)-t.head > t.maxEntries || t.bytes > t.maxBytes {
		e := &t.entries[t.head]
		t.floor, t.bytes = e.etag, t.bytes-e.size
		*e = tailEntry{}
		t.head++
	}
	if t.head > len(t.entries)/2 {
		n := copy(t.entries, t.entries[t.head:])
		clear(t.entries[n:])
		t.entries, t.head = t.entries[:n], 0
	}
}

// kept returns the index of the first of a round's items (in etag order)
// the tail keeps: a round larger than the tail (a bulk load) keeps only
// its newest items, and the older ones are not copied at all.
func (t *feedTail) kept(items []*pendingItem) int {
	from, n, size := len(items), 0, 0
	for from > 0 && n < t.maxEntries {
		s := tailSize(items[from-1].doc)
		if size+s > t.maxBytes {
			break // an item larger than the whole tail is not copied either
		}
		from, n, size = from-1, n+1, size+s
	}
	return from
}

// prepare makes, before the committer takes the store's lock, the copies
// of a round's items that commit will keep (see pendingItem.storedDoc):
// readers do not wait on the copies of up to maxBytes of bodies.
func (t *feedTail) prepare(items []*pendingItem, now time.Time) {
	if !t.wanted(now) {
		return
	}
	for _, p := range items[t.kept(items):] {
		p.storedDoc()
	}
}

// kill marks the entry of etag dead, if the tail holds it.
func (t *feedTail) kill(etag uint64) {
	if etag <= t.floor {
		return
	}
	live := t.entries[t.head:]
	i, ok := slices.BinarySearchFunc(live, etag, func(e tailEntry, etag uint64) int {
		switch {
		case e.etag < etag:
			return -1
		case e.etag > etag:
			return 1
		}
		return 0
	})
	if ok && live[i].doc != nil {
		t.bytes -= live[i].size
		live[i].doc, live[i].size = nil, 0
	}
}

// read returns up to limit items of the feed above after, in etag order,
// and true; or false when the tail does not reach back to after. It runs
// under the store's lock (read), which the caller keeps no longer than
// the copy of a few pointers.
func (t *feedTail) read(after uint64, limit int) ([]*Document, bool) {
	if after < t.floor {
		return nil, false
	}
	live := t.entries[t.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].etag > after })
	var out []*Document
	for _, e := range live[i:] {
		if len(out) == limit {
			break
		}
		if e.doc != nil {
			out = append(out, e.doc)
		}
	}
	return out, true
}

// fromTail returns what the feed holds above after, as Pebble would, and
// true; or false when the tail does not reach back to after. Each item is
// the caller's own copy (its body shared, as the document cache shares
// it: no reader changes a body).
func (s *Store) fromTail(after uint64, limit int, leave func(*Document) bool) ([]*Document, bool) {
	s.tail.lastRead.Store(time.Now().UnixNano())
	s.mu.RLock()
	shared, ok := s.tail.read(after, limit)
	s.mu.RUnlock()
	if !ok {
		s.tail.fromDisk.Add(1)
		return nil, false
	}
	s.tail.fromMemory.Add(1)
	out := make([]*Document, len(shared))
	for i, d := range shared {
		cp := *d
		if leave != nil && cp.splitBody() {
			// As getLeavingBody reads it, and asks leave: metadata only.
			meta := cp
			meta.Body, meta.bodyElsewhere, meta.bodyLen = nil, true, len(d.Body)
			if leave(&meta) {
				cp = meta
			}
		}
		out[i] = &cp
	}
	return out, true
}
