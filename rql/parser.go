package rql

import (
	"fmt"
	"math"
	"strings"
)

// fieldReserved holds keywords that cannot start a field path.
var fieldReserved = map[string]bool{
	"and": true, "or": true, "not": true, "true": true, "false": true, "null": true,
}

// collectionReserved holds keywords that cannot be an unquoted collection
// name.
var collectionReserved = map[string]bool{
	"and": true, "or": true, "not": true, "true": true, "false": true, "null": true,
	"from": true, "where": true, "order": true, "limit": true, "offset": true, "include": true,
}

// Parse parses an RQL query. params supplies the values of $name
// references (key "p0" for "$p0"); values may be nil, bool, string or any
// number type including json.Number. Errors are *ParseError.
func Parse(q string, params map[string]any) (*Query, error) {
	p := &parser{lex: lexer{src: q}, params: params}
	p.advance()
	return p.parseQuery()
}

// parser is a recursive-descent parser with one token of lookahead.
type parser struct {
	lex    lexer
	tok    token
	params map[string]any
}

func (p *parser) advance() { p.tok = p.lex.next() }

// isKeyword reports whether the current token is the keyword kw.
func (p *parser) isKeyword(kw string) bool {
	return p.tok.kind == tokIdent && strings.EqualFold(p.tok.raw, kw)
}

// errAt returns a *ParseError at byte offset pos.
func (p *parser) errAt(pos int, format string, args ...any) error {
	return &ParseError{Pos: pos, Msg: fmt.Sprintf(format, args...), Query: p.lex.src}
}

// unexpected reports the current token where want was expected, or the
// lexical error the token carries.
func (p *parser) unexpected(want string) error {
	if p.tok.kind == tokError {
		return p.errAt(p.tok.pos, "%s", p.tok.str)
	}
	return p.errAt(p.tok.pos, "expected %s, found %s", want, p.tok.describe())
}

// parseQuery parses the whole query.
func (p *parser) parseQuery() (*Query, error) {
	if p.tok.kind == tokEOF {
		return nil, p.errAt(0, "empty query")
	}
	if !p.isKeyword("from") {
		return nil, p.unexpected("'from'")
	}
	p.advance()
	q := &Query{Limit: -1}
	if err := p.parseSource(q); err != nil {
		return nil, err
	}
	var err error
	if p.isKeyword("where") {
		p.advance()
		if q.Where, err = p.parseOr(); err != nil {
			return nil, err
		}
	}
	if p.isKeyword("order") {
		p.advance()
		if q.OrderBy, err = p.parseOrderBy(); err != nil {
			return nil, err
		}
	}
	if p.isKeyword("include") {
		if q.Include, err = p.parseInclude(); err != nil {
			return nil, err
		}
	}
	if err := p.parseLimitOffset(q); err != nil {
		return nil, err
	}
	if p.tok.kind != tokEOF {
		return nil, p.unexpected("end of query")
	}
	return q, nil
}

// parseSource parses a collection name, quoted name or @all_docs.
func (p *parser) parseSource(q *Query) error {
	switch t := p.tok; {
	case t.kind == tokIdent && strings.EqualFold(t.raw, "@all_docs"):
		q.AllDocs = true
	case t.kind == tokIdent && strings.EqualFold(t.raw, EmptyCollection):
		q.Collection = EmptyCollection
	case t.kind == tokIdent && t.raw[0] == '@':
		return p.errAt(t.pos, "unknown source %s", t.raw)
	case t.kind == tokIdent && !collectionReserved[strings.ToLower(t.raw)]:
		q.Collection = t.raw
	case t.kind == tokString && t.str != "":
		q.Collection = t.str
	case t.kind == tokString:
		return p.errAt(t.pos, "empty collection name")
	default:
		return p.unexpected("collection name")
	}
	p.advance()
	return nil
}

// parseOrderBy parses 'by' key {',' key}; 'order' is already consumed.
func (p *parser) parseOrderBy() ([]OrderKey, error) {
	if !p.isKeyword("by") {
		return nil, p.unexpected("'by'")
	}
	var keys []OrderKey
	for {
		p.advance()
		f, err := p.parseField()
		if err != nil {
			return nil, err
		}
		k := OrderKey{Field: f}
		if p.isKeyword("asc") || p.isKeyword("desc") {
			k.Desc = p.isKeyword("desc")
			p.advance()
		}
		keys = append(keys, k)
		if p.tok.kind != tokComma {
			return keys, nil
		}
	}
}

// parseInclude parses 'include' path {',' path}, where a path is a field
// whose segments may each end in '[]' (an array, walked element by
// element: the brackets change nothing and are not kept).
func (p *parser) parseInclude() ([][]string, error) {
	var paths [][]string
	for {
		p.advance() // 'include' or ','
		path, err := p.parseSegments(nil, "field name to include", true)
		if err != nil {
			return nil, err
		}
		paths = append(paths, path)
		if p.tok.kind != tokComma {
			return paths, nil
		}
	}
}

