package storage

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
)

// OpKind says what an Op does.
type OpKind uint8

const (
	// OpPut stores a document.
	OpPut OpKind = iota + 1
	// OpDelete deletes a document, leaving a tombstone.
	OpDelete
	// OpReplicate applies an item from another replica, decided by change
	// vector: newer applies, equal or older is skipped, concurrent is a
	// conflict resolved to the latest modification.
	OpReplicate
	// OpSetProgress records how far another replica's feed has been applied.
	OpSetProgress
	// OpMigrate stores an item sent by a bucket migration: it keeps its
	// version and gets a fresh local order entry plus the MOVE marker;
	// an item already held at that version or newer is a no-op.
	OpMigrate
	// OpPurge replaces an item whose version is covered by CoveredBy with a
	// local artificial tombstone (after its bucket moved away).
	OpPurge
)

// Op is one write of a group.
type Op struct {
	// Kind is put or delete.
	Kind OpKind
	// ID is the document id (already validated).
	ID string
	// Collection is the document's collection (puts only).
	Collection string
	// Body is the JSON object without "@metadata" (puts only).
	Body []byte
	// IfNew asks that no live document have the id (RavenDB's empty
	// expected change vector, which its clients send for a new document
	// under optimistic concurrency): the write is refused otherwise.
	IfNew bool
	// IfMatch, when set, is the change vector the caller read; the write
	// applies only if the stored version equals its version part.
	IfMatch string
	// ChangeVector, LastModified and Flags describe a replicated item
	// (OpReplicate): it keeps the change vector it was written with.
	ChangeVector string
	LastModified time.Time
	Flags        Flags
	// Source and Etag record replication progress (OpSetProgress): this
	// replica holds source's feed up to Etag. For OpReplicate, Source is
	// the database id of the replica that sent the item: an item stored as
	// it came is not sent back to it (see Document.Origin).
	Source string
	Etag   uint64
	// MigrationIndex and DatabaseID form the MOVE marker (OpMigrate).
	MigrationIndex uint64
	DatabaseID     string
	// CoveredBy is the version an item must be covered by to be purged
	// (OpPurge).
	CoveredBy changevector.Vector
	// SentFeeds is how far the sender of a move had each replica's feed,
	// by database id (OpPurge; the pass's SentThrough). This replica's
	// bound, when named and not 0: an item whose current version this
	// replica stored later (a higher etag) was not sent, whatever its
	// version, and is kept, unless this replica got it from the sender
	// itself (its feed entry names SentBy, the sender's database id, as
	// origin) or the sender had applied every write its order names (see
	// appliedAll), by whichever feed: then its version tells, and it is
	// purged when covered. Without a bound (senders of earlier versions)
	// the version alone tells.
	SentFeeds map[string]uint64
	SentBy    string
}

// Result is the outcome of one Op.
type Result struct {
	// Kind repeats the op's kind.
	Kind OpKind
	// ID is the document id.
	ID string
	// Collection is the stored collection (puts).
	Collection string
	// ChangeVector is the new change vector (puts and effective deletes).
	ChangeVector string
	// LastModified is the write time.
	LastModified time.Time
	// Etag orders the write in the changes feed; 0 for a no-op delete.
	Etag uint64
	// Bucket is the id's bucket.
	Bucket uint32
	// Deleted reports, for a delete, whether a live document was deleted.
	Deleted bool
	// Skipped reports a replicated item this replica already held.
	Skipped bool
	// Conflict reports a replicated item concurrent with the local one.
	Conflict bool
	// Lost reports a replicated item that lost such a conflict: the
	// replica keeps its own version, and the incoming one is only in the
	// conflict log (a Conflict that is not Lost put the replica's own
	// version there). Resolution is the same on every replica, so the
	// writes in the losing version's history that the winner lacks are
	// superseded everywhere.
	Lost bool
	// LoserVersion and WinnerVersion are, for a Conflict, the version
	// parts of the two versions before they were merged.
	LoserVersion, WinnerVersion string
}

// ConcurrencyError means an If-Match change vector did not match.
type ConcurrencyError struct {
	// ID is the document id.
	ID string
	// Expected is the caller's change vector ("" when it asked for a new
	// document).
	Expected string
	// Actual is the stored change vector ("" when the document is missing).
	Actual string
}

func (e *ConcurrencyError) Error() string {
	if e.Expected == "" {
		return fmt.Sprintf("document %q exists with change vector %q, but the write expected a new document (an empty If-Match or ChangeVector)", e.ID, e.Actual)
	}
	if e.Actual == "" {
		return fmt.Sprintf("document %q does not exist, but If-Match expected change vector %q", e.ID, e.Expected)
	}
	return fmt.Sprintf("document %q has change vector %q, but If-Match expected %q", e.ID, e.Actual, e.Expected)
}

// statsCacheMax bounds the committer's bucket statistics cache (entries;
// each is ~100 bytes plus its change vector).
const statsCacheMax = 1 << 16

// maxRoundOps bounds how many ops one commit round takes, so a flood of
// writers still gets acknowledgements at a steady pace.
const maxRoundOps = 4096

type writeReq struct {
	ops    []Op
	covers []Covers
	now    time.Time
	resp   chan writeResp
}

// Covers is a condition a write group applies under: bucket Bucket's
// merged version, counting every write committed before the group (those
// earlier in its own commit round included), covers Version.
//
// Why: a bucket's new owner takes its writes only once it holds the
// source's last pass (see the node's flip hold). A write that checked
// that and then waited its own turn paid two fsyncs; one that enters the
// queue right behind the pass, with the pass's version as its condition,
// shares the pass's round and is refused (ErrNotCovered) only if the pass
// did not get in first after all.
type Covers struct {
	Bucket  uint32
	Version changevector.Vector
}

