package storage

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Conflict is the losing version of a replication conflict, kept for
// inspection after the replicas resolved it to the winner.
type Conflict struct {
	// ID is the document id.
	ID string `json:"Id"`
	// Bucket is the document's bucket.
	Bucket uint32 `json:"Bucket"`
	// ChangeVector is the losing version's change vector.
	ChangeVector string `json:"ChangeVector"`
	// LastModified is when the losing version was written.
	LastModified time.Time `json:"LastModified"`
	// Deleted reports that the losing version was a tombstone.
	Deleted bool `json:"Deleted"`
	// Collection is the losing version's collection.
	Collection string `json:"Collection,omitempty"`
	// Document is the losing version's body (null for a tombstone).
	Document json.RawMessage `json:"Document"`
	// ResolvedTo is the change vector the replicas converged to.
	ResolvedTo string `json:"ResolvedTo"`
}

type conflictEntry struct {
	loser    *Document
	winnerCV string
}

func (c conflictEntry) encode() []byte {
	body := json.RawMessage("null")
	if !c.loser.Deleted() && len(c.loser.Body) > 0 {
		body = c.loser.Body
	}
	b, _ := json.Marshal(Conflict{ID: c.loser.ID, Bucket: c.loser.Bucket, ChangeVector: c.loser.ChangeVector, LastModified: c.loser.LastModified,
		Deleted: c.loser.Deleted(), Collection: c.loser.Collection, Document: body, ResolvedTo: c.winnerCV})
	return b
}

// conflictKey orders conflicts by bucket and id, then by resolution.
func conflictKey(bucket uint32, id string, etag uint64) []byte {
	k := binary.BigEndian.AppendUint32([]byte{prefixConflict}, bucket)
	k = append(k, strings.ToLower(id)...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, etag)
}

// Conflicts returns up to limit recorded conflict losers, in bucket and id
// order.
func (s *Store) Conflicts(limit int) ([]Conflict, error) {
	if !s.reads.enter() {
		return nil, ErrClosed
	}
	defer s.reads.leave()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixConflict}, UpperBound: []byte{prefixConflict + 1}})
	if err != nil {
		return nil, fmt.Errorf("conflicts: %w", err)
	}
	defer closeQuietly(it)
	out := []Conflict{}
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		var c Conflict
		if err := json.Unmarshal(it.Value(), &c); err != nil {
			return nil, fmt.Errorf("conflict record: %w", err)
		}
		out = append(out, c)
	}
	return out, it.Error()
}

// ReplicationProgresses returns how far this replica applied each other
// replica's feed, by that replica's database id.
func (s *Store) ReplicationProgresses() (map[string]uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	return maps.Clone(s.progress), nil
}

// loadProgress reads every replication progress key, at open.
func (s *Store) loadProgress() (map[string]uint64, error) {
	prefix := progressKey("")
	upper := append(slices.Clone(prefix[:len(prefix)-1]), prefix[len(prefix)-1]+1)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("replication progress: %w", err)
	}
	out := map[string]uint64{}
	for it.First(); it.Valid(); it.Next() {
		if v := it.Value(); len(v) == 8 {
			out[string(it.Key()[len(prefix):])] = binary.BigEndian.Uint64(v)
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("replication progress: %w", err)
	}
	return out, nil
}

// ReplicationProgress is the last etag of source's feed (a replica's
// database id) that this replica applied.
func (s *Store) ReplicationProgress(source string) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.progress[source]
}