// parseLimitOffset parses optional 'limit N' and 'offset N' in either
// order, or 'limit O, N' (RavenDB's clients' form: skip O, take N). A null
// count (a parameter the client left unset) means none: no limit, no
// offset.
func (p *parser) parseLimitOffset(q *Query) error {
	seen := map[string]bool{}
	for {
		var dst *int
		switch {
		case p.isKeyword("limit"):
			dst = &q.Limit
		case p.isKeyword("offset"):
			dst = &q.Offset
		default:
			return nil
		}
		kw := strings.ToLower(p.tok.raw)
		if seen[kw] {
			return p.errAt(p.tok.pos, "duplicate '%s' clause", kw)
		}
		seen[kw] = true
		p.advance()
		n, err := p.parseCount(kw)
		if err != nil {
			return err
		}
		if kw == "limit" && p.tok.kind == tokComma {
			if seen["offset"] {
				return p.errAt(p.tok.pos, "'limit offset, count' after an 'offset' clause")
			}
			seen["offset"] = true
			p.advance()
			if q.Offset, err = p.parseCount("limit"); err != nil {
				return err
			}
			n, q.Offset = q.Offset, max(n, 0)
		}
		if kw == "offset" {
			n = max(n, 0)
		}
		*dst = n
	}
}

// parseCount parses a limit's or offset's count: a whole number from 0 to
// 2^31-1, or null for none (-1).
func (p *parser) parseCount(kw string) (int, error) {
	if p.tok.kind != tokNumber && p.tok.kind != tokParam && !p.isKeyword("null") {
		return 0, p.unexpected("non-negative integer")
	}
	t := p.tok
	v, err := p.parseValue()
	if err != nil {
		return 0, err
	}
	if v == nil {
		return -1, nil
	}
	f, ok := v.(float64)
	if !ok || f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
		found := formatValue(v)
		if t.kind == tokNumber {
			found = t.raw // as written: 99999999999, not 9.9999999999e+10
		}
		return 0, p.errAt(t.pos, "%s must be an integer from 0 to %d, found %s", kw, math.MaxInt32, found)
	}
	return int(f), nil
}

// parseOr parses and-expressions separated by 'or'.
func (p *parser) parseOr() (Expr, error) {
	left, err := p.parseAnd()
	for err == nil && p.isKeyword("or") {
		p.advance()
		var right Expr
		if right, err = p.parseAnd(); err == nil {
			left = &Or{left, right}
		}
	}
	return left, err
}

// parseAnd parses not-expressions separated by 'and'.
func (p *parser) parseAnd() (Expr, error) {
	left, err := p.parseNot()
	for err == nil && p.isKeyword("and") {
		p.advance()
		var right Expr
		if right, err = p.parseNot(); err == nil {
			left = &And{left, right}
		}
	}
	return left, err
}

// parseNot parses 'not' expressions, parenthesized expressions and
// comparisons.
func (p *parser) parseNot() (Expr, error) {
	switch {
	case p.isKeyword("not"):
		p.advance()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &Not{x}, nil
	case p.tok.kind == tokLParen:
		open := p.tok.pos
		p.advance()
		x, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tokRParen {
			return nil, p.unexpected(fmt.Sprintf("')' to close '(' at position %d", open))
		}
		p.advance()
		return x, nil
	}
	return p.parseComparison()
}

// parseComparison parses field op value, field 'in' '(' values ')',
// field 'between' value 'and' value, or a function call.
func (p *parser) parseComparison() (Expr, error) {
	if name, ok := p.function(); ok {
		return p.parseCall(name)
	}
	f, err := p.parseField()
	if err != nil {
		return nil, err
	}
	switch {
	case p.isKeyword("in"):
		p.advance()
		vs, err := p.parseInList()
		if err != nil {
			return nil, err
		}
		return &In{Field: f, Values: vs}, nil
	case p.isKeyword("between"):
		p.advance()
		low, err := p.parseValue()
		if err != nil {
			return nil, err
		}
		if !p.isKeyword("and") {
			return nil, p.unexpected("'and' of 'between'")
		}
		p.advance()
		high, err := p.parseValue()
		if err != nil {
			return nil, err
		}
		return &Between{Field: f, Low: low, High: high}, nil
	case p.tok.kind != tokOp:
		return nil, p.unexpected("comparison operator, 'in' or 'between'")
	}
	op := p.tok.op
	p.advance()
	v, err := p.parseValue()
	if err != nil {
		return nil, err
	}
	return &Comparison{Field: f, Op: op, Value: v}, nil
}

// function reports whether the current token starts a call of one of the
// predicate functions: its name followed by '('. A field may have such a
// name ("exists = true").
func (p *parser) function() (string, bool) {
	if p.tok.kind != tokIdent {
		return "", false
	}
	name, ok := functions[strings.ToLower(p.tok.raw)]
	if !ok {
		return "", false
	}
	peek := p.lex // a copy: scanning it leaves the parser where it is
	return name, peek.next().kind == tokLParen
}

