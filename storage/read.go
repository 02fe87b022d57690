package storage

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
)

// Get returns the live document with id, or ErrNotFound (also for a
// tombstone).
func (s *Store) Get(id string) (*Document, error) {
	d, err := s.GetItem(id)
	if err != nil {
		return nil, err
	}
	if d.Deleted() {
		return nil, ErrNotFound
	}
	return d, nil
}

// GetItem returns the document or tombstone with id, or ErrNotFound.
func (s *Store) GetItem(id string) (*Document, error) {
	if !s.reads.enter() {
		return nil, ErrClosed
	}
	defer s.reads.leave()
	b := bucket.ForID(id)
	key := itemKey(b, id)
	var gen uint64
	if s.docs != nil {
		if d, ok := s.docs.get(string(key)); ok {
			return d, nil
		}
		gen = s.docs.generation()
	}
	d, err := s.get(key, b)
	if err == nil && s.docs != nil {
		s.docs.put(string(key), d, gen)
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("get %q: %w", id, err)
	}
	return d, err
}

// Changes returns up to limit items (documents and tombstones) whose etag is
// greater than after, in etag order: the changes feed that replication, ETL
// and subscriptions tail. It stops at the last durable etag: Pebble makes a
// batch readable before its WAL sync returns, and an item shipped then and
// lost in a crash would let its etag be reused for another write, which a
// consumer that recorded the first would skip.
func (s *Store) Changes(after uint64, limit int) ([]*Document, error) {
	return s.changes(after, limit, nil)
}

// ChangesLeavingBodies is Changes, but an item whose body is kept apart
// under its doc key (a large document) and for which leave reports true
// comes without its body (BodyUnread): reading it would be a second lookup
// and, once flushed, a blob file read. A replicator leaves the bodies of
// items that came by a bucket migration, which the peer replicas of the
// destination were sent too, and sends their versions only (see
// replication.Item.Stub).
func (s *Store) ChangesLeavingBodies(after uint64, limit int, leave func(*Document) bool) ([]*Document, error) {
	return s.changes(after, limit, leave)
}

func (s *Store) changes(after uint64, limit int, leave func(*Document) bool) ([]*Document, error) {
	if !s.reads.enter() {
		return nil, ErrClosed
	}
	defer s.reads.leave()
	if docs, ok := s.fromTail(after, limit, leave); ok {
		return docs, nil
	}
	return s.changesStored(after, limit, leave)
}

// changesStored is changes read from Pebble, for a tailer the feed's tail
// in memory does not reach back to.
func (s *Store) changesStored(after uint64, limit int, leave func(*Document) bool) ([]*Document, error) {
	durable := s.LastEtag()
	if after >= durable {
		return nil, nil
	}
	// Entries and items are read from one state. An item read from a
	// later one may have been rewritten since its entry, under a newer
	// etag (perhaps not durable yet): out of feed order, and a replicator
	// that takes the last item's etag as its progress would move past
	// entries it never sent.
	snap := s.db.NewSnapshot()
	defer closeQuietly(snap)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: etagKey(after + 1), UpperBound: etagKey(durable + 1)})
	if err != nil {
		return nil, fmt.Errorf("changes after %d: %w", after, err)
	}
	defer closeQuietly(it)
	var out []*Document
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		origin, ref, err := parseFeedRef(it.Value())
		if err != nil {
			return nil, fmt.Errorf("changes after %d: %w", after, err)
		}
		b := binary.BigEndian.Uint32(ref)
		key := append([]byte{prefixItem}, ref...)
		var d *Document
		if leave == nil {
			d, err = s.getFrom(snap, key, b)
		} else {
			d, err = getLeavingBody(snap, key, b, leave)
		}
		if err != nil {
			return nil, fmt.Errorf("changes after %d: item %q: %w", after, ref[4:], err)
		}
		d.Origin = origin
		out = append(out, d)
	}
	return out, it.Error()
}

