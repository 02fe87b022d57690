package storage

import (
	"encoding/binary"
	"strings"
)

// Key space of one replica. The first byte names the family; families sort
// in this order, which keeps every family a contiguous range.
const (
	prefixMeta     byte = 0x01 // meta/<name> → value
	prefixItem     byte = 0x02 // item/<bucket BE32><lower id> → encoded item
	prefixEtag     byte = 0x03 // etag/<etag BE64> → [0x01 <len> <origin>] <bucket BE32><lower id> (see feedRef)
	prefixBktStat  byte = 0x04 // bucketstat/<bucket BE32> → encoded bucket stats
	prefixConflict byte = 0x05 // conflict/<bucket BE32><lower id>\x00<etag BE64> → JSON Conflict
	prefixOldBody  byte = 0x06 // retired: body/<bucket BE32><lower id> → <etag uvarint><body>; see upgradeBodies
	prefixDoc      byte = 0x07 // doc/<bucket BE32><lower id> → the whole item, body inline, of a split item
)

// docKey is the key under which the item under itemKey k is kept whole when
// its body is large (see bodyKeyMin).
func docKey(k []byte) []byte { return familyKey(prefixDoc, k) }

// familyKey is item key k moved to another family.
func familyKey(family byte, k []byte) []byte {
	b := make([]byte, len(k))
	b[0] = family
	copy(b[1:], k[1:])
	return b
}

// progressKey holds how far another replica's feed was applied here.
func progressKey(source string) []byte {
	return append([]byte{prefixMeta, 'r', 'e', 'p', 'l', '/'}, source...)
}

var (
	metaDatabaseID = []byte{prefixMeta, 'd', 'b', 'i', 'd'}
	metaCounters   = []byte{prefixMeta, 'c', 'n', 't', 's'}
	// metaStatsCheckpoint holds the etag (BE64) that the bucket statistics
	// keys are complete through (see writeCheckpoint).
	metaStatsCheckpoint = []byte{prefixMeta, 's', 't', 'c', 'p'}
)

// itemKey is the key of the document or tombstone with the given id. Ids are
// case-insensitive, so the key holds the lower-cased id.
func itemKey(bucket uint32, id string) []byte {
	lower := strings.ToLower(id)
	k := make([]byte, 0, 5+len(lower))
	k = append(k, prefixItem)
	k = binary.BigEndian.AppendUint32(k, bucket)
	return append(k, lower...)
}

// bucketPrefix bounds all items of one bucket: [lower, upper).
func bucketBounds(from, to uint32) (lower, upper []byte) {
	lower = binary.BigEndian.AppendUint32([]byte{prefixItem}, from)
	if to >= 1<<20-1 { // the last bucket: run to the end of the family
		return lower, []byte{prefixItem + 1}
	}
	upper = binary.BigEndian.AppendUint32([]byte{prefixItem}, to+1)
	return lower, upper
}

func etagKey(etag uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixEtag}, etag)
}

func bucketStatKey(bucket uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{prefixBktStat}, bucket)
}

// A feed entry's value names its item: the item key without its prefix
// (bucket BE32, whose first byte is always 0 since buckets are below 2^20,
// then the id). An item that came by replication unchanged is tagged with
// its origin: feedTagged, the origin's length (one byte), the origin, then
// the same reference.
const feedTagged byte = 0x01

func feedRef(origin string, ref []byte) []byte {
	if origin == "" || len(origin) > 255 {
		return ref
	}
	v := make([]byte, 0, 2+len(origin)+len(ref))
	v = append(v, feedTagged, byte(len(origin)))
	return append(append(v, origin...), ref...)
}

func parseFeedRef(v []byte) (origin string, ref []byte, err error) {
	if len(v) > 0 && v[0] == feedTagged {
		if len(v) < 2 || len(v) < 2+int(v[1]) {
			return "", nil, errCorruptItem
		}
		origin, v = string(v[2:2+int(v[1])]), v[2+int(v[1]):]
	}
	if len(v) < 4 || v[0] != 0 {
		return "", nil, errCorruptItem
	}
	return origin, v, nil
}