// parseCall parses name '(' field [',' value] ')'; the name is current.
func (p *parser) parseCall(name string) (Expr, error) {
	p.advance() // the name
	open := p.tok.pos
	p.advance() // '('
	f, err := p.parseField()
	if err != nil {
		return nil, err
	}
	c := &Call{Name: name, Field: f}
	if name != "exists" {
		if p.tok.kind != tokComma {
			return nil, p.unexpected(fmt.Sprintf("',' and the value %s takes", name))
		}
		p.advance()
		if c.Value, err = p.parseValue(); err != nil {
			return nil, err
		}
	}
	if p.tok.kind != tokRParen {
		return nil, p.unexpected(fmt.Sprintf("')' to close %s( at position %d", name, open))
	}
	p.advance()
	return c, nil
}

// parseInList parses '(' [value {',' value}] ')'. A parameter holding an
// array stands for its elements, as RavenDB's clients send whereIn
// ("in ($p0)").
func (p *parser) parseInList() ([]any, error) {
	if p.tok.kind != tokLParen {
		return nil, p.unexpected("'(' after 'in'")
	}
	open := p.tok.pos
	p.advance()
	vs := []any{}
	for items := 0; p.tok.kind != tokRParen; items++ {
		if items > 0 {
			if p.tok.kind != tokComma {
				return nil, p.unexpected(fmt.Sprintf("',' or ')' to close '(' at position %d", open))
			}
			p.advance()
		}
		if t := p.tok; t.kind == tokParam {
			if arr, ok := p.params[t.str].([]any); ok {
				for i, raw := range arr {
					k, n := classify(raw)
					if k > kindString {
						return nil, p.errAt(t.pos, "parameter $%s: element %d is %s: the elements of a list must be null, a bool, a number or a string", t.str, i, jsonKind(raw))
					}
					vs = append(vs, n)
				}
				p.advance()
				continue
			}
		}
		v, err := p.parseValue()
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	p.advance()
	return vs, nil
}

// parseField parses segment {'.' segment} or id(). A segment is a name,
// or a quoted string for a name that is a keyword or holds other
// characters ('Not', "@last-modified", 'First Name'), as RavenDB's clients
// write them.
func (p *parser) parseField() ([]string, error) {
	var path []string
	if p.tok.kind == tokIdent && strings.EqualFold(p.tok.raw, "id") {
		path = append(path, p.tok.raw)
		p.advance()
		if p.tok.kind == tokLParen {
			p.advance()
			if p.tok.kind != tokRParen {
				return nil, p.unexpected("')'")
			}
			p.advance()
			return append([]string(nil), idPath...), nil
		}
		if p.tok.kind != tokDot {
			return path, nil
		}
		p.advance()
	}
	return p.parseSegments(path, "field name", false)
}

// parseSegments parses segment {'.' segment} after the segments of path
// already read; want names a first segment in errors. With brackets, a
// segment may end in '[]' (an include path's array), which is not kept.
func (p *parser) parseSegments(path []string, want string, brackets bool) ([]string, error) {
	for {
		switch t := p.tok; {
		case t.kind == tokIdent && (len(path) > 0 || !fieldReserved[strings.ToLower(t.raw)]):
			path = append(path, t.raw)
		case t.kind == tokString && t.str != "":
			path = append(path, t.str)
		case t.kind == tokString:
			return nil, p.errAt(t.pos, "empty field name")
		case len(path) == 0:
			return nil, p.unexpected(want)
		default:
			return nil, p.unexpected("field name after '.'")
		}
		p.advance()
		if brackets && p.tok.kind == tokLBracket {
			p.advance()
			if p.tok.kind != tokRBracket {
				return nil, p.unexpected("']'")
			}
			p.advance()
		}
		if p.tok.kind != tokDot {
			return path, nil
		}
		p.advance()
	}
}

// jsonKind names the JSON type of a decoded parameter value for an error.
func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "a JSON array"
	case map[string]any:
		return "a JSON object"
	}
	return fmt.Sprintf("of Go type %T", v)
}

// parseValue parses a literal or $param, normalized to nil, bool, float64
// or string.
func (p *parser) parseValue() (any, error) {
	t := p.tok
	var v any
	switch {
	case t.kind == tokString:
		v = t.str
	case t.kind == tokNumber:
		v = t.num
	case p.isKeyword("true"), p.isKeyword("false"):
		v = p.isKeyword("true")
	case p.isKeyword("null"):
		v = nil
	case t.kind == tokParam:
		raw, ok := p.params[t.str]
		if !ok {
			return nil, p.errAt(t.pos, "unknown parameter $%s", t.str)
		}
		k, n := classify(raw)
		if k > kindString {
			return nil, p.errAt(t.pos, "parameter $%s is %s: a parameter must be null, a bool, a number or a string (arrays and objects are not supported)", t.str, jsonKind(raw))
		}
		v = n
	default:
		return nil, p.unexpected("value")
	}
	p.advance()
	return v, nil
}