// Holds reports whether the replica holds the item id at the version of
// changeVector or at a newer one: an OpReplicate of it would change
// nothing. A local artificial tombstone (a purge's) holds nothing. It reads
// what is committed, which only ever moves to newer versions.
func (s *Store) Holds(id, changeVector string) (bool, error) {
	in, err := changevector.Parse(changeVector)
	if err != nil {
		return false, fmt.Errorf("holds %q: %w", id, err)
	}
	if !s.reads.enter() {
		return false, ErrClosed
	}
	defer s.reads.leave()
	b := bucket.ForID(id)
	d, err := getMeta(s.db, itemKey(b, id), b)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("holds %q: %w", id, err)
	}
	if d.artificial() {
		return false, nil
	}
	local, err := changevector.Parse(d.ChangeVector)
	if err != nil {
		return false, fmt.Errorf("stored change vector of %q: %w", id, err)
	}
	switch changevector.Compare(in.Version, local.Version) {
	case changevector.Equal, changevector.Older:
		return true, nil
	}
	return false, nil
}

// BucketStats returns the statistics of one bucket (zero if it never held
// anything).
func (s *Store) BucketStats(b uint32) (BucketStats, error) {
	if !s.reads.enter() {
		return BucketStats{}, ErrClosed
	}
	defer s.reads.leave()
	// Dirty statistics are newer than those a checkpoint is writing, which
	// are newer than Pebble's; a bucket in neither has its latest in
	// Pebble, and a checkpoint writes Pebble before it lets go of them.
	s.mu.RLock()
	st, ok := s.dirty[b]
	if !ok {
		st, ok = s.flushing[b]
	}
	s.mu.RUnlock()
	if ok {
		return st.stats(), nil
	}
	v, closer, err := s.db.Get(bucketStatKey(b))
	if errors.Is(err, pebble.ErrNotFound) {
		return BucketStats{Bucket: b}, nil
	}
	if err != nil {
		return BucketStats{}, fmt.Errorf("bucket %d stats: %w", b, err)
	}
	defer closer.Close()
	return decodeBucketStats(b, v)
}

// RangeStats calls fn for every bucket in [from, to] that has statistics,
// in bucket order.
func (s *Store) RangeStats(from, to uint32, fn func(BucketStats) error) error {
	return s.SpansStats([]bucket.Span{{From: from, To: to}}, fn)
}

// SpansStats calls fn for every bucket in spans that has statistics, in
// bucket order. The spans must be in bucket order and must not overlap.
// One iterator serves them all and seeks only over the gaps between them
// that hold statistics: the documents migrator reads every range other
// shards own, and during a long move the record holds thousands of them.
func (s *Store) SpansStats(spans []bucket.Span, fn func(BucketStats) error) error {
	if len(spans) == 0 {
		return nil
	}
	if !s.reads.enter() {
		return ErrClosed
	}
	defer s.reads.leave()
	from, to := spans[0].From, spans[len(spans)-1].To
	upper := []byte{prefixBktStat + 1}
	if to < bucket.MaxID {
		upper = bucketStatKey(to + 1)
	}
	// The iterator and the dirty statistics are taken under the lock: no
	// checkpoint can let go of a bucket between the two, so a bucket that
	// is neither dirty nor being checkpointed has its latest statistics in
	// the iterator's state.
	s.mu.RLock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: bucketStatKey(from), UpperBound: upper})
	dirty := s.dirtyIn(from, to)
	s.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("bucket stats %d-%d: %w", from, to, err)
	}
	defer closeQuietly(it)
	ok := it.First()
	at := func() uint32 { return binary.BigEndian.Uint32(it.Key()[1:]) }
	for ok || len(dirty) > 0 {
		// The next bucket with statistics, on disk or dirty.
		var next uint32
		switch {
		case !ok:
			next = dirty[0].Bucket
		case len(dirty) == 0:
			next = at()
		default:
			next = min(at(), dirty[0].Bucket)
		}
		for len(spans) > 0 && spans[0].To < next {
			spans = spans[1:]
		}
		if len(spans) == 0 {
			break
		}
		if next < spans[0].From {
			// In a gap between two spans: skip to the next one.
			if ok && at() < spans[0].From {
				ok = it.SeekGE(bucketStatKey(spans[0].From))
			}
			for len(dirty) > 0 && dirty[0].Bucket < spans[0].From {
				dirty = dirty[1:]
			}
			continue
		}
		var st BucketStats
		if len(dirty) > 0 && dirty[0].Bucket == next {
			st = dirty[0].stats()
			if ok && at() == next {
				ok = it.Next()
			}
			dirty = dirty[1:]
		} else {
			if st, err = decodeBucketStats(next, it.Value()); err != nil {
				return err
			}
			ok = it.Next()
		}
		if err := fn(st); err != nil {
			return err
		}
	}
	return it.Error()
}

