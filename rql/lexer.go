package rql

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokenKind classifies a lexical token.
type tokenKind int

const (
	tokEOF tokenKind = iota
	tokError
	tokIdent
	tokString
	tokNumber
	tokParam
	tokOp
	tokLParen
	tokRParen
	tokComma
	tokDot
	tokLBracket
	tokRBracket
)

// token is one lexical unit of a query. A tokError token carries its
// message in str; the parser reports it wherever the token is rejected.
type token struct {
	kind tokenKind
	pos  int     // byte offset in the query
	raw  string  // source text
	str  string  // decoded string literal, parameter name or error message
	num  float64 // value of a number literal
	op   Op      // operator of a tokOp
}

// describe names the token for error messages.
func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of query"
	case tokString:
		return "string " + t.raw
	case tokNumber:
		return "number " + t.raw
	case tokParam:
		return "parameter " + t.raw
	}
	return "'" + t.raw + "'"
}

// lexer produces tokens from a query on demand.
type lexer struct {
	src string
	pos int
}

// next scans and returns the next token.
func (l *lexer) next() token {
	for l.pos < len(l.src) {
		r, n := utf8.DecodeRuneInString(l.src[l.pos:])
		if !unicode.IsSpace(r) {
			break
		}
		l.pos += n
	}
	start := l.pos
	if start >= len(l.src) {
		return token{kind: tokEOF, pos: start}
	}
	c := l.src[start]
	r, n := utf8.DecodeRuneInString(l.src[start:])
	switch {
	case c == '\'' || c == '"':
		return l.lexString(start, c)
	case isDigit(c) || c == '-' && start+1 < len(l.src) && isDigit(l.src[start+1]):
		return l.lexNumber(start)
	case c == '$':
		return l.lexParam(start)
	case isIdentStart(r):
		l.pos = scanIdent(l.src, start+n)
		return l.tok(tokIdent, start)
	}
	if k, ok := punctuation[c]; ok {
		l.pos++
		return l.tok(k, start)
	}
	for _, o := range operators {
		if strings.HasPrefix(l.src[start:], o.text) {
			l.pos += len(o.text)
			t := l.tok(tokOp, start)
			t.op = o.op
			return t
		}
	}
	if r == utf8.RuneError && n == 1 {
		return errToken(start, fmt.Sprintf("invalid UTF-8 byte 0x%02x", c))
	}
	return errToken(start, fmt.Sprintf("unexpected character %q", r))
}

// punctuation maps single-byte punctuation to its token kind.
var punctuation = map[byte]tokenKind{'(': tokLParen, ')': tokRParen, ',': tokComma, '.': tokDot, '[': tokLBracket, ']': tokRBracket}

// escapes maps the character after a backslash in a string literal to
// the byte it denotes.
var escapes = map[byte]byte{'\\': '\\', '\'': '\'', '"': '"', 'n': '\n', 'r': '\r', 't': '\t'}

// operators lists comparison operators, longest spellings first.
var operators = []struct {
	text string
	op   Op
}{
	{"==", Eq}, {"!=", Ne}, {"<>", Ne}, {"<=", Le}, {">=", Ge},
	{"=", Eq}, {"<", Lt}, {">", Gt},
}

// tok builds a token of kind k spanning src[start:l.pos].
func (l *lexer) tok(k tokenKind, start int) token {
	return token{kind: k, pos: start, raw: l.src[start:l.pos]}
}

// errToken builds a lexical error token.
func errToken(pos int, msg string) token {
	return token{kind: tokError, pos: pos, str: msg}
}

// lexString scans a quoted string with \\ \' \" \n \r \t escapes.
func (l *lexer) lexString(start int, quote byte) token {
	var b strings.Builder
	for i := start + 1; i < len(l.src); i++ {
		c := l.src[i]
		switch {
		case c == quote:
			l.pos = i + 1
			t := l.tok(tokString, start)
			t.str = b.String()
			return t
		case c != '\\':
			b.WriteByte(c)
		case i+1 >= len(l.src):
			return errToken(start, "unterminated string")
		default:
			i++
			esc, ok := escapes[l.src[i]]
			if !ok {
				return errToken(i-1, fmt.Sprintf("invalid escape sequence \\%c", l.src[i]))
			}
			b.WriteByte(esc)
		}
	}
	return errToken(start, "unterminated string")
}

// lexNumber scans an optionally negative decimal number such as -1.5e3.
// It first takes the maximal run of number-like characters so that
// malformed input such as 1.2.3 or 12ab is reported as one bad number.
func (l *lexer) lexNumber(start int) token {
	i := start + 1
	for i < len(l.src) {
		c := l.src[i]
		isSign := (c == '+' || c == '-') && (l.src[i-1] == 'e' || l.src[i-1] == 'E')
		if !isDigit(c) && !isASCIILetter(c) && c != '_' && c != '.' && !isSign {
			break
		}
		i++
	}
	raw := l.src[start:i]
	if !validNumber(raw) {
		return errToken(start, fmt.Sprintf("bad number %q", raw))
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		return errToken(start, fmt.Sprintf("number %s out of range", raw))
	}
	l.pos = i
	t := l.tok(tokNumber, start)
	t.num = f
	return t
}

// validNumber reports whether s matches -?D+(.D+)?([eE][+-]?D+)?.
func validNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	digits := func() bool {
		n := 0
		for n < len(s) && isDigit(s[n]) {
			n++
		}
		s = s[n:]
		return n > 0
	}
	if !digits() {
		return false
	}
	if strings.HasPrefix(s, ".") {
		s = s[1:]
		if !digits() {
			return false
		}
	}
	if s != "" && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if s != "" && (s[0] == '+' || s[0] == '-') {
			s = s[1:]
		}
		if !digits() {
			return false
		}
	}
	return s == ""
}

// lexParam scans a $name parameter reference.
func (l *lexer) lexParam(start int) token {
	end := scanIdent(l.src, start+1)
	if end == start+1 {
		return errToken(start, "expected parameter name after '$'")
	}
	l.pos = end
	t := l.tok(tokParam, start)
	t.str = l.src[start+1 : end]
	return t
}

// scanIdent returns the end of the identifier characters starting at i.
func scanIdent(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isIdentPart(r) {
			break
		}
		i += n
	}
	return i
}

// isIdentStart reports whether r may begin an identifier ('@' allows
// @all_docs and @metadata).
func isIdentStart(r rune) bool { return r == '_' || r == '@' || unicode.IsLetter(r) }

// isIdentPart reports whether r may continue an identifier.
func isIdentPart(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func isDigit(c byte) bool       { return '0' <= c && c <= '9' }
func isASCIILetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// isPlainIdent reports whether s lexes as a single identifier not
// starting with '@'.
// isFieldIdent reports whether s can be written unquoted as a field path
// segment.
func isFieldIdent(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return s != "" && isIdentStart(r) && scanIdent(s, n) == len(s)
}

func isPlainIdent(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return s != "" && r != '@' && isIdentStart(r) && scanIdent(s, n) == len(s)
}