// ErrNotCovered refuses a write group whose Covers did not hold: nothing
// of it was applied.
var ErrNotCovered = errors.New("the bucket's version does not cover the required one")

type writeResp struct {
	results []Result
	err     error
}

// Write applies ops atomically (all or none) and durably: it returns after
// the fsync that made them durable. Concurrent calls share one fsync.
func (s *Store) Write(ctx context.Context, ops []Op) ([]Result, error) {
	return s.write(ctx, nil, ops, nil)
}

// WriteCovered is Write under conditions: the group applies only if every
// one of covers holds when its turn comes in the commit round, and fails
// with ErrNotCovered otherwise.
func (s *Store) WriteCovered(ctx context.Context, covers []Covers, ops []Op) ([]Result, error) {
	return s.write(ctx, covers, ops, nil)
}

// WriteQueued is Write, calling queued once the group is in the
// committer's queue: a group written after queued returned commits after
// this one, in the same round or a later one.
func (s *Store) WriteQueued(ctx context.Context, ops []Op, queued func()) ([]Result, error) {
	return s.write(ctx, nil, ops, queued)
}

func (s *Store) write(ctx context.Context, covers []Covers, ops []Op, queued func()) ([]Result, error) {
	req := &writeReq{ops: ops, covers: covers, now: time.Now().UTC(), resp: make(chan writeResp, 1)}
	select {
	case s.reqs <- req:
	case <-s.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if queued != nil {
		queued()
	}
	return s.answer(req)
}

// answer waits for a queued request's answer. Once queued the write may
// commit, so it waits even if the caller's context ends: reporting failure
// for a committed write would be a lie.
func (s *Store) answer(req *writeReq) ([]Result, error) {
	select {
	case r := <-req.resp:
		return r.results, r.err
	case <-s.done:
		// The committer answers a round before it stops, so an answer is
		// here already if this write was in one: ErrClosed means it was
		// not applied, and the node may send it to another replica.
		select {
		case r := <-req.resp:
			return r.results, r.err
		default:
			return nil, ErrClosed
		}
	}
}

func (s *Store) commitLoop(ctx context.Context) {
	defer close(s.done)
	defer s.finalCheckpoint()
	// due fires when the oldest dirty bucket statistics have waited
	// checkpointEvery; it is armed only while some are dirty, so an idle
	// store does not wake up.
	due := time.NewTimer(time.Hour)
	due.Stop()
	armed := false
	prevOps := 0 // ops of the previous round
	for {
		var first *writeReq
		select {
		case <-ctx.Done():
			return
		case <-due.C:
			armed = false
		case err := <-s.ckptDone: // nil, and never ready, when none runs
			s.checkpointed(err)
		case first = <-s.reqs:
		}
		if first != nil {
			reqs := []*writeReq{first}
			n := len(first.ops)
		drain:
			for n < maxRoundOps {
				select {
				case r := <-s.reqs:
					reqs = append(reqs, r)
					n += len(r.ops)
				default:
					break drain
				}
			}
			if n < commitSiblings && prevOps >= 2 {
				// Like PostgreSQL's commit_delay: when writers are concurrent
				// (the last round had several), a short wait lets more of them
				// share this round's sync. Fewer, larger rounds cost less CPU
				// per write, which on a busy 2-core machine is throughput.
				n = s.gatherMore(&reqs, n)
			}
			prevOps = n
			s.commitRound(reqs)
		}
		if s.ckptDone == nil && (len(s.dirty) >= s.checkpointBuckets || (len(s.dirty) > 0 && time.Since(s.dirtySince) >= s.checkpointEvery)) {
			s.startCheckpoint()
		}
		// While a checkpoint runs, its end is what wakes the loop.
		wait := s.ckptDone == nil && len(s.dirty) > 0
		switch {
		case !wait && armed:
			due.Stop()
			armed = false
		case wait && !armed:
			due.Reset(time.Until(s.dirtySince.Add(s.checkpointEvery)))
			armed = true
		}
	}
}

// commitDelay and commitSiblings bound the wait for more writers: at most
// commitDelay, and only while the round has fewer than commitSiblings ops.
// go test ./storage -bench Concurrent (64 writers, 3 stores): 9.7 -> 14.8
// ops per commit, 5-16% less CPU per write.
const (
	commitDelay    = 300 * time.Microsecond
	commitSiblings = 16
)

// gatherMore adds requests that arrive within commitDelay to the round.
func (s *Store) gatherMore(reqs *[]*writeReq, n int) int {
	t := time.NewTimer(commitDelay)
	defer t.Stop()
	for n < commitSiblings {
		select {
		case r := <-s.reqs:
			*reqs = append(*reqs, r)
			n += len(r.ops)
		case <-t.C:
			return n
		}
	}
	return n
}

// bucketState is a bucket's statistics, with its change vector kept parsed
// (cv; BucketStats.ChangeVector is not kept up to date). Once a round is
// committed its states are never changed again (a later round copies
// them), so readers share them.
type bucketState struct {
	BucketStats
	cv changevector.Vector
}

// count adds (sign 1) or takes away (sign -1) item d (nil: none), of size
// bytes. Artificial tombstones (left by a purge) count nowhere: a bucket
// that holds only those is empty.
func (st *bucketState) count(d *Document, size, sign int64) {
	if d == nil || d.artificial() {
		return
	}
	st.Size += sign * size
	if d.Deleted() {
		st.TombstonesCount += sign
	} else {
		st.DocumentsCount += sign
	}
}

// count is bucketState.count for the replica-wide counters.
func (c *counters) count(d *Document, sign int64) {
	if d == nil || d.artificial() {
		return
	}
	if d.Deleted() {
		c.Tombstones += sign
	} else {
		c.Documents += sign
	}
}

// stats is st with its change vector formatted.
func (st *bucketState) stats() BucketStats {
	out := st.BucketStats
	out.ChangeVector = st.cv.String()
	return out
}

// encode is the value of st's statistics key.
func (st *bucketState) encode() []byte {
	out := st.stats()
	return out.encode()
}

// pendingItem is the newest state of one key within a round.
type pendingItem struct {
	key       []byte
	doc       *Document // nil: key absent
	vlen      int       // length of doc's encoding
	size      int64
	committed uint64    // etag of the committed version (its feed entry goes)
	hadBody   bool      // the committed version's body is under its body key
	client    bool      // a client's write (not replication, a move, a purge or a bulk load): its version enters the document cache
	stored    *Document // the committed version as a read returns it, once copied (see storedDoc)
}

// storedDoc returns the committed version of p as a read from Pebble
// returns it (its own body, the time as stored), origin included; nil
// for an item read without its body, which no write commits. The
// document cache and the feed's tail share one copy.
func (p *pendingItem) storedDoc() *Document {
	if p.stored == nil && !p.doc.bodyElsewhere {
		p.stored = p.doc.forCache()
		p.stored.Origin = p.doc.Origin
	}
	return p.stored
}

// round accumulates the effects of the groups of one commit.
type round struct {
	s        *Store
	items    map[string]*pendingItem
	stats    map[uint32]*bucketState
	pinned   map[uint32]bool // buckets whose statistics this round writes (see store)
	progress map[string]uint64
	conflict []conflictEntry
	etag     uint64
	// feed and gone are, once committed, the round's items with a feed
	// entry in etag order and the etags of the feed entries it deleted.
	feed     []*pendingItem
	gone     []uint64
	counters counters
	probe    *itemProbe // shared by the round and its groups
	// bulk marks a group of more than writeThroughMaxOps ops: a load,
	// whose documents do not enter the document cache.
	bulk bool
}

// writeThroughMaxOps is the largest client request whose documents enter
// the document cache as they commit. A larger one is a bulk load, which
// would push out what is being read (as PostgreSQL gives a COPY a ring of
// its own buffers), and whose copies into the cache cost the committer,
// which does them one after the other, ~15% of a bulk load's throughput.
const writeThroughMaxOps = 16

// itemProbe looks up items on disk for one round, through one iterator
// that consults every level's bloom filter. Pebble's Get skips the filters
// of the last level (L6), on the premise that a key looked up there is
// usually present; a write's lookup is the opposite case (a new document,
// in a bucket that already holds others), and while a replica is small
// all its data sits in that one level, so each such lookup read and
// searched a data block for a key that was not there. Only the committer
// writes, so an iterator opened at the round's first lookup sees what
// every later lookup of the round would.
//
// Opening the iterator costs more than a few Gets save, and a lookup of a
// key that exists pays for the filter too, so small rounds (single
// writes, mostly of documents that exist) use Get: go test ./storage
// -bench Overwrites measured 5-10% more CPU per write with the iterator.
type itemProbe struct {
	db   *pebble.DB
	iter bool // rounds of probeMinOps or more ops use the iterator
	it   *pebble.Iterator
	c    io.Closer // the last Get's: its value is valid until this closes
	done bool      // closed: a late lookup gets a copy, nothing stays open
}

// probeMinOps is the size of round from which lookups go through the
// iterator: a bulk insert's.
const probeMinOps = 64

// get returns the value under key, valid until the next get or close, or
// nil if there is none.
func (p *itemProbe) get(key []byte) ([]byte, error) {
	if p.iter && !p.done {
		return p.seek(key)
	}
	p.release()
	v, c, err := p.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if p.done {
		defer c.Close()
		return append([]byte{}, v...), nil
	}
	p.c = c
	if v == nil {
		v = []byte{} // present, empty
	}
	return v, nil
}

// seek is get through the round's iterator, opened at the first lookup.
func (p *itemProbe) seek(key []byte) ([]byte, error) {
	if p.it == nil {
		it, err := p.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
		if err != nil {
			return nil, fmt.Errorf("open item probe: %w", err)
		}
		p.it = it
	}
	if !p.it.SeekPrefixGE(key) || !bytes.Equal(p.it.Key(), key) {
		return nil, p.it.Error()
	}
	v, err := p.it.ValueAndErr()
	if err != nil {
		return nil, err
	}
	if v == nil {
		v = []byte{} // present, empty
	}
	return v, nil
}

func (p *itemProbe) release() {
	if p.c != nil {
		_ = p.c.Close()
		p.c = nil
	}
}

func (p *itemProbe) close() {
	p.done = true
	p.release()
	if p.it != nil {
		_ = p.it.Close() // read-only: an error here lost nothing
		p.it = nil
	}
}

func (s *Store) commitRound(reqs []*writeReq) {
	start := time.Now()
	n := 0
	s.mu.RLock()
	r := &round{s: s, items: map[string]*pendingItem{}, stats: map[uint32]*bucketState{}, pinned: map[uint32]bool{}, progress: map[string]uint64{}, etag: s.lastEtag, counters: s.counters, probe: &itemProbe{db: s.db}}
	s.mu.RUnlock()
	for _, req := range reqs {
		n += len(req.ops)
	}
	r.probe.iter = n >= probeMinOps
	resps := make([]writeResp, len(reqs))
	for i, req := range reqs {
		resps[i] = r.applyGroup(req)
	}
	r.probe.close()
	if len(r.pinned) > 0 {
		s.waitCheckpoint()
	}
	syncStart := time.Now()
	err := r.commit()
	syncDur := time.Since(syncStart)
	if s.docs != nil && len(r.items) > 0 {
		// Before any writer of the round hears back (and even if the
		// commit failed half way): no read may be served the old version.
		// A client's write puts its version in its place.
		ws := make([]cachedWrite, 0, len(r.items))
		for k, p := range r.items {
			w := cachedWrite{key: k}
			if err == nil && p.client && p.doc.Origin == "" {
				w.doc = p.storedDoc()
			}
			ws = append(ws, w)
		}
		s.docs.written(ws)
	}
	if err == nil {
		s.tail.prepare(r.feed, start)
		s.mu.Lock()
		if len(r.items) > 0 || len(r.progress) > 0 {
			s.commits++
		}
		for i, req := range reqs {
			if resps[i].err == nil {
				s.commitOps += uint64(len(req.ops))
			}
		}
		s.commitNanos += uint64(time.Since(start))
		s.syncNanos += uint64(syncDur)
		s.lastEtag = r.etag
		s.counters = r.counters
		s.tail.commit(r.feed, r.gone, r.etag, start)
		for src, etag := range r.progress {
			s.progress[src] = etag
		}
		// The round's bucket statistics are in no Pebble key yet (but for
		// pinned buckets): readers find them here from now on, before any
		// writer of the round hears back. A checkpoint writes them.
		if len(s.dirty) == 0 && len(r.stats) > 0 {
			s.dirtySince = time.Now()
		}
		for b, st := range r.stats {
			s.dirty[b] = st
		}
		if len(r.items) > 0 || len(r.progress) > 0 {
			close(s.changed)
			s.changed = make(chan struct{})
		}
		s.mu.Unlock()
		for b := range r.stats {
			s.used.add(b) // the committer's own state: no lock
		}
	}
	for i, req := range reqs {
		if err != nil && resps[i].err == nil {
			resps[i] = writeResp{err: fmt.Errorf("commit: %w", err)}
		}
		req.resp <- resps[i]
	}
}

// cacheStats keeps checkpointed bucket statistics for the next rounds,
// evicting arbitrary entries when the cache is full. Only the committer
// calls it.
func (s *Store) cacheStats(stats map[uint32]*bucketState) {
	if len(s.statsCache)+len(stats) > s.statsCacheMax {
		keep := s.statsCacheMax * 3 / 4
		for b := range s.statsCache {
			if len(s.statsCache) <= keep {
				break
			}
			delete(s.statsCache, b)
		}
	}
	for b, st := range stats {
		// A bucket already cached is updated, whatever the count: a stale
		// entry must not stay.
		if _, ok := s.statsCache[b]; ok || len(s.statsCache) < s.statsCacheMax {
			s.statsCache[b] = st
		}
	}
}

// applyGroup applies one caller's ops to the round, or nothing of them if
// any fails.
func (r *round) applyGroup(req *writeReq) writeResp {
	g := &round{s: r.s, items: map[string]*pendingItem{}, stats: map[uint32]*bucketState{}, pinned: map[uint32]bool{}, progress: map[string]uint64{}, etag: r.etag, counters: r.counters, probe: r.probe,
		bulk: len(req.ops) > writeThroughMaxOps}
	for _, c := range req.covers {
		st, err := g.bucketStats(r, c.Bucket)
		if err != nil {
			return writeResp{err: err}
		}
		if !st.cv.Covers(c.Version) {
			return writeResp{err: fmt.Errorf("bucket %d holds version %q, not %q: %w", c.Bucket, st.cv.String(), c.Version.String(), ErrNotCovered)}
		}
	}
	results := make([]Result, 0, len(req.ops))
	for _, op := range req.ops {
		res, err := g.apply(r, op, req.now)
		if err != nil {
			return writeResp{err: err}
		}
		results = append(results, res)
	}
	for k, v := range g.items {
		r.items[k] = v
	}
	for k, v := range g.stats {
		r.stats[k] = v
	}
	for k := range g.pinned {
		r.pinned[k] = true
	}
	for k, v := range g.progress {
		r.progress[k] = v
	}
	r.conflict = append(r.conflict, g.conflict...)
	r.etag, r.counters = g.etag, g.counters
	return writeResp{results: results}
}

// lookup finds the current item for key: group, then round, then disk.
func (g *round) lookup(parent *round, key []byte, b uint32) (*pendingItem, error) {
	if p, ok := g.items[string(key)]; ok {
		return p, nil
	}
	if p, ok := parent.items[string(key)]; ok {
		cp := *p
		return &cp, nil
	}
	if !g.s.used.has(b) {
		return &pendingItem{key: key}, nil // the bucket never held an item
	}
	v, err := g.probe.get(key)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", key, err)
	}
	if v == nil {
		return &pendingItem{key: key}, nil
	}
	d, err := decodeItem(b, v) // a split item's body stays unread
	if err != nil {
		return nil, err
	}
	return &pendingItem{key: key, doc: d, size: storedSize(key, v, d), committed: d.Etag, hadBody: d.bodyElsewhere}, nil
}

