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

// startCheckpoint hands the dirty statistics, complete through lastEtag, to
// a goroutine that writes them: a checkpoint of tens of thousands of
// buckets took 0.1 to 0.5 s on a busy 2-core machine, which the committer,
// and so every writer, would otherwise wait for. Until it is done readers
// find them in flushing. One checkpoint runs at a time. Only the
// committer calls it, between rounds.
func (s *Store) startCheckpoint() {
	if s.ckptDone != nil || len(s.dirty) == 0 {
		return
	}
	next := s.spare
	if next == nil {
		next = make(map[uint32]*bucketState, len(s.dirty))
	}
	s.spare = nil
	s.mu.Lock()
	s.flushing, s.dirty = s.dirty, next
	through := s.lastEtag
	s.mu.Unlock()
	done := make(chan error, 1)
	s.ckptDone = done
	flushing := s.flushing
	go func() {
		time.Sleep(s.ckptPause) // 0 but in tests
		done <- s.writeStats(flushing, through, pebble.NoSync)
	}()
}

// checkpointed takes the outcome of the running checkpoint: its statistics
// go to the committer's cache, or, if it failed, back to dirty (unless a
// later round changed them), to be tried again an interval later.
func (s *Store) checkpointed(err error) {
	s.ckptDone = nil
	if err != nil {
		s.logger.Error("bucket statistics checkpoint failed", "err", err)
		s.mu.Lock()
		for b, st := range s.flushing {
			if _, ok := s.dirty[b]; !ok {
				s.dirty[b] = st
			}
		}
		s.flushing = nil
		s.mu.Unlock()
		s.dirtySince = time.Now()
		return
	}
	// Readers find the statistics in Pebble now, before they leave
	// flushing.
	s.cacheStats(s.flushing)
	s.mu.Lock()
	done := s.flushing
	s.flushing = nil
	s.mu.Unlock()
	clear(done)
	s.spare = done
}

// waitCheckpoint waits for the running checkpoint, if any. A round that
// writes a statistics key itself (a pinned bucket) calls it first: the
// checkpoint's older value of that key must not land after it.
func (s *Store) waitCheckpoint() {
	if s.ckptDone != nil {
		s.checkpointed(<-s.ckptDone)
	}
}

// finalCheckpoint is the committer's last act when the store closes: the
// next open then has nothing to recover.
func (s *Store) finalCheckpoint() {
	s.waitCheckpoint()
	if s.noFinalCheckpoint.Load() || len(s.dirty) == 0 {
		return
	}
	if err := s.writeStats(s.dirty, s.lastEtag, pebble.Sync); err != nil {
		s.logger.Error("bucket statistics checkpoint at close failed", "err", err)
	}
}

// writeStats writes a checkpoint: the statistics of the given buckets and
// the etag that they, with the keys already in Pebble, are complete
// through, in one batch.
//
// The batch need not be synced. The rounds it covers are durable already,
// and Pebble's log keeps order: if a crash loses the checkpoint, it loses
// no later round with it, and the previous checkpoint stands, with more
// to recover.
func (s *Store) writeStats(stats map[uint32]*bucketState, through uint64, opts *pebble.WriteOptions) error {
	buckets := make([]uint32, 0, len(stats))
	for b := range stats {
		buckets = append(buckets, b)
	}
	slices.Sort(buckets) // sorted keys are cheaper for the memtable (see round.commit)
	b := s.db.NewBatchWithSize(64 + 96*len(buckets))
	defer closeQuietly(b)
	for _, bk := range buckets {
		if err := b.Set(bucketStatKey(bk), stats[bk].encode(), nil); err != nil {
			return err
		}
	}
	if err := b.Set(metaStatsCheckpoint, binary.BigEndian.AppendUint64(nil, through), nil); err != nil {
		return err
	}
	return b.Commit(opts)
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
