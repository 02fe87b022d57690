// Package rql parses and evaluates a subset of RavenDB's query language
// (RQL) over JSON documents decoded into map[string]any:
//
//	from Orders where Company = $p0 and (Total > 100 or not Paid = true)
//	order by Total desc, id() limit 10 offset 20
//
// String equality is case-insensitive, a missing field equals null, and
// values of different types compare unequal, as in RavenDB.
package rql

import (
	"fmt"
	"strconv"
	"strings"
)

// Query is a parsed RQL query.
type Query struct {
	// Collection is the collection named after 'from' (empty if AllDocs).
	Collection string
	// AllDocs is true for 'from @all_docs'.
	AllDocs bool
	// Where filters documents; nil matches every document.
	Where Expr
	// OrderBy lists the sort keys, most significant first.
	OrderBy []OrderKey
	// Include lists the paths of fields whose values are ids of documents
	// to send with the results ("include Company, Lines[].Product"); an
	// array on a path is walked element by element, with or without its
	// "[]".
	Include [][]string
	// Limit is the maximum number of results, or -1 for no limit.
	Limit int
	// Offset is the number of leading results to skip.
	Offset int
}

// OrderKey is one 'order by' key.
type OrderKey struct {
	// Field is the path of the field to sort by (see Comparison.Field).
	Field []string
	// Desc is true for descending order.
	Desc bool
}

// Expr is a boolean where-clause expression: And, Or, Not or Comparison.
type Expr interface {
	// Eval reports whether doc satisfies the expression.
	Eval(doc map[string]any) bool
	// String returns the canonical, re-parseable form of the expression.
	String() string
}

// And is true when both operands are.
type And struct{ Left, Right Expr }

// Or is true when either operand is.
type Or struct{ Left, Right Expr }

// Not negates its operand.
type Not struct{ X Expr }

// Comparison compares a document field with a constant.
type Comparison struct {
	// Field is the path of nested object keys; id() is {"@metadata", "@id"}.
	Field []string
	// Op is the comparison operator.
	Op Op
	// Value is the constant: nil, bool, float64 or string.
	Value any
}

// Op is a comparison operator.
type Op int

// The comparison operators. '==' parses as Eq and '<>' as Ne.
const (
	Eq Op = iota // =
	Ne           // !=
	Lt           // <
	Le           // <=
	Gt           // >
	Ge           // >=
)

// String returns the canonical spelling of the operator.
func (o Op) String() string {
	if o < Eq || o > Ge {
		return "Op(" + strconv.Itoa(int(o)) + ")"
	}
	return [...]string{"=", "!=", "<", "<=", ">", ">="}[o]
}

// idPath is the field path that id() refers to.
var idPath = []string{"@metadata", "@id"}

// String returns the canonical form, e.g. "(A = 1 and (not B = 'x'))".
func (e *And) String() string { return "(" + e.Left.String() + " and " + e.Right.String() + ")" }

// String returns the canonical form, e.g. "(A = 1 or B = 2)".
func (e *Or) String() string { return "(" + e.Left.String() + " or " + e.Right.String() + ")" }

// String returns the canonical form, e.g. "(not A = 1)".
func (e *Not) String() string { return "(not " + e.X.String() + ")" }

// String returns the canonical form, e.g. "Address.City = 'London'".
func (c *Comparison) String() string {
	return formatField(c.Field) + " " + c.Op.String() + " " + formatValue(c.Value)
}

// String returns the canonical, re-parseable form of the query: keywords
// in lower case, operators normalized, parameters substituted, every
// and/or/not parenthesized, 'asc' and a zero offset omitted.
func (q *Query) String() string {
	var b strings.Builder
	b.WriteString("from ")
	switch {
	case q.AllDocs:
		b.WriteString("@all_docs")
	case isPlainIdent(q.Collection) && !collectionReserved[strings.ToLower(q.Collection)]:
		b.WriteString(q.Collection)
	default:
		b.WriteString(quote(q.Collection))
	}
	if q.Where != nil {
		b.WriteString(" where " + q.Where.String())
	}
	for i, k := range q.OrderBy {
		if i == 0 {
			b.WriteString(" order by ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(formatField(k.Field))
		if k.Desc {
			b.WriteString(" desc")
		}
	}
	for i, p := range q.Include {
		if i == 0 {
			b.WriteString(" include ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(formatPath(p))
	}
	if q.Limit >= 0 {
		b.WriteString(" limit " + strconv.Itoa(q.Limit))
	}
	if q.Offset > 0 {
		b.WriteString(" offset " + strconv.Itoa(q.Offset))
	}
	return b.String()
}

// formatField prints a field path, using id() for the document id.
func formatField(path []string) string {
	if len(path) == 2 && path[0] == idPath[0] && path[1] == idPath[1] {
		return "id()"
	}
	return formatPath(path)
}

// formatPath prints a field path segment by segment, quoting those that
// need it.
func formatPath(path []string) string {
	segs := make([]string, len(path))
	for i, seg := range path {
		if isFieldIdent(seg) && (i > 0 || !fieldReserved[strings.ToLower(seg)]) {
			segs[i] = seg
		} else {
			segs[i] = quote(seg)
		}
	}
	return strings.Join(segs, ".")
}

// formatValue prints a constant as an RQL literal.
func formatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return quote(x)
	}
	if k, n := classify(v); k == kindNumber {
		return formatValue(n)
	}
	return quote(fmt.Sprint(v))
}

// quote returns s as a single-quoted RQL string literal.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