// storedSize is what the item d, read from value v under key, counts in the
// statistics: what round.store counted when it wrote it.
func storedSize(key, v []byte, d *Document) int64 {
	size := int64(len(key) + len(v))
	if d.bodyElsewhere {
		size += int64(len(key) + uvarintLen(d.Etag) + d.bodyLen)
	}
	return size
}

// readBody fills in the body of an item the round read without it. The
// committer is the store's only writer, so the body on disk is the one of
// the version read.
func (g *round) readBody(d *Document) error {
	if !d.bodyElsewhere {
		return nil
	}
	v, closer, err := g.s.db.Get(docKey(itemKey(d.Bucket, d.ID)))
	if err != nil {
		return fmt.Errorf("body of %q: %w", d.ID, err)
	}
	defer closer.Close()
	return d.setBody(v)
}

func uvarintLen(v uint64) int {
	var tmp [binary.MaxVarintLen64]byte
	return binary.PutUvarint(tmp[:], v)
}

func (g *round) bucketStats(parent *round, b uint32) (*bucketState, error) {
	if st, ok := g.stats[b]; ok {
		return st, nil
	}
	if st, ok := parent.stats[b]; ok {
		cp := *st
		g.stats[b] = &cp
		return &cp, nil
	}
	// Committed statistics: dirty ones (not checkpointed yet) are the
	// newest, then those a running checkpoint writes; the committer is
	// their only writer, so it reads them without the lock.
	if st, ok := g.s.dirty[b]; ok {
		cp := *st
		g.stats[b] = &cp
		return &cp, nil
	}
	if st, ok := g.s.flushing[b]; ok {
		cp := *st
		g.stats[b] = &cp
		return &cp, nil
	}
	if st, ok := g.s.statsCache[b]; ok {
		cp := *st
		g.stats[b] = &cp
		return &cp, nil
	}
	st := &bucketState{BucketStats: BucketStats{Bucket: b}}
	if !g.s.used.has(b) {
		g.stats[b] = st
		return st, nil
	}
	v, closer, err := g.s.db.Get(bucketStatKey(b))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("read bucket %d stats: %w", b, err)
	default:
		st.BucketStats, err = decodeBucketStats(b, v)
		closer.Close()
		if err != nil {
			return nil, err
		}
		if st.cv, err = changevector.ParseVector(st.ChangeVector); err != nil {
			return nil, fmt.Errorf("bucket %d change vector: %w", b, err)
		}
	}
	g.stats[b] = st
	return st, nil
}

