// Package document converts between the JSON a client sends or receives
// and what storage keeps: the body without "@metadata", plus the metadata
// fields shardnode owns (@id, @collection, @change-vector, @last-modified,
// and for sharded reads @bucket and @shard).
package document

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Errors of Parse.
var (
	// ErrNotObject means the body is valid JSON but not an object.
	ErrNotObject = errors.New("document must be a JSON object")
	// ErrMalformed means the body is not valid JSON.
	ErrMalformed = errors.New("malformed JSON")
	// ErrBadMetadata means "@metadata" is not an object or its
	// "@collection" is not a string.
	ErrBadMetadata = errors.New(`"@metadata" must be an object whose "@collection" is a string`)
	// ErrAmbiguousMetadata means "@metadata" names "@collection" twice,
	// spelled in two cases: keys are matched in any case, so which one was
	// meant is unknowable (as with a key named twice, see Validate).
	ErrAmbiguousMetadata = errors.New(`"@metadata" names "@collection" twice (its keys match in any case)`)
)

// Parsed is a client document split for storage.
type Parsed struct {
	// Body is the compact JSON object without "@metadata".
	Body []byte
	// Collection is "@metadata"."@collection", or "".
	Collection string
}

// Parse validates raw as a JSON object, compacts it and splits off its
// "@metadata".
func Parse(raw []byte) (Parsed, error) {
	compact, err := Validate(raw)
	if err != nil {
		return Parsed{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !compact {
		raw = AppendCompact(make([]byte, 0, len(raw)), raw)
	}
	return split(raw)
}

// ParseValid is Parse for a document already known to be valid JSON (a
// part of a request body that was decoded whole): it skips validation and
// copies only when there is whitespace to remove.
func ParseValid(raw []byte) (Parsed, error) {
	if compact(raw) {
		return split(raw)
	}
	return split(AppendCompact(make([]byte, 0, len(raw)), raw))
}

// ParseOwned is Parse for a body its caller owns and does not read again:
// the result's Body may share raw's memory, and raw's bytes may be
// overwritten (see ParseValidOwned).
func ParseOwned(raw []byte) (Parsed, error) {
	compact, err := Validate(raw)
	if err != nil {
		return Parsed{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !compact {
		raw = AppendCompact(make([]byte, 0, len(raw)), raw)
	}
	return splitInPlace(raw)
}

// ParseValidOwned is ParseValid for a document its caller owns and does
// not read again, such as one command of a request body: the result's Body
// may share raw's memory, and raw's bytes may be overwritten. knownCompact
// says raw is known to hold no whitespace (the whole body it came from was
// compact), which spares a scan. A body without "@metadata", or with it as
// the first or last member, is not copied at all.
func ParseValidOwned(raw []byte, knownCompact bool) (Parsed, error) {
	if !knownCompact && !compact(raw) {
		raw = AppendCompact(make([]byte, 0, len(raw)), raw)
	}
	return splitInPlace(raw)
}

// splitInPlace is split for a compact value it may overwrite: removing a
// first or last "@metadata" member rewrites one byte instead of copying.
func splitInPlace(c []byte) (Parsed, error) {
	if len(c) == 0 || c[0] != '{' {
		return Parsed{}, ErrNotObject
	}
	metaStart, metaValue, metaEnd, metas := 0, 0, 0, 0
	i := 1
	for i < len(c)-1 {
		keyEnd := skipString(c, i)
		valEnd := skipAny(c, keyEnd+1)
		if isMetadataKey(c[i:keyEnd]) {
			metaStart, metaValue, metaEnd = i, keyEnd+1, valEnd
			metas++
		}
		i = valEnd
		if c[i] == ',' {
			i++
		}
	}
	// Bodies returned below share c: their capacity ends where they do, so
	// an append to one can never write over what follows in the request.
	if metas == 0 {
		return Parsed{Body: c[:len(c):len(c)]}, nil
	}
	last := metaEnd == len(c)-1
	if metas > 1 || (metaStart != 1 && !last) {
		return split(c) // a member in the middle, or several: copy
	}
	col, err := collectionOf(c[metaValue:metaEnd])
	if err != nil {
		return Parsed{}, err
	}
	switch {
	case metaStart == 1 && last: // the only member
		c[1] = '}'
		return Parsed{Body: c[:2:2], Collection: col}, nil
	case metaStart == 1: // first: its comma becomes the opening brace
		c[metaEnd] = '{'
		return Parsed{Body: c[metaEnd:len(c):len(c)], Collection: col}, nil
	default: // last: the comma before it becomes the closing brace
		c[metaStart-1] = '}'
		return Parsed{Body: c[:metaStart:metaStart], Collection: col}, nil
	}
}

// isMetadataKey reports whether the raw key literal is "@metadata", written
// plainly or with escapes ("\u0040metadata" is the same key to every JSON
// reader, and a client's own "@metadata" must not pass as body data).
func isMetadataKey(key []byte) bool {
	if string(key) == `"@metadata"` {
		return true
	}
	if bytes.IndexByte(key, '\\') < 0 {
		return false
	}
	s, err := Unquote(key)
	return err == nil && s == "@metadata"
}

// compact reports whether valid JSON raw has no whitespace outside strings.
func compact(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

// split separates a compact JSON value into body and collection.
func split(c []byte) (Parsed, error) {
	if len(c) == 0 || c[0] != '{' {
		return Parsed{}, ErrNotObject
	}
	// c is compact and valid: walk its top-level members.
	body := make([]byte, 0, len(c))
	body = append(body, '{')
	var p Parsed
	i := 1
	for i < len(c)-1 {
		keyEnd := skipString(c, i)
		valEnd := skipAny(c, keyEnd+1)
		if isMetadataKey(c[i:keyEnd]) {
			col, err := collectionOf(c[keyEnd+1 : valEnd])
			if err != nil {
				return Parsed{}, err
			}
			p.Collection = col
		} else {
			if len(body) > 1 {
				body = append(body, ',')
			}
			body = append(body, c[i:valEnd]...)
		}
		i = valEnd
		if c[i] == ',' {
			i++
		}
	}
	p.Body = append(body, '}')
	return p, nil
}

// emptyCollection is RavenDB's name for the documents of no collection: a
// document sent with it has none.
const emptyCollection = "@empty"

func collectionOf(meta []byte) (string, error) {
	if len(meta) == 0 || meta[0] != '{' {
		return "", ErrBadMetadata
	}
	col, seen := "", false
	err := Members(meta, func(k, v []byte) error {
		if !KeyIs(k, "@collection") {
			return nil
		}
		if seen {
			return ErrAmbiguousMetadata
		}
		seen = true
		switch {
		case v[0] == '"':
			s, err := Unquote(v)
			if err != nil {
				return err
			}
			col = s
			if strings.EqualFold(col, emptyCollection) {
				col = "" // RavenDB's name for no collection
			}
		case string(v) == "null":
			col = ""
		default:
			return ErrBadMetadata
		}
		return nil
	})
	return col, err
}

// skipString returns the index after the string starting at c[i] == '"'.
// It jumps from quote to quote (bytes.IndexByte is vectorised; documents are
// mostly long strings, and this was the busiest function of a bulk load): a
// quote ends the string unless an odd run of backslashes precedes it.
func skipString(c []byte, i int) int {
	j := i + 1
	for j < len(c) {
		k := bytes.IndexByte(c[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && c[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return len(c)
}

// Metadata is what Render adds under "@metadata".
type Metadata struct {
	ID           string
	Collection   string
	ChangeVector string
	LastModified time.Time
	// Bucket and Shard are added when Shard >= 0.
	Bucket uint32
	Shard  int
}

// TimeFormat is RavenDB's "@last-modified" format (7 fraction digits, UTC).
const TimeFormat = "2006-01-02T15:04:05.0000000Z"

// AppendTime appends t in UTC in TimeFormat. It is what
// t.UTC().AppendFormat(dst, TimeFormat) gives for years 0 to 9999, without
// parsing the layout on every call: every document a GET or a query
// returns carries one.
func AppendTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(dst, TimeFormat)
	}
	hour, min, sec := t.Clock()
	frac := t.Nanosecond() / 100
	var b [28]byte
	put := func(i, v, width int) {
		for j := i + width - 1; j >= i; j-- {
			b[j] = byte('0' + v%10)
			v /= 10
		}
	}
	put(0, year, 4)
	b[4] = '-'
	put(5, int(month), 2)
	b[7] = '-'
	put(8, day, 2)
	b[10] = 'T'
	put(11, hour, 2)
	b[13] = ':'
	put(14, min, 2)
	b[16] = ':'
	put(17, sec, 2)
	b[19] = '.'
	put(20, frac, 7)
	b[27] = 'Z'
	return append(dst, b[:]...)
}

// Render appends body with m as its "@metadata" to dst.
func Render(dst, body []byte, m Metadata) []byte {
	if len(body) < 2 {
		body = []byte("{}")
	}
	dst = append(dst, body[:len(body)-1]...)
	if len(body) > 2 {
		dst = append(dst, ',')
	}
	dst = append(dst, `"@metadata":{"@id":`...)
	dst = appendJSONString(dst, m.ID)
	if m.Collection != "" {
		dst = append(dst, `,"@collection":`...)
		dst = appendJSONString(dst, m.Collection)
	}
	dst = append(dst, `,"@change-vector":`...)
	dst = appendJSONString(dst, m.ChangeVector)
	dst = append(dst, `,"@last-modified":"`...)
	dst = AppendTime(dst, m.LastModified)
	dst = append(dst, '"')
	if m.Shard >= 0 {
		dst = append(dst, `,"@bucket":`...)
		dst = strconv.AppendUint(dst, uint64(m.Bucket), 10)
		dst = append(dst, `,"@shard":`...)
		dst = strconv.AppendInt(dst, int64(m.Shard), 10)
	}
	return append(dst, "}}"...)
}

// AppendString appends s as a JSON string literal.
func AppendString(dst []byte, s string) []byte { return appendJSONString(dst, s) }

// appendJSONString appends s as a JSON string literal.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
