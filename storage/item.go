package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Flags mark how an item came to be.
type Flags uint8

const (
	// FlagDeleted marks a tombstone: the document was deleted.
	FlagDeleted Flags = 1 << iota
	// FlagFromResharding marks an item written by a bucket transfer.
	FlagFromResharding
	// FlagArtificial marks a local tombstone left by a purge; it never
	// replicates and never reaches a consumer.
	FlagArtificial
)

// Document is one stored item: a live document or a tombstone.
type Document struct {
	// ID is the document id as the client spelled it.
	ID string
	// Collection is the document's collection ("@collection"); empty for
	// documents without one.
	Collection string
	// ChangeVector is the canonical text of the item's change vector.
	ChangeVector string
	// LastModified is when the item was last written.
	LastModified time.Time
	// Etag orders the item in this replica's changes feed.
	Etag uint64
	// Bucket is the item's bucket.
	Bucket uint32
	// Flags say whether the item is a tombstone and how it got here.
	Flags Flags
	// Body is the JSON object of the document without "@metadata"; nil for
	// a tombstone.
	Body []byte
	// Origin is, in the changes feed, the database id of the replica this
	// item came from by replication, stored as that replica holds it; empty
	// for anything written or changed here. A replicator does not send an
	// item back to its origin.
	Origin string

	// bodyElsewhere marks an item read without its body, which is kept
	// (with a copy of the metadata) under the item's doc key and is bodyLen
	// bytes long: a writer that only needs an item's metadata never reads
	// its body.
	bodyElsewhere bool
	bodyLen       int
}

// forCache returns d as a read from Pebble would: its own copy of the
// body, the time as stored (UTC, nanoseconds, no monotonic reading), no
// feed origin.
func (d *Document) forCache() *Document {
	cp := *d
	cp.Body = bytes.Clone(d.Body)
	cp.LastModified = time.Unix(0, d.LastModified.UnixNano()).UTC()
	cp.Origin = ""
	return &cp
}

// BodyUnread reports an item read without its body (see
// Store.ChangesLeavingBodies): a live document whose Body is nil here.
func (d *Document) BodyUnread() bool { return d.bodyElsewhere }

// Deleted reports whether the item is a tombstone.
func (d *Document) Deleted() bool { return d.Flags&FlagDeleted != 0 }

// Artificial reports a local tombstone left by a purge.
func (d *Document) Artificial() bool { return d.artificial() }

func (d *Document) artificial() bool { return d.Flags&FlagArtificial != 0 }

// Item formats: the first byte of an item's value.
const (
	// itemFormat holds the metadata and the body in one value.
	itemFormat = 1
	// itemFormatSplit holds the metadata and the body's length; the whole
	// item, in itemFormat, is under the item's doc key (see docKey).
	itemFormatSplit = 2
)

// bodyKeyMin is the smallest body kept under the doc key. Pebble separates
// values this large into blob files (see PebbleOptions), where reading one
// costs a second file read. A large item is therefore kept twice: its
// metadata under the item key, in the sstables, for writes, replication
// duplicates and purges, which need only the change vector; and whole
// under the doc key, so that a read of the document (a GET that misses the
// cache, the changes feed) is one lookup, as for a plain key-value store.
const bodyKeyMin = 256

var errCorruptItem = errors.New("corrupt item record")

// splitBody reports whether the item is stored whole under its doc key,
// with only its metadata under the item key.
func (d *Document) splitBody() bool { return !d.Deleted() && len(d.Body) >= bodyKeyMin }

// encode lays the item out as: format, flags, etag, last-modified (unix ns),
// id, collection, change vector (each length-prefixed), then the body, or,
// for an item kept whole under its doc key, the body's length.
func (d *Document) encode() []byte {
	return d.appendEncoded(make([]byte, 0, d.encodedLen()))
}

// encodedLen is the length of the item's encoding under its item key.
func (d *Document) encodedLen() int { return d.lenAs(d.splitBody()) }

// docValueLen is the length of a split item's value under its doc key: the
// whole item, body inline.
func (d *Document) docValueLen() int { return d.lenAs(false) }

func (d *Document) lenAs(split bool) int {
	var tmp [binary.MaxVarintLen64]byte
	n := 2 + binary.PutUvarint(tmp[:], d.Etag) + binary.PutVarint(tmp[:], d.LastModified.UnixNano())
	for _, s := range [...]string{d.ID, d.Collection, d.ChangeVector} {
		n += binary.PutUvarint(tmp[:], uint64(len(s))) + len(s)
	}
	if split {
		return n + binary.PutUvarint(tmp[:], uint64(len(d.Body)))
	}
	return n + len(d.Body)
}

// appendEncoded appends the item's encoding under its item key to b.
func (d *Document) appendEncoded(b []byte) []byte { return d.appendAs(b, d.splitBody()) }

// appendDocValue appends a split item's value under its doc key to b.
func (d *Document) appendDocValue(b []byte) []byte { return d.appendAs(b, false) }

func (d *Document) appendAs(b []byte, split bool) []byte {
	format := byte(itemFormat)
	if split {
		format = itemFormatSplit
	}
	b = append(b, format, byte(d.Flags))
	b = binary.AppendUvarint(b, d.Etag)
	b = binary.AppendVarint(b, d.LastModified.UnixNano())
	b = appendString(b, d.ID)
	b = appendString(b, d.Collection)
	b = appendString(b, d.ChangeVector)
	if split {
		return binary.AppendUvarint(b, uint64(len(d.Body)))
	}
	return append(b, d.Body...)
}