func (g *round) apply(parent *round, op Op, now time.Time) (Result, error) {
	switch op.Kind {
	case OpSetProgress:
		if op.Etag > g.progressOf(parent, op.Source) {
			g.progress[op.Source] = op.Etag
		}
		return Result{Kind: op.Kind, ID: op.Source, Etag: op.Etag}, nil
	case OpReplicate:
		return g.applyReplicated(parent, op)
	case OpMigrate:
		return g.applyMigrated(parent, op)
	case OpPurge:
		return g.applyPurge(parent, op)
	case OpPut, OpDelete:
		return g.applyLocal(parent, op, now)
	default:
		return Result{}, fmt.Errorf("op on %q: unknown kind %d", op.ID, op.Kind)
	}
}

func (g *round) progressOf(parent *round, source string) uint64 {
	if v, ok := g.progress[source]; ok {
		return v
	}
	if v, ok := parent.progress[source]; ok {
		return v
	}
	return g.s.ReplicationProgress(source)
}

// applyLocal applies a client write.
func (g *round) applyLocal(parent *round, op Op, now time.Time) (Result, error) {
	b := bucket.ForID(op.ID)
	key := itemKey(b, op.ID)
	cur, err := g.lookup(parent, key, b)
	if err != nil {
		return Result{}, err
	}
	live := cur.doc != nil && !cur.doc.Deleted()
	if op.IfNew && live {
		return Result{}, &ConcurrencyError{ID: op.ID, Actual: cur.doc.ChangeVector}
	}
	if op.IfMatch != "" {
		if err := checkIfMatch(op, cur.doc, live); err != nil {
			return Result{}, err
		}
	}
	res := Result{Kind: op.Kind, ID: op.ID, Bucket: b}
	if op.Kind == OpDelete && !live {
		return res, nil // nothing to delete: no tombstone, no etag
	}
	var prev changevector.ChangeVector
	if cur.doc != nil {
		prev, err = changevector.Parse(cur.doc.ChangeVector)
		if err != nil {
			return Result{}, fmt.Errorf("stored change vector of %q: %w", op.ID, err)
		}
	}
	g.etag++
	cv := nextChangeVector(prev, g.s.tag, g.etag, g.s.dbid)
	doc := &Document{ID: op.ID, ChangeVector: cv.String(), LastModified: now, Etag: g.etag, Bucket: b}
	if op.Kind == OpPut {
		doc.Collection, doc.Body = op.Collection, op.Body
	} else {
		doc.Flags = FlagDeleted
		if cur.doc != nil {
			doc.Collection = cur.doc.Collection
		}
		res.Deleted = true
	}
	if err := g.store(parent, key, cur, doc, cv.Version, prev.Version); err != nil {
		return Result{}, err
	}
	g.items[string(key)].client = !g.bulk
	res.Collection, res.ChangeVector, res.LastModified, res.Etag = doc.Collection, doc.ChangeVector, now, doc.Etag
	return res, nil
}

