package bench

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
)

// The YCSB record: 10 fields field0..field9 of 100 random characters each
// (YCSB's defaults), plus the numeric key number "Key" that YCSB E's range
// queries select on.
const (
	fieldCount  = 10
	fieldLength = 100
	collection  = "usertable"
)

// recordAlphabet holds 64 JSON-safe characters, so 6 random bits pick one.
const recordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// keyName is YCSB's key name for key number k with hashed insert order:
// "user" followed by the FNV hash of k.
func keyName(k int64) string { return "user" + strconv.FormatInt(fnvHash64(k), 10) }

// appendRecord appends the JSON record of key number k with fresh random
// field values. With meta, it carries shardnode's collection metadata
// ("@metadata" is not counted as payload: see recordBytes).
func appendRecord(dst []byte, r *rand.Rand, k int64, meta bool) []byte {
	dst = append(dst, '{')
	if meta {
		dst = append(dst, `"@metadata":{"@collection":"`+collection+`"},`...)
	}
	dst = append(dst, `"Key":`...)
	dst = strconv.AppendInt(dst, k, 10)
	for f := range fieldCount {
		dst = append(dst, `,"field`...)
		dst = strconv.AppendInt(dst, int64(f), 10)
		dst = append(dst, `":"`...)
		dst = appendRandom(dst, r, fieldLength)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}

// metaLen is the length of the "@metadata" member appendRecord adds.
const metaLen = len(`"@metadata":{"@collection":"` + collection + `"},`)

// recordBytes is the payload size of a record appendRecord made: its
// length without the metadata member.
func recordBytes(rec []byte, meta bool) int {
	if meta {
		return len(rec) - metaLen
	}
	return len(rec)
}

// appendRandom appends n random characters of recordAlphabet.
func appendRandom(dst []byte, r *rand.Rand, n int) []byte {
	for n > 0 {
		v := r.Uint64()
		for i := 0; i < 10 && n > 0; i++ {
			dst = append(dst, recordAlphabet[v&63])
			v >>= 6
			n--
		}
	}
	return dst
}

// pebbleKey is the raw Pebble baseline's key of key number k: big-endian,
// so key order is number order and YCSB E's scans are range scans.
func pebbleKey(k int64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(k)) }

// newRand returns a random source for client i of a workload, distinct per
// client and per run.
func newRand(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(i)+1))
}