// bodyValueLen is what a split item's body adds to the sizes kept in
// bucket and replica statistics: the body and its etag. Sizes count an
// item's key, metadata and body, not the copy of the metadata under its doc
// key, so they read the same as before the doc key held one.
func (d *Document) bodyValueLen() int { return uvarintLen(d.Etag) + len(d.Body) }

// setBody fills in the body of an item read without it from the value v
// under its doc key. A value of another version (the item changed between
// the two reads) is errStaleBody.
func (d *Document) setBody(v []byte) error {
	etag, body, err := docValueBody(v)
	if err != nil {
		return fmt.Errorf("body of %q: %w", d.ID, err)
	}
	if etag != d.Etag {
		return errStaleBody
	}
	if len(body) != d.bodyLen {
		return fmt.Errorf("body of %q: %d bytes, metadata says %d: %w", d.ID, len(body), d.bodyLen, errCorruptItem)
	}
	d.Body = append([]byte(nil), body...)
	d.bodyElsewhere = false
	return nil
}

// docValueBody returns the etag and the body of the whole item v kept under
// a doc key, skipping the rest of its metadata.
func docValueBody(v []byte) (etag uint64, body []byte, err error) {
	if len(v) < 2 || v[0] != itemFormat || Flags(v[1])&FlagDeleted != 0 {
		return 0, nil, errCorruptItem
	}
	p := v[2:]
	etag, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, nil, fmt.Errorf("etag: %w", errCorruptItem)
	}
	p = p[n:]
	if _, n = binary.Varint(p); n <= 0 {
		return 0, nil, fmt.Errorf("last-modified: %w", errCorruptItem)
	}
	p = p[n:]
	for range 3 { // id, collection, change vector
		l, n := binary.Uvarint(p)
		if n <= 0 || uint64(len(p)-n) < l {
			return 0, nil, fmt.Errorf("string field: %w", errCorruptItem)
		}
		p = p[n+int(l):]
	}
	return etag, p, nil
}

// errStaleBody means a body belongs to another version of its item.
var errStaleBody = errors.New("body of another version")

func decodeItem(bucket uint32, v []byte) (*Document, error) {
	if len(v) < 2 || (v[0] != itemFormat && v[0] != itemFormatSplit) {
		return nil, errCorruptItem
	}
	d := &Document{Bucket: bucket, Flags: Flags(v[1])}
	p := v[2:]
	var n int
	if d.Etag, n = binary.Uvarint(p); n <= 0 {
		return nil, fmt.Errorf("etag: %w", errCorruptItem)
	}
	p = p[n:]
	ns, n := binary.Varint(p)
	if n <= 0 {
		return nil, fmt.Errorf("last-modified: %w", errCorruptItem)
	}
	d.LastModified = time.Unix(0, ns).UTC()
	p = p[n:]
	var err error
	if d.ID, p, err = readString(p); err != nil {
		return nil, err
	}
	if d.Collection, p, err = readString(p); err != nil {
		return nil, err
	}
	if d.ChangeVector, p, err = readString(p); err != nil {
		return nil, err
	}
	switch {
	case v[0] == itemFormatSplit:
		l, n := binary.Uvarint(p)
		if n <= 0 || n != len(p) || d.Deleted() {
			return nil, fmt.Errorf("body length: %w", errCorruptItem)
		}
		d.bodyElsewhere, d.bodyLen = true, int(l)
	case !d.Deleted():
		d.Body = append([]byte(nil), p...)
	}
	return d, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func readString(p []byte) (string, []byte, error) {
	l, n := binary.Uvarint(p)
	if n <= 0 || uint64(len(p)-n) < l {
		return "", nil, fmt.Errorf("string field: %w", errCorruptItem)
	}
	return string(p[n : n+int(l)]), p[n+int(l):], nil
}

// BucketStats summarises one bucket of a replica.
type BucketStats struct {
	// Bucket is the bucket number.
	Bucket uint32
	// DocumentsCount counts live documents.
	DocumentsCount int64
	// TombstonesCount counts tombstones.
	TombstonesCount int64
	// Size is the stored bytes of all items (keys and values).
	Size int64
	// ChangeVector merges the version of every item ever written to the
	// bucket on this replica; it never goes backwards.
	ChangeVector string
}

func (s *BucketStats) encode() []byte {
	b := make([]byte, 0, 16+len(s.ChangeVector))
	b = binary.AppendVarint(b, s.DocumentsCount)
	b = binary.AppendVarint(b, s.TombstonesCount)
	b = binary.AppendVarint(b, s.Size)
	return append(b, s.ChangeVector...)
}

func decodeBucketStats(bucket uint32, v []byte) (BucketStats, error) {
	s := BucketStats{Bucket: bucket}
	for _, f := range []*int64{&s.DocumentsCount, &s.TombstonesCount, &s.Size} {
		x, n := binary.Varint(v)
		if n <= 0 {
			return s, fmt.Errorf("bucket %d stats: %w", bucket, errCorruptItem)
		}
		*f, v = x, v[n:]
	}
	s.ChangeVector = string(v)
	return s, nil
}
