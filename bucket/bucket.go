// Package bucket maps document ids to buckets and buckets to shards.
//
// A sharded database does not assign documents to shards directly. Every id
// hashes to one of Count (2^20) buckets, and the database record holds a
// sorted list of bucket ranges saying which shard owns each bucket. Moving
// data between shards then means moving whole buckets and flipping one range
// entry, without rehashing any id. Everything that belongs to a document
// (tombstones, revisions, attachments, counters) lives in its bucket.
//
// An id may be anchored: when it has a '$' at an index > 0, only the text
// after the last '$' is hashed, so "orders/7$users/4" shares a bucket (and
// therefore a shard) with "users/4".
//
// Ranges values are treated as immutable: Move and MoveRange return new
// slices, so a Ranges taken from a database record can be shared freely.
package bucket

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Count is the number of buckets.
const Count = 1 << 20

// MaxID is the highest bucket number.
const MaxID = Count - 1

// MaxIDLength is the maximum length of a document id, in bytes of its
// shortest spelling (see ShortestLength). Ids are case-insensitive, and a
// rune's cases can differ in length ('Ⱥ' takes 2 bytes, its lower case
// 'ⱥ' 3), so a limit on the bytes as sent would accept one spelling of a
// document and refuse another. Measured on the shortest spelling, every
// spelling of a document is accepted or refused alike, and the documents
// that can exist are those that could under a limit of MaxIDLength bytes
// as sent: the shortest spelling is one such.
const MaxIDLength = 512

// MaxIDInputLength bounds the bytes of an id as sent, checked before any
// rune is looked at. No spelling of an id within MaxIDLength is longer: a
// rune takes at most 4 bytes, and at least 1 in any spelling.
const MaxIDInputLength = 4 * MaxIDLength

// Sentinel errors. ValidateID and Ranges.Validate wrap them with details;
// test for them with errors.Is.
var (
	// ErrEmptyID means the id is the empty string.
	ErrEmptyID = errors.New("bucket: id is empty")
	// ErrIDTooLong means the id's shortest spelling is longer than
	// MaxIDLength bytes, or the id as sent longer than MaxIDInputLength.
	ErrIDTooLong = errors.New("bucket: id is too long")
	// ErrIDNotUTF8 means the id is not valid UTF-8.
	ErrIDNotUTF8 = errors.New("bucket: id is not valid UTF-8")
	// ErrIDControlChar means the id contains a control character.
	ErrIDControlChar = errors.New("bucket: id contains a control character")
	// ErrIDEndsWithDollar means the id ends with '$', so its anchor would
	// be empty.
	ErrIDEndsWithDollar = errors.New("bucket: id ends with '$'")
	// ErrInvalidRanges means a Ranges value breaks an invariant.
	ErrInvalidRanges = errors.New("bucket: invalid bucket ranges")
)

// ForID returns the bucket of a document id: XXHash64 (seed 0) of the UTF-8
// bytes of strings.ToLower of the hashed text, mod Count. The hashed text is
// the whole id, or, when the id has a '$' at an index > 0, the text after
// the last '$'. No Unicode normalization is applied. ForID accepts any
// string; use ValidateID to reject bad ids first.
func ForID(id string) uint32 {
	if i := strings.LastIndexByte(id, '$'); i > 0 {
		id = id[i+1:]
	}
	return uint32(xxhash.Sum64String(strings.ToLower(id)) % Count)
}

// ValidateID reports whether id is acceptable as a document id: not empty,
// within the length limit (see CheckIDLength), valid UTF-8 without control
// characters, and not ending in '$'. It accepts or refuses every spelling
// of one document (every UTF-8 string with the same strings.ToLower) alike.
// The error wraps one of ErrEmptyID, ErrIDTooLong, ErrIDNotUTF8,
// ErrIDControlChar or ErrIDEndsWithDollar.
func ValidateID(id string) error {
	if id == "" {
		return ErrEmptyID
	}
	if err := CheckIDLength(id); err != nil {
		return err
	}
	for i, r := range id {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(id[i:]); size == 1 {
				return fmt.Errorf("%w: bad byte 0x%02x at offset %d", ErrIDNotUTF8, id[i], i)
			}
		}
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %U at offset %d", ErrIDControlChar, r, i)
		}
	}
	if strings.HasSuffix(id, "$") {
		return fmt.Errorf("%w: %q (an anchored id needs text after the last '$')", ErrIDEndsWithDollar, id)
	}
	return nil
}