// applyReplicated decides a replicated item by version.
func (g *round) applyReplicated(parent *round, op Op) (Result, error) {
	in, err := changevector.Parse(op.ChangeVector)
	if err != nil {
		return Result{}, fmt.Errorf("replicated %q: %w", op.ID, err)
	}
	cur, incoming, res, err := g.prepareIncoming(parent, op, in.String(), op.Flags&^FlagArtificial)
	if err != nil {
		return Result{}, err
	}
	against := cur.doc
	if against != nil && against.artificial() {
		// An artificial tombstone blocks only the very item it purged (a
		// sibling replica sending it late); an item that moved back here
		// carries a new order and applies.
		local, err := changevector.Parse(against.ChangeVector)
		if err != nil {
			return Result{}, fmt.Errorf("stored change vector of %q: %w", op.ID, err)
		}
		if local.Version.Covers(in.Version) && local.Order.Covers(in.Order) {
			res.Skipped, res.ChangeVector = true, against.ChangeVector
			return res, nil
		}
		against = nil
	}
	d, err := g.decide(against, incoming, in)
	if err != nil || d.skip {
		res.Skipped, res.ChangeVector = d.skip, d.held
		return res, err
	}
	if marks := g.s.purgeMarksOf(incoming.Bucket); marks != nil && d.loser == nil && marks.blocks(in) {
		// A late copy of an item that moved away with the bucket's last
		// purged pass: the destination has it, and stored live here it
		// would stay in a bucket this shard does not own.
		d.doc = &Document{ID: incoming.ID, Collection: incoming.Collection, LastModified: incoming.LastModified, Bucket: incoming.Bucket,
			Flags: FlagDeleted | FlagArtificial}
	}
	d.doc.ChangeVector = d.cv.String()
	if d.loser == nil {
		d.doc.Origin = op.Source // stored as the sender holds it
	}
	res, err = g.storeIncoming(parent, cur, d, res)
	if err == nil && d.loser != nil {
		res.Lost = d.loser == incoming
		res.LoserVersion, res.WinnerVersion = d.prev.String(), in.Version.String()
		if res.Lost {
			res.LoserVersion, res.WinnerVersion = res.WinnerVersion, res.LoserVersion
		}
	}
	return res, err
}

