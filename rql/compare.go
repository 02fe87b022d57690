package rql

import (
	"cmp"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// kind ranks the JSON value types in CompareValues order.
type kind int

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
	kindOther
)

// classify returns the kind of v and v normalized: numbers (any Go
// numeric type or a valid json.Number) become float64, bools and strings
// of named types become bool and string.
func classify(v any) (kind, any) {
	switch x := v.(type) {
	case nil:
		return kindNull, nil
	case bool:
		return kindBool, x
	case float64:
		return kindNumber, x
	case string:
		return kindString, x
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return kindString, string(x)
		}
		return kindNumber, f
	case []any:
		return kindArray, x
	case map[string]any:
		return kindObject, x
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Bool:
		return kindBool, rv.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return kindNumber, float64(rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return kindNumber, float64(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return kindNumber, rv.Float()
	case reflect.String:
		return kindString, rv.String()
	}
	return kindOther, nil
}

// CompareValues returns -1, 0 or +1 ordering a before, equal to or after
// b under a total order across JSON types: null (or missing) < false <
// true < numbers < strings < arrays < objects < other Go values (all
// equal). Numbers compare numerically whatever their Go type (NaN first);
// strings compare case-insensitively (like .NET OrdinalIgnoreCase), then
// ordinally; arrays element-wise then by length; objects by their
// (key, value) pairs in key order.
func CompareValues(a, b any) int {
	ka, va := classify(a)
	kb, vb := classify(b)
	if ka != kb {
		return cmp.Compare(ka, kb)
	}
	switch ka {
	case kindBool:
		return compareBools(va.(bool), vb.(bool))
	case kindNumber:
		return cmp.Compare(va.(float64), vb.(float64))
	case kindString:
		x, y := va.(string), vb.(string)
		if c := foldCompare(x, y); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	case kindArray:
		return slices.CompareFunc(va.([]any), vb.([]any), CompareValues)
	case kindObject:
		return compareObjects(va.(map[string]any), vb.(map[string]any))
	}
	return 0
}

// compareBools orders false before true.
func compareBools(a, b bool) int {
	toInt := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	return cmp.Compare(toInt(a), toInt(b))
}

// compareObjects compares objects as sequences of (key, value) pairs
// sorted by key.
func compareObjects(a, b map[string]any) int {
	ka, kb := slices.Sorted(maps.Keys(a)), slices.Sorted(maps.Keys(b))
	for i := 0; i < len(ka) && i < len(kb); i++ {
		if c := strings.Compare(ka[i], kb[i]); c != 0 {
			return c
		}
		if c := CompareValues(a[ka[i]], b[kb[i]]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(ka), len(kb))
}

// foldCompare compares strings rune by rune under simple Unicode case
// folding; it returns 0 exactly when strings.EqualFold(a, b).
func foldCompare(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if fa, fb := foldRune(ra), foldRune(rb); fa != fb {
			return cmp.Compare(fa, fb)
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// foldRune maps r to one rune of its case-folding orbit, the same for
// every rune of it: the lower case of the orbit's smallest rune, so ASCII
// letters sort as lower case ("a_b" < "apple", as the listing and id()
// order ids, and as RavenDB's lower-cased index terms sort), and runes
// that fold together (k, K and the Kelvin sign) are equal.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	return unicode.ToLower(least)
}
