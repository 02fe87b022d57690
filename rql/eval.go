package rql

import (
	"cmp"
	"slices"
	"strings"
)

// Eval reports whether both operands match doc.
func (e *And) Eval(doc map[string]any) bool { return e.Left.Eval(doc) && e.Right.Eval(doc) }

// Eval reports whether either operand matches doc.
func (e *Or) Eval(doc map[string]any) bool { return e.Left.Eval(doc) || e.Right.Eval(doc) }

// Eval reports whether the operand does not match doc.
func (e *Not) Eval(doc map[string]any) bool { return !e.X.Eval(doc) }

// Eval compares the field of doc with the constant. A missing field is
// null; null equals only null and is not ordered; strings compare
// case-insensitively; values of different types are unequal and unordered.
func (c *Comparison) Eval(doc map[string]any) bool {
	return fieldHolds(c.Field, lookup(doc, c.Field), c.Op, c.Value)
}

// fieldHolds applies op to the value field found at path and the constant
// v.
func fieldHolds(path []string, field any, op Op, v any) bool {
	if isIDPath(path) {
		// id() compares as the store keys ids: lower-cased whole, so a
		// query finds by id exactly what a GET finds (simple case folding
		// would also equate, say, a final sigma with a medial one).
		if f, ok := field.(string); ok {
			if l, ok := v.(string); ok {
				return opHolds(op, strings.Compare(strings.ToLower(f), strings.ToLower(l)))
			}
		}
	}
	return evalOp(field, op, v)
}

// isIDPath reports whether path is id()'s.
func isIDPath(path []string) bool { return slices.Equal(path, idPath) }

// EmptyCollection is RavenDB's name for the documents of no collection:
// "from @empty" covers them.
const EmptyCollection = "@empty"

// InCollection reports whether a document of collection c ("" for none)
// is in the query's source.
func (q *Query) InCollection(c string) bool {
	switch {
	case q.AllDocs:
		return true
	case strings.EqualFold(q.Collection, EmptyCollection):
		return c == "" || strings.EqualFold(c, EmptyCollection)
	}
	return strings.EqualFold(c, q.Collection)
}

// Matches reports whether doc is in the query's collection (compared
// case-insensitively with @metadata.@collection, missing for none) and
// satisfies Where.
func (q *Query) Matches(doc map[string]any) bool {
	c, _ := lookup(doc, []string{"@metadata", "@collection"}).(string)
	return q.InCollection(c) && (q.Where == nil || q.Where.Eval(doc))
}

// Compare orders two documents by the query's order-by keys using
// CompareValues. It returns 0 for ties; callers break ties (e.g. by id).
func (q *Query) Compare(a, b map[string]any) int {
	for _, k := range q.OrderBy {
		va, vb := lookup(a, k.Field), lookup(b, k.Field)
		ia, aok := va.(string)
		ib, bok := vb.(string)
		var c int
		if aok && bok && slices.Equal(k.Field, idPath) {
			// As id() compares in a where: lower-cased, the order of the
			// listing and of the store's keys.
			c = cmp.Or(strings.Compare(strings.ToLower(ia), strings.ToLower(ib)), strings.Compare(ia, ib))
		} else {
			c = CompareValues(va, vb)
		}
		if k.Desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

// lookup returns the value at path in doc, or nil if any step is missing
// or not an object.
func lookup(doc map[string]any, path []string) any {
	v, _ := lookupPresent(doc, path)
	return v
}

// evalOp applies op to a field value and a constant.
func evalOp(field any, op Op, lit any) bool {
	fk, fv := classify(field)
	lk, lv := classify(lit)
	if fk != lk || fk == kindNull || fk > kindString {
		eq := fk == kindNull && lk == kindNull
		return op == Eq && eq || op == Ne && !eq
	}
	var c int
	switch fk {
	case kindBool:
		c = compareBools(fv.(bool), lv.(bool))
	case kindNumber:
		c = cmp.Compare(fv.(float64), lv.(float64))
	default:
		c = foldCompare(fv.(string), lv.(string))
	}
	return opHolds(op, c)
}

// opHolds reports whether op holds for a comparison result c (<0, 0, >0).
func opHolds(op Op, c int) bool {
	switch op {
	case Eq:
		return c == 0
	case Ne:
		return c != 0
	case Lt:
		return c < 0
	case Le:
		return c <= 0
	case Gt:
		return c > 0
	case Ge:
		return c >= 0
	}
	return false
}