// applyMigrated stores an item sent by a bucket migration: it keeps its
// version and gets a fresh local order entry plus the MOVE marker.
func (g *round) applyMigrated(parent *round, op Op) (Result, error) {
	in, err := changevector.Parse(op.ChangeVector)
	if err != nil {
		return Result{}, fmt.Errorf("migrated %q: %w", op.ID, err)
	}
	cur, incoming, res, err := g.prepareIncoming(parent, op, op.ChangeVector, (op.Flags&^FlagArtificial)|FlagFromResharding)
	if err != nil {
		return Result{}, err
	}
	// A local artificial tombstone is what an earlier move left behind: it
	// never counts as holding the item.
	against := cur.doc
	if against != nil && against.artificial() {
		against = nil
	}
	d, err := g.decide(against, incoming, in)
	if err != nil || d.skip {
		res.Skipped, res.ChangeVector = d.skip, d.held
		return res, err
	}
	d.doc.Flags |= FlagFromResharding
	order := changevector.Vector(nil).With(g.s.tag, g.etag+1, g.s.dbid).With(changevector.MoveTag, op.MigrationIndex, op.DatabaseID)
	d.doc.ChangeVector = changevector.Composite(order, d.cv.Version).String()
	return g.storeIncoming(parent, cur, d, res)
}

// prepareIncoming looks up the current item for a replicated or migrated
// op and builds the incoming document.
func (g *round) prepareIncoming(parent *round, op Op, cv string, flags Flags) (*pendingItem, *Document, Result, error) {
	b := bucket.ForID(op.ID)
	cur, err := g.lookup(parent, itemKey(b, op.ID), b)
	if err != nil {
		return nil, nil, Result{}, err
	}
	incoming := &Document{ID: op.ID, Collection: op.Collection, ChangeVector: cv, LastModified: op.LastModified.UTC(), Bucket: b, Flags: flags, Body: op.Body}
	if incoming.Deleted() {
		incoming.Body = nil
	}
	return cur, incoming, Result{Kind: op.Kind, ID: op.ID, Bucket: b}, nil
}

// decision is what decide chose.
type decision struct {
	skip  bool                      // the current item holds this version or newer
	held  string                    // the current change vector, when skipped
	doc   *Document                 // what to store otherwise
	cv    changevector.ChangeVector // its change vector's history
	loser *Document                 // set when concurrent versions conflicted
	prev  changevector.Vector       // the current item's version, when compared
}

// decide compares an incoming version with the current item (nil: none):
// newer applies, equal or older is skipped, and concurrent versions keep
// the winner (the later modification, ties by change vector text) under
// the merge of both vectors, so every replica converges to the same item.
func (g *round) decide(cur, incoming *Document, in changevector.ChangeVector) (decision, error) {
	if cur == nil {
		return decision{doc: incoming, cv: in}, nil
	}
	local, err := changevector.Parse(cur.ChangeVector)
	if err != nil {
		return decision{}, fmt.Errorf("stored change vector of %q: %w", cur.ID, err)
	}
	switch changevector.Compare(in.Version, local.Version) {
	case changevector.Equal, changevector.Older:
		return decision{skip: true, held: cur.ChangeVector}, nil
	case changevector.Conflict:
		// Either version may be stored or kept as the loser: both whole.
		if err := g.readBody(cur); err != nil {
			return decision{}, err
		}
		winner, loser := incoming, cur
		if wins(cur, incoming) {
			winner, loser = cur, incoming
		}
		cp := *winner
		return decision{doc: &cp, cv: local.Merge(in), loser: loser, prev: local.Version}, nil
	}
	return decision{doc: incoming, cv: in, prev: local.Version}, nil
}

// storeIncoming stores a decided item with the next etag and records a
// conflict's loser.
func (g *round) storeIncoming(parent *round, cur *pendingItem, d decision, res Result) (Result, error) {
	g.etag++
	d.doc.Etag = g.etag
	prev := d.prev
	if cur.doc != nil && prev == nil {
		// decide did not compare with it (an artificial tombstone).
		held, err := changevector.Parse(cur.doc.ChangeVector)
		if err != nil {
			return Result{}, fmt.Errorf("stored change vector of %q: %w", cur.doc.ID, err)
		}
		prev = held.Version
	}
	if err := g.store(parent, cur.key, cur, d.doc, d.cv.Version, prev); err != nil {
		return Result{}, err
	}
	if d.loser != nil {
		res.Conflict = true
		g.conflict = append(g.conflict, conflictEntry{loser: d.loser, winnerCV: d.doc.ChangeVector})
	}
	res.Collection, res.ChangeVector, res.LastModified, res.Etag, res.Deleted = d.doc.Collection, d.doc.ChangeVector, d.doc.LastModified, d.doc.Etag, d.doc.Deleted()
	return res, nil
}

