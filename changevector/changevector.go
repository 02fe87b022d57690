// Package changevector parses, formats, compares and merges change vectors.
//
// A change vector (CV) records the causal history of a document (or of a
// database replica) as one entry per database id: "TAG:ETAG-DBID", where TAG
// is the node tag of the replica that wrote it, ETAG is the last etag seen from
// that replica and DBID is the replica's database id. Entries are joined by
// ", " and sorted by DBID, e.g. "A:3-dbid1, B:7-dbid2". Comparing two CVs
// tells whether one causally includes the other (Newer/Older/Equal) or whether
// they were written concurrently (Conflict); merging takes the per-database
// maximum. Replication, conflict detection, optimistic concurrency and purges
// are all built on these two operations.
//
// Sharding adds composite CVs, written "order|version" (see DESIGN.md §2):
// the version part is the document's causal history and drives conflict
// checks and If-Match, while the order part is a fresh local entry (plus a
// "MOVE:<migrationIndex>-<databaseId>" marker) on the shard that now holds a
// moved item, and drives tailing consumers. A plain CV is both its order and
// its version. MOVE entries never leave the database: external replication
// removes them with StripMove.
//
// Vector and ChangeVector values are treated as immutable: no function in
// this package modifies its arguments, and results may share memory with them
// (and, after parsing, with the parsed string).
package changevector

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MoveTag is the tag of the marker entry added to the order part of an item
// moved between shards; its etag is the migration index.
const MoveTag = "MOVE"

// Limits of the entry grammar.
const (
	maxTagLen  = 4
	maxDBIDLen = 64
)

// Entry is one TAG:ETAG-DBID element. Tag is a node tag (uppercase letters
// A-Z, 1..4 chars) or the literal "MOVE" marker; DBID is a database id: 1..64
// chars of base64 alphabet [A-Za-z0-9+/_-] (real ones are 22 chars).
type Entry struct {
	Tag  string
	Etag uint64
	DBID string
}

// String formats e as "TAG:ETAG-DBID".
func (e Entry) String() string {
	var b strings.Builder
	b.Grow(e.size())
	e.writeTo(&b)
	return b.String()
}

// Validate reports whether e's tag and database id follow the grammar.
func (e Entry) Validate() error {
	if msg := checkTag(e.Tag); msg != "" {
		return fmt.Errorf("change vector entry %q: %s", e.String(), msg)
	}
	if msg := checkDBID(e.DBID); msg != "" {
		return fmt.Errorf("change vector entry %q: %s", e.String(), msg)
	}
	return nil
}

func (e Entry) size() int {
	return len(e.Tag) + 1 + digits(e.Etag) + 1 + len(e.DBID)
}

func (e Entry) writeTo(b *strings.Builder) {
	var buf [20]byte
	b.WriteString(e.Tag)
	b.WriteByte(':')
	b.Write(strconv.AppendUint(buf[:0], e.Etag, 10))
	b.WriteByte('-')
	b.WriteString(e.DBID)
}

// Vector is a plain change vector: entries sorted by DBID, at most one per
// DBID. Nil/empty is the empty vector. Functions in this package return nil
// rather than a non-nil empty Vector.
type Vector []Entry

// Relation is the causal relation between two change vectors.
type Relation int

// The possible results of Compare.
const (
	Equal    Relation = iota // same etag for every database id
	Newer                    // a strictly dominates b
	Older                    // b strictly dominates a
	Conflict                 // concurrent: each has an etag the other lacks
)

// String returns "Equal", "Newer", "Older" or "Conflict".
func (r Relation) String() string {
	switch r {
	case Equal:
		return "Equal"
	case Newer:
		return "Newer"
	case Older:
		return "Older"
	case Conflict:
		return "Conflict"
	}
	return "Relation(" + strconv.Itoa(int(r)) + ")"
}

// ParseError describes why a change vector string could not be parsed.
type ParseError struct {
	Input string // the string given to Parse or ParseVector
	Part  string // "order" or "version" for a composite change vector, else ""
	Entry int    // 1-based index of the bad entry within its part, or 0
	Text  string // the bad entry, trimmed (when Entry > 0)
	Msg   string // what is wrong
}

// Error formats the error as
// `parse change vector "INPUT": [PART part: ][entry N "TEXT": ]MSG`.
func (e *ParseError) Error() string {
	in := e.Input
	if len(in) > 200 {
		in = in[:200] + "..."
	}
	s := "parse change vector " + strconv.Quote(in) + ": "
	if e.Part != "" {
		s += e.Part + " part: "
	}
	if e.Entry > 0 {
		s += "entry " + strconv.Itoa(e.Entry) + " " + strconv.Quote(e.Text) + ": "
	}
	return s + e.Msg
}

