package rql

import (
	"strings"
)

// In is true when the field equals one of the values (by Eq's rules):
// "Name in ('ann', 'bob')", or "Name in ($p0)" with an array parameter,
// whose elements are the values, as RavenDB's clients send whereIn.
type In struct {
	Field  []string
	Values []any
}

// Between is true when the field is at least Low and at most High (by the
// rules of >= and <=): "Age between 18 and 65".
type Between struct {
	Field     []string
	Low, High any
}

// Call is one of RQL's predicate functions: startsWith(field, value) and
// endsWith(field, value), true when the field is a string that begins or
// ends with the value under the case folding '=' uses, and exists(field),
// true when the document has the field, whatever its value (null too).
type Call struct {
	Name  string // "startsWith", "endsWith" or "exists"
	Field []string
	Value any // the prefix or suffix; nil for exists
}

// functions are the predicate functions, by lower-cased name.
var functions = map[string]string{"startswith": "startsWith", "endswith": "endsWith", "exists": "exists"}

// Eval reports whether the field equals one of the values.
func (e *In) Eval(doc map[string]any) bool {
	field := lookup(doc, e.Field)
	for _, v := range e.Values {
		if fieldHolds(e.Field, field, Eq, v) {
			return true
		}
	}
	return false
}

// Eval reports whether the field lies within [Low, High].
func (e *Between) Eval(doc map[string]any) bool {
	field := lookup(doc, e.Field)
	return fieldHolds(e.Field, field, Ge, e.Low) && fieldHolds(e.Field, field, Le, e.High)
}

// Eval applies the function to the document.
func (e *Call) Eval(doc map[string]any) bool {
	if e.Name == "exists" {
		_, ok := lookupPresent(doc, e.Field)
		return ok
	}
	f, ok := lookup(doc, e.Field).(string)
	v, vok := e.Value.(string)
	if !ok || !vok {
		return false
	}
	fold := func(s string) string { return strings.Map(foldRune, s) }
	if isIDPath(e.Field) {
		// As id() compares: lower-cased whole, as ids are keyed.
		fold = strings.ToLower
	}
	if e.Name == "startsWith" {
		return strings.HasPrefix(fold(f), fold(v))
	}
	return strings.HasSuffix(fold(f), fold(v))
}

// String returns the canonical form, e.g. "Name in ('ann', 'bob')".
func (e *In) String() string {
	vs := make([]string, len(e.Values))
	for i, v := range e.Values {
		vs[i] = formatValue(v)
	}
	return formatField(e.Field) + " in (" + strings.Join(vs, ", ") + ")"
}

// String returns the canonical form, e.g. "Age between 18 and 65".
func (e *Between) String() string {
	return formatField(e.Field) + " between " + formatValue(e.Low) + " and " + formatValue(e.High)
}

// String returns the canonical form, e.g. "startsWith(Name, 'a')".
func (e *Call) String() string {
	if e.Name == "exists" {
		return "exists(" + formatField(e.Field) + ")"
	}
	return e.Name + "(" + formatField(e.Field) + ", " + formatValue(e.Value) + ")"
}

// lookupPresent is lookup that also says whether the path is there (a
// field holding null is).
func lookupPresent(doc map[string]any, path []string) (any, bool) {
	var cur any = doc
	for _, seg := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[seg]; !ok {
			return nil, false
		}
	}
	return cur, true
}