// applyPurge turns a moved-away item into an artificial tombstone, if its
// version is covered by what the destination confirmed.
func (g *round) applyPurge(parent *round, op Op) (Result, error) {
	b := bucket.ForID(op.ID)
	key := itemKey(b, op.ID)
	cur, err := g.lookup(parent, key, b)
	if err != nil {
		return Result{}, err
	}
	res := Result{Kind: op.Kind, ID: op.ID, Bucket: b, Skipped: true}
	if cur.doc == nil || cur.doc.artificial() {
		return res, nil
	}
	local, err := changevector.Parse(cur.doc.ChangeVector)
	if err != nil {
		return Result{}, fmt.Errorf("stored change vector of %q: %w", op.ID, err)
	}
	if !op.CoveredBy.Covers(local.Version) {
		return res, nil // newer than what moved: a leftover for the migrator
	}
	if bound := op.SentFeeds[g.s.DatabaseID()]; bound != 0 && cur.doc.Etag > bound && (op.SentBy == "" || g.s.feedOrigin(cur.doc.Etag) != op.SentBy) &&
		!appliedAll(local.Order, op.SentFeeds) {
		// The sender may never have had this version, though a merged
		// version vector covers it (its entries can come from other
		// shards' replicas, in no order this shard's feeds follow): a
		// leftover too.
		return res, nil
	}
	g.etag++
	doc := &Document{ID: cur.doc.ID, Collection: cur.doc.Collection, ChangeVector: cur.doc.ChangeVector, LastModified: cur.doc.LastModified,
		Etag: g.etag, Bucket: b, Flags: FlagDeleted | FlagArtificial}
	if err := g.store(parent, key, cur, doc, local.Version, local.Version); err != nil {
		return Result{}, err
	}
	res.Skipped, res.Deleted, res.Etag = false, true, g.etag
	return res, nil
}

// feedOrigin is the origin its feed entry gives the item stored at etag, or
// "" when there is none (written here, or not committed yet).
func (s *Store) feedOrigin(etag uint64) string {
	v, closer, err := s.db.Get(etagKey(etag))
	if err != nil {
		return ""
	}
	defer closer.Close()
	origin, _, err := parseFeedRef(v)
	if err != nil {
		return ""
	}
	return origin
}

// wins reports whether a beats b in a conflict: the later modification,
// ties broken by the greater change vector text. Every replica computes
// the same answer. Two HiLo documents resolve to the greater Max, as in
// RavenDB: each side of the conflict may have handed out numbers up to its
// own Max (see HiloCollection), and the next range must start above both.
func wins(a, b *Document) bool {
	if ma, mb, ok := hiloMaxes(a, b); ok && ma != mb {
		return ma > mb
	}
	if !a.LastModified.Equal(b.LastModified) {
		return a.LastModified.After(b.LastModified)
	}
	return a.ChangeVector > b.ChangeVector
}

// store puts doc, of the given version, in place of cur, whose version is
// prev (nil: no item), keeping bucket and replica figures.
//
// Bucket statistics reach Pebble in checkpoints, not with every round.
// After a crash, Open rebuilds those of the buckets changed since the last
// checkpoint from their items (recoverStats), taking as change vector the
// merge of the one in the statistics key and the versions of the bucket's
// current items. That is the merge computed here, of every version ever
// stored, as long as each version stored since that key was written is
// superseded by (merges into) the version of the item that holds its key
// now: every replacement must supersede what it replaced (its version
// absorbs the one it replaced: changevector.Vector.Absorbs, which is
// transitive). For almost every write it does:
//
//   - a local write is the previous version with this replica's entry set
//     to a new etag, above any this replica gave before;
//   - a replicated or migrated item is stored only when its version is
//     newer than the current one, or, for concurrent versions, with the
//     merge of both;
//   - a purge keeps the version it replaces.
//
// What does not: a replicated or migrated item over an artificial
// tombstone (it is stored without being compared with it: the bucket came
// back); an entry that came with another tag for the same database id and
// etag (Compare ignores tags, Merge does not); an item that carries this
// replica's own entry above its etag (a replica restored from an older
// copy). For those store pins the bucket: the round writes its statistics
// key with its items, so what a crash can lose of the bucket starts after.
func (g *round) store(parent *round, key []byte, cur *pendingItem, doc *Document, version, prev changevector.Vector) error {
	st, err := g.bucketStats(parent, doc.Bucket)
	if err != nil {
		return err
	}
	if doc.bodyElsewhere {
		return fmt.Errorf("store %q: the body was not read", doc.ID)
	}
	vlen := doc.encodedLen()
	size := int64(len(key) + vlen)
	if doc.splitBody() {
		size += int64(len(key) + doc.bodyValueLen())
	}
	st.count(cur.doc, cur.size, -1)
	g.counters.count(cur.doc, -1)
	st.count(doc, size, 1)
	g.counters.count(doc, 1)
	st.cv = changevector.Merge(st.cv, version)
	if cur.doc != nil && !version.Absorbs(prev) {
		g.pinned[doc.Bucket] = true
	}
	g.counters.CV = changevector.Merge(g.counters.CV, version)
	g.items[string(key)] = &pendingItem{key: key, doc: doc, vlen: vlen, size: size, committed: cur.committed, hadBody: cur.hadBody}
	return nil
}

// checkIfMatch compares version parts, so a change vector read before a
// bucket moved still matches the moved (composite) document.
func checkIfMatch(op Op, cur *Document, live bool) error {
	want, err := changevector.Parse(op.IfMatch)
	if err != nil {
		return fmt.Errorf("If-Match of %q: %w", op.ID, err)
	}
	if !live {
		return &ConcurrencyError{ID: op.ID, Expected: op.IfMatch}
	}
	have, err := changevector.Parse(cur.ChangeVector)
	if err != nil {
		return fmt.Errorf("stored change vector of %q: %w", op.ID, err)
	}
	if changevector.Compare(have.Version, want.Version) != changevector.Equal {
		return &ConcurrencyError{ID: op.ID, Expected: op.IfMatch, Actual: cur.ChangeVector}
	}
	return nil
}