// ParseVector parses a plain change vector such as "A:3-dbid1, B:7-dbid2".
// Any ASCII whitespace is accepted around commas and at either end. Unsorted
// input is sorted by DBID; a duplicate DBID is an error, as is a '|' (use
// Parse for composite change vectors). An empty or all-whitespace string is
// the empty vector. The etag must be a canonical decimal uint64: no sign, no
// leading zeros (except "0" itself), no overflow. The returned entries share
// memory with s.
func ParseVector(s string) (Vector, error) {
	if i := strings.IndexByte(s, '|'); i >= 0 {
		return nil, &ParseError{Input: s, Msg: "unexpected '|' at offset " + strconv.Itoa(i) + " in plain change vector"}
	}
	v, err := parseVector(s)
	if err != nil {
		err.Input = s
		return nil, err
	}
	return v, nil
}

func parseVector(s string) (Vector, *ParseError) {
	s = trimSpace(s)
	if s == "" {
		return nil, nil
	}
	v := make(Vector, 0, strings.Count(s, ",")+1)
	for n := 1; ; n++ {
		text, rest, more := strings.Cut(s, ",")
		text = trimSpace(text)
		e, msg := parseEntry(text)
		if msg != "" {
			return nil, &ParseError{Entry: n, Text: text, Msg: msg}
		}
		v = append(v, e)
		if !more {
			break
		}
		s = rest
	}
	if !slices.IsSortedFunc(v, cmpDBID) {
		slices.SortFunc(v, cmpDBID)
	}
	for i := 1; i < len(v); i++ {
		if v[i].DBID == v[i-1].DBID {
			return nil, &ParseError{Msg: "duplicate database id " + strconv.Quote(v[i].DBID)}
		}
	}
	return v, nil
}

// parseEntry parses one trimmed "TAG:ETAG-DBID"; msg is "" on success.
func parseEntry(s string) (e Entry, msg string) {
	if s == "" {
		return e, "empty entry"
	}
	tag, rest, ok := strings.Cut(s, ":")
	if !ok {
		return e, "missing ':'"
	}
	if msg := checkTag(tag); msg != "" {
		return e, msg
	}
	etag, dbid, ok := strings.Cut(rest, "-")
	if !ok {
		return e, "missing '-' between etag and database id"
	}
	n, msg := parseEtag(etag)
	if msg != "" {
		return e, msg
	}
	if msg := checkDBID(dbid); msg != "" {
		return e, msg
	}
	return Entry{Tag: tag, Etag: n, DBID: dbid}, ""
}

func parseEtag(s string) (uint64, string) {
	switch {
	case s == "":
		return 0, "empty etag"
	case len(s) > 1 && s[0] == '0':
		return 0, "etag " + strconv.Quote(s) + " has a leading zero"
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d := uint64(s[i]) - '0'
		if d > 9 {
			return 0, "etag " + strconv.Quote(s) + " is not a decimal number"
		}
		if n > (1<<64-1-d)/10 {
			return 0, "etag " + strconv.Quote(s) + " overflows uint64"
		}
		n = n*10 + d
	}
	return n, ""
}

func checkTag(s string) string {
	if len(s) == 0 || len(s) > maxTagLen {
		return "tag " + strconv.Quote(s) + " must be 1-4 letters A-Z"
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return "tag " + strconv.Quote(s) + " must be 1-4 letters A-Z"
		}
	}
	return ""
}

var dbidChar = func() (t [256]bool) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c], t[c+'a'-'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['+'], t['/'], t['_'], t['-'] = true, true, true, true
	return t
}()

// CheckDatabaseID returns what is wrong with s as a database id in change
// vectors, or "": 1 to 64 of [A-Za-z0-9+/_-].
func CheckDatabaseID(s string) string { return checkDBID(s) }

