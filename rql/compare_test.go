package rql

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestCompareValues(t *testing.T) {
	tests := []struct {
		a, b any
		want int
	}{
		{nil, nil, 0},
		{nil, false, -1},
		{false, true, -1},
		{true, true, 0},
		{true, -1e300, -1},
		{1, 2.5, -1},
		{int64(3), uint8(3), 0},
		{json.Number("2"), 2.0, 0},
		{json.Number("-1.5"), float32(-1.5), 0},
		{math.NaN(), math.Inf(-1), -1},
		{1e300, "", -1},
		{"a", "B", -1},
		{"b", "A", 1},
		{"a", "A", 1}, // equal ignoring case: ordinal tie-break
		{"abc", "ABC", 1},
		{"ab", "abc", -1},
		{"Straße", "STRASSE", 1}, // simple folding only: ß vs S
		{"σ", "Σ", 1},
		{"ς", "σ", -1},
		{"z", []any{}, -1},
		{[]any{1.0}, []any{1.0, nil}, -1},
		{[]any{2.0}, []any{1.0, nil}, 1},
		{[]any{"A"}, []any{"a"}, -1},
		{[]any{}, map[string]any{}, -1},
		{map[string]any{"a": 1.0}, map[string]any{"a": 2.0}, -1},
		{map[string]any{"a": 1.0}, map[string]any{"b": 0.0}, -1},
		{map[string]any{"a": 1.0}, map[string]any{"a": 1.0, "b": nil}, -1},
		{map[string]any{"a": 1}, map[string]any{"a": json.Number("1")}, 0},
		{map[string]any{}, struct{}{}, -1},
	}
	for _, tt := range tests {
		if got := CompareValues(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareValues(%#v, %#v) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := CompareValues(tt.b, tt.a); got != -tt.want {
			t.Errorf("CompareValues(%#v, %#v) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

// genValue generates JSON-like values of every kind, with strings drawn
// from a small alphabet full of case-folding collisions.
func genValue(depth int) *rapid.Generator[any] {
	scalar := rapid.OneOf(
		rapid.Just[any](nil),
		rapid.Just[any](math.NaN()),
		rapid.Map(rapid.Bool(), func(b bool) any { return b }),
		rapid.Map(rapid.Float64(), func(f float64) any { return f }),
		rapid.Map(rapid.IntRange(-3, 3), func(i int) any { return i }),
		rapid.Map(rapid.IntRange(-3, 3), func(i int) any { return json.Number(strconv.Itoa(i)) }),
		rapid.Map(rapid.StringMatching(`[aAbB_kKsSſσςΣ\x{212A}\xff]{0,3}`), func(s string) any { return s }),
		rapid.Map(rapid.String(), func(s string) any { return s }),
	)
	if depth == 0 {
		return scalar
	}
	inner := genValue(depth - 1)
	return rapid.OneOf(scalar, scalar,
		rapid.Map(rapid.SliceOfN(inner, 0, 3), func(s []any) any { return s }),
		rapid.Map(rapid.MapOfN(rapid.SampledFrom([]string{"a", "b", "c"}), inner, 0, 3),
			func(m map[string]any) any { return m }),
	)
}

func sign(c int) int { return min(max(c, -1), 1) }

func TestCompareValuesTotalOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := genValue(2)
		a, b, c := g.Draw(t, "a"), g.Draw(t, "b"), g.Draw(t, "c")
		ab, bc, ac := CompareValues(a, b), CompareValues(b, c), CompareValues(a, c)
		if CompareValues(a, a) != 0 {
			t.Fatalf("not reflexive: %#v", a)
		}
		if sign(ab) != -sign(CompareValues(b, a)) {
			t.Fatalf("not antisymmetric: %#v vs %#v", a, b)
		}
		if ab <= 0 && bc <= 0 && ac > 0 || ab == 0 && bc == 0 && ac != 0 {
			t.Fatalf("not transitive: a=%#v b=%#v c=%#v (ab=%d bc=%d ac=%d)", a, b, c, ab, bc, ac)
		}
	})
}

func TestCompareValuesSortConsistent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(genValue(1), 0, 12).Draw(t, "xs")
		slices.SortFunc(xs, CompareValues)
		for i := range xs {
			for j := i + 1; j < len(xs); j++ {
				if CompareValues(xs[i], xs[j]) > 0 {
					t.Fatalf("sorted slice out of order at %d,%d: %#v", i, j, xs)
				}
			}
		}
	})
}

func TestStringEqualityIsEqualFold(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.StringMatching(`[aAbBkKsSſσςΣ\x{212A}\x{FFFD}\xff]{0,4}`)
		a, b := s.Draw(t, "a"), s.Draw(t, "b")
		if got, want := evalOp(a, Eq, b), strings.EqualFold(a, b); got != want {
			t.Fatalf("evalOp(%q = %q) = %v, EqualFold = %v", a, b, got, want)
		}
		if lt, gt, eq := evalOp(a, Lt, b), evalOp(a, Gt, b), evalOp(a, Eq, b); lt && gt || (lt || gt) == eq {
			t.Fatalf("%q vs %q: lt=%v gt=%v eq=%v", a, b, lt, gt, eq)
		}
	})
}
