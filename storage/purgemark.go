package storage

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardnode/shardnode/changevector"
)

// PurgeMark is what a replica remembers of the last pass a moved-away
// bucket was purged by: the pass's merged version (ChangeVector) and how
// far its sender had each replica's feed (SentThrough, by database id,
// the sender's own feed included).
//
// A replica can purge a bucket before its sibling's replication delivers
// everything the sender had: the sender's node went down after its last
// pass, or the wait for replication timed out. A copy of such an item
// arriving afterwards is already at the destination, but it would be
// stored live in a bucket this shard no longer owns, where only the
// responsible replica's documents migrator looks: on any other replica it
// stayed for good. With the mark, a replicated item the sender had (every
// order entry of its change vector is within SentThrough) and the pass
// covers is stored as an artificial tombstone instead, like the purge
// would have made it.
type PurgeMark struct {
	ChangeVector string            `json:"ChangeVector"`
	SentThrough  map[string]uint64 `json:"SentThrough"`
}

// purgeMark is a parsed PurgeMark.
type purgeMark struct {
	covered     changevector.Vector
	sentThrough map[string]uint64
}

// maxPurgeMarks bounds the marks kept per bucket: a cleanup purges by one
// or two passes (the sender's at Moved, and its last), and a mark of an
// earlier move of the bucket blocks only versions older still.
const maxPurgeMarks = 4

// purgeMarks are a bucket's marks, oldest first.
type purgeMarks []*purgeMark

// blocks reports whether any of the marks blocks in.
func (ms purgeMarks) blocks(in changevector.ChangeVector) bool {
	for _, m := range ms {
		if m.blocks(in) {
			return true
		}
	}
	return false
}

// blocks reports whether a replicated item with change vector in is one
// the mark's pass sent: its version is covered, and each of its order
// entries (but the MOVE marker) is a write its sender had applied.
func (m *purgeMark) blocks(in changevector.ChangeVector) bool {
	return m.covered.Covers(in.Version) && appliedAll(in.Order, m.sentThrough)
}

// appliedAll reports whether a replica that had each replica's feed
// through sentThrough (by database id) had applied every write order
// names (the MOVE markers aside), so that it held that version or a newer
// one. An order of MOVE markers alone names no write, and tells nothing.
func appliedAll(order changevector.Vector, sentThrough map[string]uint64) bool {
	entries := 0
	for _, e := range order {
		if e.Tag == changevector.MoveTag {
			continue
		}
		through, ok := sentThrough[e.DBID]
		if !ok || e.Etag > through {
			return false
		}
		entries++
	}
	return entries > 0
}

// purgeMarkKey holds the mark of one bucket.
func purgeMarkKey(b uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{prefixMeta, 'p', 'm', 'k', '/'}, b)
}

// MarkPurged records that bucket b is being purged by mark's
// pass, before the purge's writes: from then on, late replicated copies of
// what the pass sent are not stored live (see PurgeMark). The bucket keeps
// its latest maxPurgeMarks marks; marking it again with a pass it holds
// changes nothing.
func (s *Store) MarkPurged(b uint32, mark PurgeMark) error {
	covered, err := changevector.ParseVector(mark.ChangeVector)
	if err != nil {
		return fmt.Errorf("purge mark of bucket %d: %w", b, err)
	}
	if !s.reads.enter() {
		return ErrClosed
	}
	defer s.reads.leave()
	s.marksMu.Lock()
	defer s.marksMu.Unlock()
	cur := *s.marks.Load()
	for _, m := range cur[b] {
		if m.covered.Equal(covered) && maps.Equal(m.sentThrough, mark.SentThrough) {
			return nil
		}
	}
	kept := append(slices.Clone(cur[b]), &purgeMark{covered: covered, sentThrough: maps.Clone(mark.SentThrough)})
	kept = kept[max(0, len(kept)-maxPurgeMarks):]
	stored := make([]PurgeMark, len(kept))
	for i, m := range kept {
		stored[i] = PurgeMark{ChangeVector: m.covered.String(), SentThrough: m.sentThrough}
	}
	v, err := json.Marshal(stored)
	if err != nil {
		return fmt.Errorf("purge mark of bucket %d: %w", b, err)
	}
	// Not synced on its own: the purge's writes that follow are, and the
	// write-ahead log makes them durable in order.
	if err := s.db.Set(purgeMarkKey(b), v, pebble.NoSync); err != nil {
		return fmt.Errorf("purge mark of bucket %d: %w", b, err)
	}
	next := maps.Clone(cur)
	next[b] = kept
	s.marks.Store(&next)
	return nil
}

// purgeMarksOf returns bucket b's marks, if any.
func (s *Store) purgeMarksOf(b uint32) purgeMarks {
	return (*s.marks.Load())[b]
}

// loadPurgeMarks reads the marks at open.
func (s *Store) loadPurgeMarks() error {
	lower := []byte{prefixMeta, 'p', 'm', 'k', '/'}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: []byte{prefixMeta, 'p', 'm', 'k', '/' + 1}})
	if err != nil {
		return err
	}
	defer closeQuietly(it)
	marks := map[uint32]purgeMarks{}
	for ok := it.First(); ok; ok = it.Next() {
		if len(it.Key()) != len(lower)+4 {
			continue
		}
		b := binary.BigEndian.Uint32(it.Key()[len(lower):])
		var stored []PurgeMark
		if err := json.Unmarshal(it.Value(), &stored); err != nil {
			return fmt.Errorf("purge marks of bucket %d: %w", b, err)
		}
		for _, m := range stored {
			covered, err := changevector.ParseVector(m.ChangeVector)
			if err != nil {
				return fmt.Errorf("purge mark of bucket %d: %w", b, err)
			}
			marks[b] = append(marks[b], &purgeMark{covered: covered, sentThrough: m.SentThrough})
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("read purge marks: %w", err)
	}
	s.marks.Store(&marks)
	return nil
}