// dirtyIn returns the statistics of the buckets in [from, to] that are
// dirty or being checkpointed, the newer for a bucket in both, in bucket
// order. The caller holds s.mu.
func (s *Store) dirtyIn(from, to uint32) []*bucketState {
	var out []*bucketState
	if uint64(to)-uint64(from) < uint64(len(s.dirty)+len(s.flushing)) {
		for b := from; ; b++ {
			if st, ok := s.dirty[b]; ok {
				out = append(out, st)
			} else if st, ok := s.flushing[b]; ok {
				out = append(out, st)
			}
			if b == to {
				break
			}
		}
		return out
	}
	for b, st := range s.dirty {
		if b >= from && b <= to {
			out = append(out, st)
		}
	}
	for b, st := range s.flushing {
		if _, ok := s.dirty[b]; !ok && b >= from && b <= to {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(x, y *bucketState) int { return cmp.Compare(x.Bucket, y.Bucket) })
	return out
}

// IterateBuckets calls fn for every item (documents and tombstones) in the
// buckets [from, to], in key order, from one consistent snapshot. Returning
// false from fn stops the walk.
func (s *Store) IterateBuckets(from, to uint32, fn func(*Document) bool) error {
	lower, upper := bucketBounds(from, to)
	if err := s.walk(lower, upper, true, nil, fn); err != nil {
		return fmt.Errorf("iterate buckets %d-%d: %w", from, to, err)
	}
	return nil
}

// IterateBucketsMeta is IterateBuckets without the documents' bodies (each
// item's Body is nil): for a walk that needs ids and change vectors, it
// leaves the bodies unread.
func (s *Store) IterateBucketsMeta(from, to uint32, fn func(*Document) bool) error {
	lower, upper := bucketBounds(from, to)
	if err := s.walk(lower, upper, false, nil, func(d *Document) bool {
		d.Body = nil
		return fn(d)
	}); err != nil {
		return fmt.Errorf("iterate buckets %d-%d: %w", from, to, err)
	}
	return nil
}

// Scan calls fn for every live document of the replica, in bucket order,
// from one consistent snapshot, until fn returns false.
func (s *Store) Scan(fn func(*Document) bool) error {
	return s.ScanChecked(nil, fn)
}

// ScanChecked is Scan with a check that runs once the snapshot is taken and
// before the first document: a caller can refuse a snapshot that an event
// before it (a purge) made incomplete for the caller's purpose.
func (s *Store) ScanChecked(check func() error, fn func(*Document) bool) error {
	lower, upper := bucketBounds(0, bucket.MaxID)
	err := s.walk(lower, upper, true, check, func(d *Document) bool {
		return d.Deleted() || fn(d)
	})
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	return nil
}

// walk calls fn for the items in [lower, upper) of one read state, in key
// order, reading split bodies when bodies is set (from their doc keys,
// through a clone of the items' iterator, so from the same state), until fn
// returns false. check,
// if set, runs once the state is taken.
func (s *Store) walk(lower, upper []byte, bodies bool, check func() error, fn func(*Document) bool) error {
	if !s.reads.enter() {
		return ErrClosed
	}
	defer s.reads.leave()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer closeQuietly(it)
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	var bit *pebble.Iterator // doc keys, cloned on the first split item
	defer func() {
		if bit != nil {
			closeQuietly(bit)
		}
	}()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		d, err := decodeItem(binary.BigEndian.Uint32(k[1:5]), it.Value())
		if err != nil {
			return fmt.Errorf("item %q: %w", k[5:], err)
		}
		if bodies && d.bodyElsewhere {
			if bit == nil {
				blo, bup := docKey(lower), docKey(upper)
				if len(upper) == 1 { // the end of the item family
					bup = []byte{prefixDoc + 1}
				}
				if bit, err = it.Clone(pebble.CloneOptions{IterOptions: &pebble.IterOptions{LowerBound: blo, UpperBound: bup}}); err != nil {
					return err
				}
			}
			bk := docKey(k)
			if !bit.SeekGE(bk) || !bytes.Equal(bit.Key(), bk) {
				return fmt.Errorf("item %q: body missing: %w", k[5:], errCorruptItem)
			}
			if err := d.setBody(bit.Value()); err != nil {
				return fmt.Errorf("item %q: %w", k[5:], err) // same state: a stale body is corruption too
			}
		}
		if !fn(d) {
			break
		}
	}
	if bit != nil {
		if err := bit.Error(); err != nil {
			return err
		}
	}
	return it.Error()
}