// CheckIDLength reports whether s is within an id's length limit:
// ShortestLength(s) <= MaxIDLength, and len(s) <= MaxIDInputLength, which
// is checked first, so a huge input costs nothing. An s of at most
// MaxIDLength bytes always passes. The error wraps ErrIDTooLong and names
// what was measured and the limit.
func CheckIDLength(s string) error {
	switch {
	case len(s) <= MaxIDLength:
		return nil
	case len(s) > MaxIDInputLength:
		return fmt.Errorf("%w: %d bytes as sent (max %d as sent, and %d in the id's shortest spelling)",
			ErrIDTooLong, len(s), MaxIDInputLength, MaxIDLength)
	}
	n := ShortestLength(s)
	switch {
	case n <= MaxIDLength:
		return nil
	case n == len(s):
		return fmt.Errorf("%w: %d bytes in its shortest spelling (max %d)", ErrIDTooLong, n, MaxIDLength)
	default:
		return fmt.Errorf("%w: %d bytes in its shortest spelling, %d as sent (max %d in the shortest spelling)",
			ErrIDTooLong, n, len(s), MaxIDLength)
	}
}

// ShortestLength returns the length in bytes of the shortest spelling of
// s: of the shortest string whose strings.ToLower is strings.ToLower(s),
// which is what names a document. Lower-casing maps rune by rune, so that
// is the sum, over the runes of strings.ToLower(s), of the smallest UTF-8
// length of a rune that lower-cases to it. A byte that is not UTF-8 counts
// as one.
func ShortestLength(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r < utf8.RuneSelf || size == 1 {
			n++ // ASCII, or a byte that is not UTF-8
			continue
		}
		n += shortestRuneLength(unicode.ToLower(r))
	}
	return n
}

// shortestRuneLength returns the smallest UTF-8 length of a rune whose
// unicode.ToLower is c, a lower-cased rune. Such runes are c itself and
// members of c's case-fold orbit (unicode.SimpleFold enumerates it):
// TestShortestRuneLengthIsExact checks that against every rune. Only 'ⱥ'
// and 'ⱦ' (3 bytes; their upper cases 'Ⱥ' and 'Ⱦ' take 2) have a shorter
// spelling in Unicode 15.0.0.
func shortestRuneLength(c rune) int {
	m := utf8.RuneLen(c)
	for r := unicode.SimpleFold(c); r != c; r = unicode.SimpleFold(r) {
		if l := utf8.RuneLen(r); l < m && unicode.ToLower(r) == c {
			m = l
		}
	}
	return m
}

// Range is one entry of a database record's bucket ranges: it runs from
// BucketRangeStart to the next entry's start - 1 (the last entry to MaxID),
// and ShardNumber owns those buckets.
type Range struct {
	BucketRangeStart uint32 `json:"BucketRangeStart"`
	ShardNumber      int    `json:"ShardNumber"`
}

// Ranges is a database record's bucket ranges, sorted by BucketRangeStart.
// A valid Ranges (see Validate) covers every bucket exactly once and is
// minimal: no two adjacent entries name the same shard.
type Ranges []Range

// EvenSplit returns the initial split of all buckets over shards 0..shards-1:
// entry i starts at i*(Count/shards). It returns nil if shards < 1 or
// shards > Count; callers validate the shard count.
func EvenSplit(shards int) Ranges {
	if shards < 1 || shards > Count {
		return nil
	}
	step := uint32(Count / shards)
	r := make(Ranges, shards)
	for i := range r {
		r[i] = Range{BucketRangeStart: uint32(i) * step, ShardNumber: i}
	}
	return r
}

// ShardOf returns the shard owning bucket b, or -1 if r is empty. r must be
// valid; a b above MaxID falls in the last entry.
func (r Ranges) ShardOf(b uint32) int {
	i := r.Index(b)
	if i < 0 {
		return -1
	}
	return r[i].ShardNumber
}

// Index returns the index of the entry containing b, or -1 if r is empty.
func (r Ranges) Index(b uint32) int {
	return sort.Search(len(r), func(i int) bool { return r[i].BucketRangeStart > b }) - 1
}

// Validate checks the invariants: r is non-empty, the first start is 0,
// starts strictly increase and are below Count, shard numbers are >= 0 and
// no two adjacent entries name the same shard. The error wraps
// ErrInvalidRanges.
func (r Ranges) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRanges, fmt.Sprintf(format, args...))
	}
	if len(r) == 0 {
		return bad("no entries")
	}
	if r[0].BucketRangeStart != 0 {
		return bad("first entry starts at %d, not 0", r[0].BucketRangeStart)
	}
	for i, e := range r {
		if e.BucketRangeStart >= Count {
			return bad("entry %d starts at %d, beyond the last bucket %d", i, e.BucketRangeStart, MaxID)
		}
		if e.ShardNumber < 0 {
			return bad("entry %d has negative shard %d", i, e.ShardNumber)
		}
		if i == 0 {
			continue
		}
		if p := r[i-1]; e.BucketRangeStart <= p.BucketRangeStart {
			return bad("entry %d starts at %d, not after entry %d's start %d", i, e.BucketRangeStart, i-1, p.BucketRangeStart)
		} else if e.ShardNumber == p.ShardNumber {
			return bad("entries %d and %d are adjacent and both name shard %d", i-1, i, e.ShardNumber)
		}
	}
	return nil
}

