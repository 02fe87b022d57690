package document

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// maxDepth bounds nesting, as encoding/json does: deeper input is refused
// rather than allowed to grow the stack without limit.
const maxDepth = 10000

// SyntaxError is malformed JSON, with the byte offset where it was found.
type SyntaxError struct {
	// Offset is the byte offset of the first byte that cannot be accepted.
	Offset int
	// Msg says what was expected.
	Msg string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%s at offset %d", e.Msg, e.Offset) }

// Validate checks that b is exactly one JSON value (RFC 8259, surrounding
// whitespace allowed) and reports whether it has no whitespace outside
// strings, so a caller can keep it as it is. It accepts what
// encoding/json.Valid accepts, in one pass and without allocating: request
// bodies are validated on every write.
//
// Beyond syntax it refuses what readers could not take back: text that is
// not UTF-8 (a strict client cannot parse an answer holding it), numbers
// beyond float64's range (1e400), which no reader decodes as a number, and
// an object with the same key twice (RFC 8259 leaves its meaning open:
// readers keep the first or the last, so a query and a client could see
// different documents).
func Validate(b []byte) (compact bool, err error) {
	if !utf8.Valid(b) {
		at := 0
		for at < len(b) {
			r, n := utf8.DecodeRune(b[at:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		return false, &SyntaxError{Offset: at, Msg: "invalid UTF-8"}
	}
	v := validator{b: b, compact: true}
	i := v.ws(0)
	i, err = v.value(i, 0)
	if err != nil {
		return false, err
	}
	if j := v.ws(i); j != len(b) {
		return false, &SyntaxError{Offset: j, Msg: "invalid character after top-level value"}
	}
	return v.compact, nil
}

type validator struct {
	b       []byte
	compact bool
}

func (v *validator) ws(i int) int {
	for i < len(v.b) {
		switch v.b[i] {
		case ' ', '\t', '\n', '\r':
			v.compact = false
			i++
		default:
			return i
		}
	}
	return i
}

func (v *validator) fail(i int, msg string) error {
	if i >= len(v.b) {
		return &SyntaxError{Offset: len(v.b), Msg: "unexpected end of JSON input"}
	}
	return &SyntaxError{Offset: i, Msg: fmt.Sprintf("invalid character %q %s", v.b[i], msg)}
}

// value checks the value at b[i] (no leading whitespace) and returns the
// index after it.
func (v *validator) value(i, depth int) (int, error) {
	if i >= len(v.b) {
		return i, v.fail(i, "")
	}
	switch c := v.b[i]; {
	case c == '"':
		return v.str(i)
	case c == '{':
		return v.object(i, depth+1)
	case c == '[':
		return v.array(i, depth+1)
	case c == '-' || (c >= '0' && c <= '9'):
		return v.number(i)
	case c == 't':
		return v.literal(i, "true")
	case c == 'f':
		return v.literal(i, "false")
	case c == 'n':
		return v.literal(i, "null")
	default:
		return i, v.fail(i, "looking for beginning of value")
	}
}

func (v *validator) literal(i int, lit string) (int, error) {
	for k := 0; k < len(lit); k++ {
		if i+k >= len(v.b) || v.b[i+k] != lit[k] {
			return i + k, v.fail(i+k, "in literal "+lit)
		}
	}
	return i + len(lit), nil
}

func (v *validator) object(i, depth int) (int, error) {
	if depth > maxDepth {
		return i, &SyntaxError{Offset: i, Msg: "exceeded max depth"}
	}
	i = v.ws(i + 1)
	if i < len(v.b) && v.b[i] == '}' {
		return i + 1, nil
	}
	// The keys so far, as they spell (see keyName): a few in place, a set
	// past that.
	var small [16][]byte
	keys := small[:0]
	var many map[string]struct{}
	for {
		if i >= len(v.b) || v.b[i] != '"' {
			return i, v.fail(i, "looking for beginning of object key string")
		}
		start := i
		var err error
		if i, err = v.str(i); err != nil {
			return i, err
		}
		name := keyName(v.b[start:i])
		dup := false
		if many != nil {
			_, dup = many[string(name)]
			many[string(name)] = struct{}{}
		} else {
			for _, k := range keys {
				if bytes.Equal(k, name) {
					dup = true
					break
				}
			}
			if keys = append(keys, name); len(keys) == len(small) {
				many = make(map[string]struct{}, 2*len(small))
				for _, k := range keys {
					many[string(k)] = struct{}{}
				}
			}
		}
		if dup {
			return start, &SyntaxError{Offset: start, Msg: fmt.Sprintf("duplicate object key %s", v.b[start:i])}
		}
		i = v.ws(i)
		if i >= len(v.b) || v.b[i] != ':' {
			return i, v.fail(i, "after object key")
		}
		if i, err = v.value(v.ws(i+1), depth); err != nil {
			return i, err
		}
		i = v.ws(i)
		if i >= len(v.b) {
			return i, v.fail(i, "")
		}
		switch v.b[i] {
		case ',':
			i = v.ws(i + 1)
		case '}':
			return i + 1, nil
		default:
			return i, v.fail(i, "after object key:value pair")
		}
	}
}

func (v *validator) array(i, depth int) (int, error) {
	if depth > maxDepth {
		return i, &SyntaxError{Offset: i, Msg: "exceeded max depth"}
	}
	i = v.ws(i + 1)
	if i < len(v.b) && v.b[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = v.value(i, depth); err != nil {
			return i, err
		}
		i = v.ws(i)
		if i >= len(v.b) {
			return i, v.fail(i, "")
		}
		switch v.b[i] {
		case ',':
			i = v.ws(i + 1)
		case ']':
			return i + 1, nil
		default:
			return i, v.fail(i, "after array element")
		}
	}
}

// str checks the string starting at b[i] == '"'.
func (v *validator) str(i int) (int, error) {
	b := v.b
	for j := i + 1; j < len(b); j++ {
		j += plainRun(b[j:])
		if j >= len(b) {
			break
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, nil
		case c == '\\':
			j++
			if j >= len(b) {
				return j, v.fail(j, "")
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if j+k >= len(b) || !isHex(b[j+k]) {
						return j + k, v.fail(j+k, "in \\u hexadecimal character escape")
					}
				}
				j += 4
			default:
				return j, v.fail(j, "in string escape code")
			}
		case c < 0x20:
			return j, v.fail(j, "in string literal")
		}
	}
	return len(b), v.fail(len(b), "")
}

// keyName is what a valid key literal spells, for comparing keys: its
// bytes between the quotes, decoded only when it holds an escape.
func keyName(lit []byte) []byte {
	inner := lit[1 : len(lit)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner
	}
	s, err := Unquote(lit)
	if err != nil {
		return lit // not reached for a literal str accepted
	}
	return []byte(s)
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (v *validator) number(i int) (int, error) {
	b := v.b
	start, exp := i, false
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, v.fail(i, "in numeric literal")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, v.fail(i, "after decimal point in numeric literal")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		exp = true
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, v.fail(i, "in exponent of numeric literal")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	// Only an exponent or some 300 digits can leave float64's range.
	if exp || i-start > 300 {
		if f, err := strconv.ParseFloat(string(b[start:i]), 64); err != nil && math.IsInf(f, 0) {
			return i, &SyntaxError{Offset: start, Msg: fmt.Sprintf("number %.40s is out of range (beyond ±1.8e308)", b[start:i])}
		}
	}
	return i, nil
}

// AppendCompact appends valid JSON b to dst without the whitespace outside
// its strings (what encoding/json.Compact does, for input already
// validated).
func AppendCompact(dst, b []byte) []byte {
	in := false
	start := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			dst = append(dst, b[start:i]...)
			start = i + 1
		}
	}
	return append(dst, b[start:]...)
}

// Members calls fn with each member of the valid JSON object obj: the key
// as its raw string literal (quotes included) and the raw value. Whitespace
// around them is skipped. It returns the first error fn returns, or an
// error if obj is not an object.
func Members(obj []byte, fn func(key, value []byte) error) error {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return ErrNotObject
	}
	i = skipWS(obj, i+1)
	for i < len(obj) && obj[i] != '}' {
		keyEnd := skipString(obj, i)
		vs := skipWS(obj, skipWS(obj, keyEnd)+1)
		ve := skipAny(obj, vs)
		if err := fn(obj[i:keyEnd], obj[vs:ve]); err != nil {
			return err
		}
		i = skipWS(obj, ve)
		if i < len(obj) && obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
	}
	return nil
}

// Elements calls fn with each raw element of the valid JSON array arr. It
// returns the first error fn returns, or an error if arr is not an array.
func Elements(arr []byte, fn func(value []byte) error) error {
	i := skipWS(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return fmt.Errorf("%w: not an array", ErrMalformed)
	}
	i = skipWS(arr, i+1)
	for i < len(arr) && arr[i] != ']' {
		e := skipAny(arr, i)
		if err := fn(arr[i:e]); err != nil {
			return err
		}
		i = skipWS(arr, e)
		if i < len(arr) && arr[i] == ',' {
			i = skipWS(arr, i+1)
		}
	}
	return nil
}

// Unquote returns the string a valid JSON string literal stands for.
func Unquote(lit []byte) (string, error) {
	plain := len(lit) >= 2 && lit[0] == '"' && lit[len(lit)-1] == '"'
	if plain {
		inner := lit[1 : len(lit)-1]
		plain = bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner)
	}
	if plain {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return s, nil
}

// KeyIs reports whether the raw key literal names field, matching as
// encoding/json does for plain ASCII names (case-insensitively). A key
// written with escapes is compared by what it spells.
func KeyIs(key []byte, field string) bool {
	if bytes.IndexByte(key, '\\') >= 0 {
		s, err := Unquote(key)
		if err != nil {
			return false
		}
		key = AppendString(nil, s)
	}
	if len(key) != len(field)+2 {
		return false
	}
	for i := 0; i < len(field); i++ {
		a, b := key[i+1], field[i]
		if a != b && a|0x20 != b|0x20 {
			return false
		}
		if a|0x20 < 'a' || a|0x20 > 'z' {
			if a != b {
				return false
			}
		}
	}
	return true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipAny returns the index after the valid JSON value at b[i], which may
// contain whitespace.
func skipAny(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
}

// plainRun returns how many leading bytes of b need no attention inside a
// string (neither '"', '\\' nor a control character), eight at a time:
// a string's body is most of a document, and a byte loop over it was a
// large part of validating a bulk request.
func plainRun(b []byte) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	n := 0
	for len(b)-n >= 8 {
		x := binary.LittleEndian.Uint64(b[n:])
		q := x ^ ('"' * ones)
		s := x ^ ('\\' * ones)
		// A zero byte in q or s is a quote or a backslash; a byte below
		// 0x20 in x is a control character.
		if ((q-ones)&^q|(s-ones)&^s|(x-0x20*ones)&^x)&highs != 0 {
			break
		}
		n += 8
	}
	return n
}