// nextChangeVector is the change vector of a local write over prev: the
// version continues prev's history with this replica's new etag, and so
// does the order of a composite (moved) item.
func nextChangeVector(prev changevector.ChangeVector, tag string, etag uint64, dbid string) changevector.ChangeVector {
	version := prev.Version.With(tag, etag, dbid)
	if !prev.IsComposite() {
		return changevector.Plain(version)
	}
	return changevector.Composite(prev.Order.With(tag, etag, dbid), version)
}

// commit writes the round's final state in one synced batch. The batch
// holds its keys in ascending order within each key space: Pebble inserts a
// batch into the memtable in batch order and reuses the previous position
// for a key that follows it, while random order costs a full skiplist
// search (cache misses all the way down) for every key.
func (r *round) commit() error {
	if len(r.items) == 0 && len(r.progress) == 0 {
		return nil
	}
	// Size the batch up front: growing it copies every document again.
	size := 256 + 128*len(r.pinned) + 64*len(r.progress)
	items := make([]*pendingItem, 0, len(r.items))
	for _, p := range r.items {
		items = append(items, p)
		size += 3*len(p.key) + p.vlen + 48
		if p.doc != nil && p.doc.splitBody() {
			size += p.doc.docValueLen()
		}
	}
	b := r.s.db.NewBatchWithSize(size)
	defer closeQuietly(b)
	slices.SortFunc(items, func(a, b *pendingItem) int { return bytes.Compare(a.key, b.key) })
	for _, p := range items {
		if p.doc == nil {
			if err := b.Delete(p.key, nil); err != nil {
				return err
			}
			continue
		}
		// The document is encoded straight into the batch.
		op := b.SetDeferred(len(p.key), p.vlen)
		copy(op.Key, p.key)
		if v := p.doc.appendEncoded(op.Value[:0]); len(v) != p.vlen {
			return fmt.Errorf("encode %q: %d bytes, expected %d", p.doc.ID, len(v), p.vlen)
		}
		if err := op.Finish(); err != nil {
			return err
		}
	}
	// Split items kept whole under their doc keys: set for a split item,
	// deleted when the version they belonged to is replaced by one without.
	for _, p := range items {
		switch {
		case p.doc != nil && p.doc.splitBody():
			op := b.SetDeferred(len(p.key), p.doc.docValueLen())
			op.Key[0] = prefixDoc
			copy(op.Key[1:], p.key[1:])
			p.doc.appendDocValue(op.Value[:0])
			if err := op.Finish(); err != nil {
				return err
			}
		case p.hadBody:
			if err := b.Delete(docKey(p.key), nil); err != nil {
				return err
			}
		}
	}
	// The feed: entries replaced by this round go, the new ones (etags
	// above every committed one) are added in etag order.
	var old []uint64
	for _, p := range items {
		if p.committed != 0 {
			old = append(old, p.committed)
		}
	}
	slices.Sort(old)
	for _, e := range old {
		if err := b.Delete(etagKey(e), nil); err != nil {
			return err
		}
	}
	slices.SortFunc(items, func(a, b *pendingItem) int { return cmp.Compare(etagOf(a), etagOf(b)) })
	for _, p := range items {
		if p.doc != nil {
			if err := b.Set(etagKey(p.doc.Etag), feedRef(p.doc.Origin, p.key[1:]), nil); err != nil {
				return err
			}
		}
	}
	r.gone = old
	r.feed = slices.DeleteFunc(items, func(p *pendingItem) bool { return p.doc == nil })
	// Bucket statistics wait for the next checkpoint, but for pinned
	// buckets (see store).
	buckets := make([]uint32, 0, len(r.pinned))
	for bk := range r.pinned {
		buckets = append(buckets, bk)
	}
	slices.Sort(buckets)
	for _, bk := range buckets {
		if err := b.Set(bucketStatKey(bk), r.stats[bk].encode(), nil); err != nil {
			return err
		}
	}
	for src, etag := range r.progress {
		if err := b.Set(progressKey(src), binary.BigEndian.AppendUint64(nil, etag), nil); err != nil {
			return err
		}
	}
	for _, c := range r.conflict {
		if err := b.Set(conflictKey(c.loser.Bucket, c.loser.ID, r.etag), c.encode(), nil); err != nil {
			return err
		}
	}
	if err := b.Set(metaCounters, r.counters.encode(), nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

func etagOf(p *pendingItem) uint64 {
	if p.doc == nil {
		return 0
	}
	return p.doc.Etag
}

// HiloCollection is the collection of the documents that hold, as
// {"Max": N}, the highest number handed out to RavenDB clients for the
// ids they make themselves (the node's /hilo/next). Conflicts between two
// of them resolve to the greater Max (see wins).
const HiloCollection = "@hilo"

// hiloMaxes returns the Max of two HiLo documents, if both are HiLo
// documents with a body that holds one.
func hiloMaxes(a, b *Document) (ma, mb int64, ok bool) {
	if a.Collection != HiloCollection || b.Collection != HiloCollection {
		return 0, 0, false
	}
	ma, okA := hiloMax(a.Body)
	mb, okB := hiloMax(b.Body)
	return ma, mb, okA && okB
}

func hiloMax(body []byte) (int64, bool) {
	var d struct {
		Max *int64 `json:"Max"`
	}
	if len(body) == 0 || json.Unmarshal(body, &d) != nil || d.Max == nil {
		return 0, false
	}
	return *d.Max, true
}