// Move returns new ranges in which bucket b belongs to shard; see MoveRange.
func (r Ranges) Move(b uint32, shard int) Ranges {
	return r.MoveRange(b, b, shard)
}

// MoveRange returns new ranges in which the buckets from..to (inclusive)
// belong to shard and every other bucket keeps its owner. It never modifies
// r; the result is minimal (adjacent entries naming the same shard are
// merged), so it is a copy of r if shard already owns them all. r must be
// valid. It panics if from > to, to > MaxID or shard < 0.
func (r Ranges) MoveRange(from, to uint32, shard int) Ranges {
	return r.MoveSpans([]Span{{From: from, To: to}}, shard)
}

// Span is an inclusive range of buckets, From <= To.
type Span struct {
	From uint32 `json:"From"`
	To   uint32 `json:"To"`
}

// MoveSpans returns new ranges in which every bucket of spans belongs to
// shard and every other bucket keeps its owner: the same as MoveRange
// applied to each span in turn, in one pass over r. The result is minimal
// (adjacent entries naming the same shard are merged). A bulk flip of
// thousands of spans over a record fragmented by a large move (tens of
// thousands of entries) would otherwise copy the ranges once per span,
// holding the state's lock for a large part of a second on every node.
// Spans may come in any order and overlap. It never modifies r or spans;
// r must be valid. It panics on a span with From > To or To > MaxID, or
// if shard < 0.
func (r Ranges) MoveSpans(spans []Span, shard int) Ranges {
	if shard < 0 {
		panic(fmt.Sprintf("bucket: MoveSpans to shard %d", shard))
	}
	for _, sp := range spans {
		if sp.From > sp.To || sp.To > MaxID {
			panic(fmt.Sprintf("bucket: MoveSpans(%d-%d): need from <= to <= %d", sp.From, sp.To, MaxID))
		}
	}
	merged := slices.Clone(spans)
	slices.SortFunc(merged, func(a, b Span) int { return cmp.Compare(a.From, b.From) })
	k := 0
	for _, sp := range merged {
		// Join a span that overlaps or touches the previous one.
		if k > 0 && uint64(sp.From) <= uint64(merged[k-1].To)+1 {
			merged[k-1].To = max(merged[k-1].To, sp.To)
			continue
		}
		merged[k] = sp
		k++
	}
	merged = merged[:k]
	out := make(Ranges, 0, len(r)+2*len(merged))
	add := func(e Range) {
		if n := len(out); n > 0 && out[n-1].ShardNumber == e.ShardNumber {
			return
		}
		out = append(out, e)
	}
	i := 0 // the next entry of r to copy
	for _, sp := range merged {
		for ; i < len(r) && r[i].BucketRangeStart < sp.From; i++ {
			add(r[i])
		}
		add(Range{BucketRangeStart: sp.From, ShardNumber: shard})
		if sp.To == MaxID {
			return out
		}
		// Skip the entries that start within the span; the last one
		// skipped (or the one before the span) owns the bucket after it.
		for ; i < len(r) && r[i].BucketRangeStart <= sp.To+1; i++ {
		}
		add(Range{BucketRangeStart: sp.To + 1, ShardNumber: r[i-1].ShardNumber})
	}
	for ; i < len(r); i++ {
		add(r[i])
	}
	return out
}

// Span returns the inclusive bucket span of entry i. It panics if i is out
// of range.
func (r Ranges) Span(i int) (from, to uint32) {
	from, to = r[i].BucketRangeStart, MaxID
	if i+1 < len(r) {
		to = r[i+1].BucketRangeStart - 1
	}
	return from, to
}

// Shards returns the distinct shard numbers present in r, sorted.
func (r Ranges) Shards() []int {
	s := make([]int, 0, len(r))
	for _, e := range r {
		s = append(s, e.ShardNumber)
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// BucketsOf returns the number of buckets shard owns.
func (r Ranges) BucketsOf(shard int) int {
	n := 0
	for i, e := range r {
		if e.ShardNumber == shard {
			from, to := r.Span(i)
			n += int(to-from) + 1
		}
	}
	return n
}

// Lost returns the first bucket that r gives shard and next does not, if
// any: what a shard no longer owns once a record with next replaced one
// with r. Both must be valid.
func (r Ranges) Lost(next Ranges, shard int) (uint32, bool) {
	i, j := 0, 0
	for i < len(r) && j < len(next) {
		if r[i].ShardNumber == shard && next[j].ShardNumber != shard {
			return max(r[i].BucketRangeStart, next[j].BucketRangeStart), true
		}
		// Step past whichever entry ends first, or both.
		ri, nj := i+1 < len(r), j+1 < len(next)
		switch {
		case ri && nj && r[i+1].BucketRangeStart == next[j+1].BucketRangeStart:
			i, j = i+1, j+1
		case ri && (!nj || r[i+1].BucketRangeStart < next[j+1].BucketRangeStart):
			i++
		case nj:
			j++
		default:
			return 0, false
		}
	}
	return 0, false
}
