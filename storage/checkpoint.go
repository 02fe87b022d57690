package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardnode/shardnode/changevector"
)

// Bucket statistics are not written by every commit round. A round leaves
// the statistics of the buckets it changed in memory (Store.dirty), where
// every reader finds them, and a checkpoint writes them all at once: one
// unsynced batch of the dirty buckets' statistics keys and of
// metaStatsCheckpoint, the last etag they are complete through. With
// writes spread over random buckets, a round's statistics were one more
// key per document, synced with the documents; a checkpoint writes each
// dirty bucket once however often it changed, off the writers' path.
//
// A crash loses the dirty statistics (and perhaps unsynced checkpoints),
// never an item: Open then rebuilds the statistics of the buckets changed
// since the last checkpoint from their items (recoverStats).
const (
	// checkpointBuckets: a checkpoint once this many buckets are dirty,
	// which bounds their memory (~200 bytes each) and the work of a
	// recovery.
	checkpointBuckets = 1 << 15
	// checkpointEvery: a checkpoint once statistics have been dirty this
	// long.
	checkpointEvery = 2 * time.Second
)

// checkpoint writes the dirty bucket statistics, or logs why it could not
// (they stay dirty, and the next attempt is an interval later).
func (s *Store) checkpoint() {
	if err := s.writeCheckpoint(pebble.NoSync); err != nil {
		s.logger.Error("bucket statistics checkpoint failed", "err", err)
		s.dirtySince = time.Now()
	}
}

// finalCheckpoint is the committer's last act when the store closes: the
// next open then has nothing to recover.
func (s *Store) finalCheckpoint() {
	if s.noFinalCheckpoint.Load() {
		return
	}
	if err := s.writeCheckpoint(pebble.Sync); err != nil {
		s.logger.Error("bucket statistics checkpoint at close failed", "err", err)
	}
}

// writeCheckpoint writes every dirty bucket's statistics and the etag they
// are complete through in one batch, then drops them from dirty (into the
// committer's cache). Only the committer calls it, between rounds: dirty
// then holds the effect of every committed round, through lastEtag.
//
// The batch need not be synced. The rounds it covers are durable already,
// and Pebble's log keeps order: if a crash loses the checkpoint, it loses
// no later round with it, and the previous checkpoint stands, with more
// to recover.
func (s *Store) writeCheckpoint(opts *pebble.WriteOptions) error {
	if len(s.dirty) == 0 {
		return nil
	}
	buckets := make([]uint32, 0, len(s.dirty))
	for b := range s.dirty {
		buckets = append(buckets, b)
	}
	slices.Sort(buckets) // sorted keys are cheaper for the memtable (see round.commit)
	b := s.db.NewBatchWithSize(64 + 96*len(buckets))
	defer closeQuietly(b)
	for _, bk := range buckets {
		if err := b.Set(bucketStatKey(bk), s.dirty[bk].encode(), nil); err != nil {
			return err
		}
	}
	if err := b.Set(metaStatsCheckpoint, binary.BigEndian.AppendUint64(nil, s.lastEtag), nil); err != nil {
		return err
	}
	if err := b.Commit(opts); err != nil {
		return err
	}
	// Readers see the statistics in Pebble now, before they leave dirty.
	s.cacheStats(s.dirty)
	s.mu.Lock()
	clear(s.dirty)
	s.mu.Unlock()
	return nil
}

// recoverStats brings the bucket statistics keys up to date at open, before
// the store serves, and writes a new checkpoint.
//
// Every change of an item goes through round.store, which gives it a new
// etag and a feed entry under that etag; items are never removed, and an
// item's feed entry goes only when the item is rewritten under a newer
// etag. So the buckets changed since the checkpoint are exactly those named
// by feed entries above its etag. For each, the counts and size are those
// of its items, counted as round.store counts them, and the change vector
// is the merge of the one in its statistics key (written by the checkpoint
// or later by a round that pinned the bucket) and the versions of its
// items: see round.store for why that is the merge the rounds computed.
//
// A store written before checkpoints has no checkpoint key: its rounds
// wrote every statistics key they changed, so it is complete through its
// last etag.
func (s *Store) recoverStats() error {
	through := s.lastEtag
	v, closer, err := s.db.Get(metaStatsCheckpoint)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read statistics checkpoint: %w", err)
	default:
		ok := len(v) == 8
		if ok {
			through = binary.BigEndian.Uint64(v)
		}
		closer.Close()
		if !ok {
			return fmt.Errorf("statistics checkpoint: %w", errCorruptItem)
		}
		if through == s.lastEtag {
			return nil // closed cleanly: nothing to do
		}
	}
	buckets, err := s.changedSince(through)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer closeQuietly(b)
	for _, bk := range buckets {
		st, err := s.recomputeBucket(bk)
		if err != nil {
			return err
		}
		if err := b.Set(bucketStatKey(bk), st.encode(), nil); err != nil {
			return err
		}
	}
	if err := b.Set(metaStatsCheckpoint, binary.BigEndian.AppendUint64(nil, s.lastEtag), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("write recovered statistics: %w", err)
	}
	if len(buckets) > 0 {
		s.logger.Info("recovered bucket statistics", "buckets", len(buckets), "checkpoint_etag", through, "last_etag", s.lastEtag)
	}
	return nil
}

// changedSince returns, in order, the buckets of the items whose feed
// entries are above etag.
func (s *Store) changedSince(etag uint64) ([]uint32, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: etagKey(etag + 1), UpperBound: []byte{prefixEtag + 1}})
	if err != nil {
		return nil, err
	}
	defer closeQuietly(it)
	seen := map[uint32]bool{}
	for ok := it.First(); ok; ok = it.Next() {
		_, ref, err := parseFeedRef(it.Value())
		if err != nil {
			return nil, fmt.Errorf("feed entry %d: %w", binary.BigEndian.Uint64(it.Key()[1:]), err)
		}
		seen[binary.BigEndian.Uint32(ref)] = true
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	out := make([]uint32, 0, len(seen))
	for b := range seen {
		out = append(out, b)
	}
	slices.Sort(out)
	return out, nil
}

// recomputeBucket is bucket b's statistics from its items, with the change
// vector of its statistics key merged in.
func (s *Store) recomputeBucket(b uint32) (*bucketState, error) {
	st := &bucketState{BucketStats: BucketStats{Bucket: b}}
	v, closer, err := s.db.Get(bucketStatKey(b))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("read bucket %d stats: %w", b, err)
	default:
		old, err := decodeBucketStats(b, v)
		closer.Close()
		if err != nil {
			return nil, err
		}
		if st.cv, err = changevector.ParseVector(old.ChangeVector); err != nil {
			return nil, fmt.Errorf("bucket %d change vector: %w", b, err)
		}
	}
	lower, upper := bucketBounds(b, b)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	defer closeQuietly(it)
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		d, err := decodeItem(b, v)
		if err != nil {
			return nil, fmt.Errorf("item %q: %w", k[5:], err)
		}
		cv, err := changevector.Parse(d.ChangeVector)
		if err != nil {
			return nil, fmt.Errorf("item %q: %w", k[5:], err)
		}
		st.cv = changevector.Merge(st.cv, cv.Version)
		st.count(d, storedSize(k, v, d), 1)
	}
	return st, it.Error()
}