func checkDBID(s string) string {
	if len(s) == 0 || len(s) > maxDBIDLen {
		return "database id " + strconv.Quote(s) + " must be 1-64 characters"
	}
	for i := 0; i < len(s); i++ {
		if !dbidChar[s[i]] {
			return "database id " + strconv.Quote(s) + " has a character outside [A-Za-z0-9+/_-]"
		}
	}
	return ""
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func trimSpace(s string) string {
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func cmpDBID(a, b Entry) int { return strings.Compare(a.DBID, b.DBID) }

func digits(n uint64) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}

// Validate reports whether v is well formed: every entry follows the grammar,
// and entries are sorted by DBID with no DBID repeated. Vectors from
// ParseVector, Merge and With are always valid; use Validate on vectors built
// by hand or decoded from elsewhere before relying on Compare or Merge.
func (v Vector) Validate() error {
	for i, e := range v {
		if err := e.Validate(); err != nil {
			return err
		}
		if i > 0 && v[i-1].DBID >= e.DBID {
			return fmt.Errorf("change vector %q: entries not sorted by database id or database id repeated at entry %d", v.String(), i+1)
		}
	}
	return nil
}

// String returns the canonical form: entries in order (sorted by DBID for a
// valid vector), joined by ", ". The empty vector formats as "".
func (v Vector) String() string {
	if len(v) == 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(v.size())
	v.writeTo(&b)
	return b.String()
}

func (v Vector) size() int {
	n := 2 * (len(v) - 1)
	for _, e := range v {
		n += e.size()
	}
	return n
}

func (v Vector) writeTo(b *strings.Builder) {
	for i, e := range v {
		if i > 0 {
			b.WriteString(", ")
		}
		e.writeTo(b)
	}
}

// Equal reports whether v and o have identical entries, tags included (that
// is, the same canonical text). For causal equality, which ignores tags and
// treats a missing entry as etag 0, use Compare.
func (v Vector) Equal(o Vector) bool {
	return slices.Equal(v, o)
}

// Compare returns the causal relation of a to b, by DBID (tags are ignored);
// a missing entry counts as etag 0.
func Compare(a, b Vector) Relation {
	aAhead, bAhead := false, false
	for i, j := 0, 0; i < len(a) || j < len(b); {
		var ea, eb uint64
		switch {
		case j == len(b) || (i < len(a) && a[i].DBID < b[j].DBID):
			ea = a[i].Etag
			i++
		case i == len(a) || b[j].DBID < a[i].DBID:
			eb = b[j].Etag
			j++
		default:
			ea, eb = a[i].Etag, b[j].Etag
			i++
			j++
		}
		if ea > eb {
			aAhead = true
		} else if eb > ea {
			bAhead = true
		}
		if aAhead && bAhead {
			return Conflict
		}
	}
	switch {
	case aAhead:
		return Newer
	case bAhead:
		return Older
	}
	return Equal
}

// Covers reports whether v has seen everything o has: Compare(v, o) is Equal
// or Newer.
func (v Vector) Covers(o Vector) bool {
	i := 0
	for _, e := range o {
		for i < len(v) && v[i].DBID < e.DBID {
			i++
		}
		if i < len(v) && v[i].DBID == e.DBID {
			if v[i].Etag < e.Etag {
				return false
			}
		} else if e.Etag > 0 {
			return false
		}
	}
	return true
}

// Absorbs reports whether merging o into v gives v exactly, tags included:
// v has every entry of o, with a greater etag, or the same etag and the
// tag Merge keeps. Unlike Covers, a missing entry is never absorbed (Merge
// would add it, whatever its etag).
func (v Vector) Absorbs(o Vector) bool {
	i := 0
	for _, e := range o {
		for i < len(v) && v[i].DBID < e.DBID {
			i++
		}
		if i == len(v) || v[i].DBID != e.DBID {
			return false
		}
		if f := v[i]; f.Etag < e.Etag || (f.Etag == e.Etag && f.Tag > e.Tag) {
			return false
		}
	}
	return true
}

// Merge returns the per-DBID maximum of a and b. The tag is taken from the
// entry with the larger etag; on equal etags the lexicographically smaller tag
// wins, so Merge is commutative, associative and idempotent.
func Merge(a, b Vector) Vector {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(Vector, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		x, y := a[i], b[j]
		switch {
		case x.DBID < y.DBID:
			out = append(out, x)
			i++
		case y.DBID < x.DBID:
			out = append(out, y)
			j++
		default:
			if y.Etag > x.Etag || (y.Etag == x.Etag && y.Tag < x.Tag) {
				x = y
			}
			out = append(out, x)
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// EtagOf returns the etag of dbid's entry in v, or 0 if there is none.
func (v Vector) EtagOf(dbid string) uint64 {
	if i, ok := slices.BinarySearchFunc(v, dbid, func(e Entry, id string) int { return strings.Compare(e.DBID, id) }); ok {
		return v[i].Etag
	}
	return 0
}

// With returns a copy of v with dbid's entry set to tag:etag (replacing any
// existing entry for dbid, whatever its etag). A replica uses it to record a
// local write. It panics if tag or dbid does not follow the grammar, since
// that is a programming error that would produce an unparsable vector.
func (v Vector) With(tag string, etag uint64, dbid string) Vector {
	e := Entry{Tag: tag, Etag: etag, DBID: dbid}
	if err := e.Validate(); err != nil {
		panic("changevector: With: " + err.Error())
	}
	i, found := slices.BinarySearchFunc(v, dbid, func(e Entry, id string) int { return strings.Compare(e.DBID, id) })
	n := len(v)
	if !found {
		n++
	}
	out := make(Vector, n)
	copy(out, v[:i])
	out[i] = e
	if found {
		i++
	}
	copy(out[len(out)-(len(v)-i):], v[i:])
	return out
}

// StripMove returns v without its MOVE entries. It returns v itself when
// there are none.
func (v Vector) StripMove() Vector {
	k := slices.IndexFunc(v, isMove)
	if k < 0 {
		return v
	}
	out := make(Vector, 0, len(v)-1)
	out = append(out, v[:k]...)
	for _, e := range v[k+1:] {
		if !isMove(e) {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func isMove(e Entry) bool { return e.Tag == MoveTag }

// ChangeVector is possibly composite "order|version". A plain CV is both its
// order and its version.
type ChangeVector struct {
	Order, Version Vector
}

// Plain returns the plain change vector v (Order and Version both v).
func Plain(v Vector) ChangeVector { return ChangeVector{Order: v, Version: v} }

// Composite returns the change vector with the given order and version. If
// they are equal it is in effect plain.
func Composite(order, version Vector) ChangeVector {
	return ChangeVector{Order: order, Version: version}
}

// Parse parses "order|version" or a plain "v" (then Order and Version are the
// same vector), each part as by ParseVector. Either side of '|' may be empty
// (the empty vector). More than one '|' is an error. The empty string is the
// zero ChangeVector.
func Parse(s string) (ChangeVector, error) {
	order, version, composite := strings.Cut(s, "|")
	if !composite {
		v, err := parseVector(s)
		if err != nil {
			err.Input = s
			return ChangeVector{}, err
		}
		return Plain(v), nil
	}
	if i := strings.IndexByte(version, '|'); i >= 0 {
		return ChangeVector{}, &ParseError{Input: s, Msg: "more than one '|' (second at offset " + strconv.Itoa(len(order)+1+i) + ")"}
	}
	o, err := parseVector(order)
	if err != nil {
		err.Input, err.Part = s, "order"
		return ChangeVector{}, err
	}
	v, err := parseVector(version)
	if err != nil {
		err.Input, err.Part = s, "version"
		return ChangeVector{}, err
	}
	return normalize(o, v), nil
}

// normalize makes Order and Version share memory when they are equal.
func normalize(order, version Vector) ChangeVector {
	if order.Equal(version) {
		return Plain(order)
	}
	return ChangeVector{Order: order, Version: version}
}

// IsComposite reports whether c's order and version differ.
func (c ChangeVector) IsComposite() bool { return !c.Order.Equal(c.Version) }

// Equal reports whether c and o have identical order and version parts.
func (c ChangeVector) Equal(o ChangeVector) bool {
	return c.Order.Equal(o.Order) && c.Version.Equal(o.Version)
}

// String returns the plain form when Order and Version are equal, else
// "order|version".
func (c ChangeVector) String() string {
	if !c.IsComposite() {
		return c.Version.String()
	}
	var b strings.Builder
	n := 1
	if len(c.Order) > 0 {
		n += c.Order.size()
	}
	if len(c.Version) > 0 {
		n += c.Version.size()
	}
	b.Grow(n)
	c.Order.writeTo(&b)
	b.WriteByte('|')
	c.Version.writeTo(&b)
	return b.String()
}

// Merge merges order with order and version with version.
func (c ChangeVector) Merge(o ChangeVector) ChangeVector {
	if !c.IsComposite() && !o.IsComposite() {
		return Plain(Merge(c.Version, o.Version))
	}
	return normalize(Merge(c.Order, o.Order), Merge(c.Version, o.Version))
}

// StripMove removes MOVE entries from both parts (external replication uses
// it); the result is plain if the parts then become equal.
func (c ChangeVector) StripMove() ChangeVector {
	return normalize(c.Order.StripMove(), c.Version.StripMove())
}

// NewDatabaseID returns a fresh database id: 16 random bytes from
// crypto/rand in unpadded URL-safe base64, 22 characters.
func NewDatabaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crashes the program instead) since Go 1.24
	return base64.RawURLEncoding.EncodeToString(b[:])
}
