package changevector

import (
	"errors"
	"strings"
	"testing"
)

func mustVector(t testing.TB, s string) Vector {
	t.Helper()
	v, err := ParseVector(s)
	if err != nil {
		t.Fatalf("ParseVector(%q): %v", s, err)
	}
	return v
}

func mustParse(t testing.TB, s string) ChangeVector {
	t.Helper()
	c, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return c
}

func TestParseVector(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		entries  Vector // checked when non-nil
	}{
		{in: "", want: ""},
		{in: " \t\n ", want: ""},
		{in: "A:1-x", want: "A:1-x", entries: Vector{{"A", 1, "x"}}},
		{in: "A:0-x", want: "A:0-x", entries: Vector{{"A", 0, "x"}}},
		{in: "A:3-dbid1, B:7-dbid2", want: "A:3-dbid1, B:7-dbid2"},
		{in: "B:7-dbid2,A:3-dbid1", want: "A:3-dbid1, B:7-dbid2", entries: Vector{{"A", 3, "dbid1"}, {"B", 7, "dbid2"}}},
		{in: "  C:1-c \t,\n\rB:2-b ,A:3-a  ", want: "A:3-a, B:2-b, C:1-c"},
		{in: "MOVE:2-m, A:5-x", want: "MOVE:2-m, A:5-x", entries: Vector{{"MOVE", 2, "m"}, {"A", 5, "x"}}},
		{in: "ZZZZ:18446744073709551615-a-b_c+d/e", want: "ZZZZ:18446744073709551615-a-b_c+d/e",
			entries: Vector{{"ZZZZ", 1<<64 - 1, "a-b_c+d/e"}}},
		{in: "A:1-" + strings.Repeat("x", 64), want: "A:1-" + strings.Repeat("x", 64)},
		{in: "AB:12-kqV3vJ5cRqWQ0q9v7u7j3w", want: "AB:12-kqV3vJ5cRqWQ0q9v7u7j3w"},
		// DBIDs sort bytewise: uppercase before lowercase, '-' before digits.
		{in: "A:1-b, A:1-B, A:1--, A:1-0", want: "A:1--, A:1-0, A:1-B, A:1-b"},
	} {
		v, err := ParseVector(tc.in)
		if err != nil {
			t.Errorf("ParseVector(%q): %v", tc.in, err)
			continue
		}
		if got := v.String(); got != tc.want {
			t.Errorf("ParseVector(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
		if tc.entries != nil && !v.Equal(tc.entries) {
			t.Errorf("ParseVector(%q) = %#v, want %#v", tc.in, v, tc.entries)
		}
		if err := v.Validate(); err != nil {
			t.Errorf("ParseVector(%q) not valid: %v", tc.in, err)
		}
		if tc.want == "" && v != nil {
			t.Errorf("ParseVector(%q) = %#v, want nil", tc.in, v)
		}
	}
}

func TestParseVectorErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"A:1-x|A:1-x", `parse change vector "A:1-x|A:1-x": unexpected '|' at offset 5 in plain change vector`},
		{"A:1-x, X", `parse change vector "A:1-x, X": entry 2 "X": missing ':'`},
		{"A:1-x,", `entry 2 "": empty entry`},
		{",A:1-x", `entry 1 "": empty entry`},
		{"A:1-x,, B:1-y", `entry 2 "": empty entry`},
		{" , ", `entry 1 "": empty entry`},
		{":1-x", `tag "" must be 1-4 letters A-Z`},
		{"a:1-x", `tag "a" must be 1-4 letters A-Z`},
		{"ABCDE:1-x", `tag "ABCDE" must be 1-4 letters A-Z`},
		{"A B:1-x", `tag "A B" must be 1-4 letters A-Z`},
		{"A :1-x", `tag "A " must be 1-4 letters A-Z`},
		{"Ä:1-x", `must be 1-4 letters A-Z`},
		{"A:1x", `missing '-' between etag and database id`},
		{"A:-x", `empty etag`},
		{"A:+1-x", `etag "+1" is not a decimal number`},
		{"A:-1-x", `empty etag`},
		{"A:1 -x", `etag "1 " is not a decimal number`},
		{"A:01-x", `etag "01" has a leading zero`},
		{"A:00-x", `etag "00" has a leading zero`},
		{"A:18446744073709551616-x", `etag "18446744073709551616" overflows uint64`},
		{"A:99999999999999999999-x", `overflows uint64`},
		{"A:1-", `database id "" must be 1-64 characters`},
		{"A:1-" + strings.Repeat("x", 65), `must be 1-64 characters`},
		{"A:1-x y", `database id "x y" has a character outside`},
		{"A:1-x=", `has a character outside`},
		{"A:1-x:y", `has a character outside`},
		{"A:1-x, B:2-x", `parse change vector "A:1-x, B:2-x": duplicate database id "x"`},
		{"B:2-y, A:1-x, C:3-y", `duplicate database id "y"`},
	} {
		v, err := ParseVector(tc.in)
		if err == nil {
			t.Errorf("ParseVector(%q) = %q, want error", tc.in, v)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseVector(%q) error %q, want it to contain %q", tc.in, err, tc.want)
		}
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Input != tc.in {
			t.Errorf("ParseVector(%q) error %#v is not a *ParseError for the input", tc.in, err)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, want         string
		order, version   string
		composite, empty bool
	}{
		{in: "", want: "", empty: true},
		{in: "   ", want: "", empty: true},
		{in: "|", want: "", empty: true},
		{in: " | ", want: "", empty: true},
		{in: "A:1-x", want: "A:1-x", order: "A:1-x", version: "A:1-x"},
		{in: "B:1-y,A:1-x", want: "A:1-x, B:1-y", order: "A:1-x, B:1-y", version: "A:1-x, B:1-y"},
		{in: "A:1-x|A:1-x", want: "A:1-x", order: "A:1-x", version: "A:1-x"},
		{in: "A:1-x | B:1-y,A:1-x", want: "A:1-x|A:1-x, B:1-y", order: "A:1-x", version: "A:1-x, B:1-y", composite: true},
		{in: "MOVE:3-m, C:10-z|A:5-x, B:2-y", want: "MOVE:3-m, C:10-z|A:5-x, B:2-y",
			order: "MOVE:3-m, C:10-z", version: "A:5-x, B:2-y", composite: true},
		{in: "|A:1-x", want: "|A:1-x", order: "", version: "A:1-x", composite: true},
		{in: "A:1-x|", want: "A:1-x|", order: "A:1-x", version: "", composite: true},
		// Same causal content, different tag: still composite (text differs).
		{in: "A:1-x|B:1-x", want: "A:1-x|B:1-x", order: "A:1-x", version: "B:1-x", composite: true},
	} {
		c, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got := c.String(); got != tc.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
		if c.IsComposite() != tc.composite {
			t.Errorf("Parse(%q).IsComposite() = %v, want %v", tc.in, c.IsComposite(), tc.composite)
		}
		if got := c.Order.String(); got != tc.order {
			t.Errorf("Parse(%q).Order = %q, want %q", tc.in, got, tc.order)
		}
		if got := c.Version.String(); got != tc.version {
			t.Errorf("Parse(%q).Version = %q, want %q", tc.in, got, tc.version)
		}
		if tc.empty && !c.Equal(ChangeVector{}) {
			t.Errorf("Parse(%q) = %#v, want zero", tc.in, c)
		}
		if c2 := mustParse(t, c.String()); !c2.Equal(c) {
			t.Errorf("Parse(%q) = %#v does not round-trip: %#v", tc.in, c, c2)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"A:1-x|B:1-y|C:1-z", `parse change vector "A:1-x|B:1-y|C:1-z": more than one '|' (second at offset 11)`},
		{"||", `more than one '|' (second at offset 1)`},
		{"A:1-x, Q|B:1-y", `parse change vector "A:1-x, Q|B:1-y": order part: entry 2 "Q": missing ':'`},
		{"A:1-x|B:1-y, B:01-z", `version part: entry 2 "B:01-z": etag "01" has a leading zero`},
		{"A:1-x|B:1-y, C:1-y", `version part: duplicate database id "y"`},
		{"A:1-x, X", `parse change vector "A:1-x, X": entry 2 "X": missing ':'`},
		{strings.Repeat("A", 300), `parse change vector "` + strings.Repeat("A", 200) + `...": entry 1`},
	} {
		c, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) = %q, want error", tc.in, c)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) error %q, want it to contain %q", tc.in, err, tc.want)
		}
	}
}

func TestRelationString(t *testing.T) {
	for r, want := range map[Relation]string{Equal: "Equal", Newer: "Newer", Older: "Older", Conflict: "Conflict", 7: "Relation(7)"} {
		if got := r.String(); got != want {
			t.Errorf("Relation(%d).String() = %q, want %q", int(r), got, want)
		}
	}
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want Relation
	}{
		{"", "", Equal},
		{"A:1-x", "A:1-x", Equal},
		{"A:1-x", "B:1-x", Equal}, // tags ignored
		{"A:0-x", "", Equal},      // missing counts as 0
		{"A:1-x", "", Newer},
		{"", "A:1-x", Older},
		{"A:2-x", "A:1-x", Newer},
		{"A:1-x, B:2-y", "A:1-x", Newer},
		{"A:1-x, B:2-y", "A:1-x, B:2-y, C:0-z", Equal},
		{"A:1-x, B:2-y", "A:2-x, B:1-y", Conflict},
		{"A:1-x", "B:1-y", Conflict},
		{"A:5-x, C:1-z", "A:5-x, B:1-y", Conflict},
		{"A:5-x, B:3-y, C:1-z", "A:4-x, B:3-y", Newer},
		{"A:18446744073709551615-x", "A:18446744073709551614-x", Newer},
	} {
		a, b := mustVector(t, tc.a), mustVector(t, tc.b)
		if got := Compare(a, b); got != tc.want {
			t.Errorf("Compare(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got, want := a.Covers(b), tc.want == Equal || tc.want == Newer; got != want {
			t.Errorf("%q.Covers(%q) = %v, want %v", tc.a, tc.b, got, want)
		}
	}
}

func TestMerge(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{"", "", ""},
		{"A:1-x", "", "A:1-x"},
		{"", "A:1-x", "A:1-x"},
		{"A:1-x", "B:2-x", "B:2-x"},
		{"A:3-x", "B:2-x", "A:3-x"},
		{"B:2-x", "A:2-x", "A:2-x"}, // equal etag: smaller tag
		{"A:2-x", "B:2-x", "A:2-x"},
		{"A:1-x, C:5-z", "B:2-y, C:4-z", "A:1-x, B:2-y, C:5-z"},
		{"A:1-x, B:9-y", "A:7-x, C:1-z", "A:7-x, B:9-y, C:1-z"},
		{"MOVE:1-m, A:1-x", "MOVE:2-m", "MOVE:2-m, A:1-x"},
	} {
		a, b := mustVector(t, tc.a), mustVector(t, tc.b)
		if got := Merge(a, b).String(); got != tc.want {
			t.Errorf("Merge(%q, %q) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
	if m := Merge(nil, Vector{}); m != nil {
		t.Errorf("Merge(nil, empty) = %#v, want nil", m)
	}
}

func TestMergeDoesNotAlias(t *testing.T) {
	a, b := mustVector(t, "A:1-x, B:1-y"), mustVector(t, "A:2-x")
	m := Merge(a, b)
	m[1].Etag = 99
	if a.String() != "A:1-x, B:1-y" || b.String() != "A:2-x" {
		t.Fatalf("Merge result aliases its inputs: a=%q b=%q", a, b)
	}
}

func TestEtagOfWith(t *testing.T) {
	v := mustVector(t, "A:3-b, B:7-d")
	for id, want := range map[string]uint64{"b": 3, "d": 7, "a": 0, "c": 0, "e": 0} {
		if got := v.EtagOf(id); got != want {
			t.Errorf("EtagOf(%q) = %d, want %d", id, got, want)
		}
	}
	for _, tc := range []struct {
		tag  string
		etag uint64
		dbid string
		want string
	}{
		{"C", 1, "a", "C:1-a, A:3-b, B:7-d"},
		{"C", 1, "c", "A:3-b, C:1-c, B:7-d"},
		{"C", 1, "e", "A:3-b, B:7-d, C:1-e"},
		{"C", 9, "b", "C:9-b, B:7-d"},
		{"C", 1, "d", "A:3-b, C:1-d"}, // replaces, even with a lower etag
	} {
		got := v.With(tc.tag, tc.etag, tc.dbid)
		if got.String() != tc.want {
			t.Errorf("With(%q, %d, %q) = %q, want %q", tc.tag, tc.etag, tc.dbid, got, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("With(%q, %d, %q): %v", tc.tag, tc.etag, tc.dbid, err)
		}
	}
	if v.String() != "A:3-b, B:7-d" {
		t.Errorf("With modified its receiver: %q", v)
	}
	if got := Vector(nil).With("A", 1, "x").String(); got != "A:1-x" {
		t.Errorf("nil.With = %q", got)
	}
	for _, bad := range []Entry{{"a", 1, "x"}, {"A", 1, ""}, {"A", 1, "x y"}, {"ABCDE", 1, "x"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("With(%q, %d, %q) did not panic", bad.Tag, bad.Etag, bad.DBID)
				}
			}()
			v.With(bad.Tag, bad.Etag, bad.DBID)
		}()
	}
}

func TestValidate(t *testing.T) {
	for _, v := range []Vector{
		{{"A", 1, "y"}, {"A", 1, "x"}},
		{{"A", 1, "x"}, {"B", 1, "x"}},
		{{"a", 1, "x"}},
		{{"A", 1, "x|"}},
	} {
		if err := v.Validate(); err == nil {
			t.Errorf("%#v.Validate() = nil, want error", v)
		}
	}
}

func TestStripMove(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"A:1-x", "A:1-x"},
		{"MOVE:1-m", ""},
		{"MOVE:1-m, A:1-x", "A:1-x"},
		{"A:1-a, MOVE:1-m, B:2-y, MOVE:4-n", "A:1-a, B:2-y"},
		{"MOVE:3-m, C:10-z|A:5-x, B:2-y", "C:10-z|A:5-x, B:2-y"},
		{"MOVE:3-m, A:5-x|A:5-x", "A:5-x"}, // becomes plain
		{"MOVE:3-m|", ""},
		{"MOVE:3-m, A:5-x|MOVE:1-n, A:5-x", "A:5-x"},
	} {
		c := mustParse(t, tc.in)
		s := c.StripMove()
		if got := s.String(); got != tc.want {
			t.Errorf("Parse(%q).StripMove() = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(s.String(), MoveTag) {
			t.Errorf("StripMove left a MOVE entry: %q", s)
		}
		if c.String() != mustParse(t, tc.in).String() {
			t.Errorf("StripMove modified its receiver")
		}
	}
	if v := mustVector(t, "MOVE:1-m").StripMove(); v != nil {
		t.Errorf("StripMove to empty = %#v, want nil", v)
	}
}

func TestChangeVectorMerge(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{"", "", ""},
		{"A:1-x", "A:2-x", "A:2-x"},
		{"A:1-x", "B:1-y", "A:1-x, B:1-y"},
		{"MOVE:1-m, C:1-z|A:5-x", "A:6-x", "MOVE:1-m, A:6-x, C:1-z|A:6-x"},
		{"MOVE:1-m, C:1-z|A:5-x", "MOVE:2-m, C:3-z|A:5-x, B:1-y", "MOVE:2-m, C:3-z|A:5-x, B:1-y"},
		// Merging can make the parts equal again: the result is plain.
		{"A:1-x|A:2-x", "A:2-x", "A:2-x"},
	} {
		a, b := mustParse(t, tc.a), mustParse(t, tc.b)
		if got := a.Merge(b).String(); got != tc.want {
			t.Errorf("%q.Merge(%q) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
		if got := b.Merge(a).String(); got != tc.want {
			t.Errorf("%q.Merge(%q) = %q, want %q", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestPlainComposite(t *testing.T) {
	v := mustVector(t, "A:1-x")
	if p := Plain(v); p.IsComposite() || p.String() != "A:1-x" {
		t.Errorf("Plain = %#v", p)
	}
	w := mustVector(t, "B:1-y")
	c := Composite(v, w)
	if !c.IsComposite() || c.String() != "A:1-x|B:1-y" || !c.Order.Equal(v) || !c.Version.Equal(w) {
		t.Errorf("Composite = %#v", c)
	}
	if Composite(v, mustVector(t, "A:1-x")).IsComposite() {
		t.Errorf("Composite of equal parts is composite")
	}
}

func TestNewDatabaseID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewDatabaseID()
		if len(id) != 22 {
			t.Fatalf("NewDatabaseID() = %q, want 22 chars", id)
		}
		if msg := checkDBID(id); msg != "" {
			t.Fatalf("NewDatabaseID() = %q: %s", id, msg)
		}
		if seen[id] {
			t.Fatalf("NewDatabaseID() repeated %q", id)
		}
		seen[id] = true
		if _, err := ParseVector("A:1-" + id); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEntryString(t *testing.T) {
	if got := (Entry{"MOVE", 12, "m-1"}).String(); got != "MOVE:12-m-1" {
		t.Errorf("Entry.String() = %q", got)
	}
}

// TestAllocs pins the allocation counts of the write-path operations.
func TestAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	const s = "A:1234-kqV3vJ5cRqWQ0q9v7u7j3w, B:98765-mZ2pYq0u1xWQ0q9v7u7j3w, C:5-zZ2pYq0u1xWQ0q9v7u7j3w"
	c := mustParse(t, s)
	for name, tc := range map[string]struct {
		f    func()
		want float64
	}{
		"ParsePlain":     {func() { _, _ = Parse(s) }, 1},
		"ParseComposite": {func() { _, _ = Parse(s + "|" + s) }, 2},
		"String":         {func() { _ = c.String() }, 1},
		"Merge":          {func() { _ = Merge(c.Order, c.Version) }, 1},
		"Compare":        {func() { _ = Compare(c.Order, c.Version) }, 0},
	} {
		if got := testing.AllocsPerRun(100, tc.f); got > tc.want {
			t.Errorf("%s: %v allocs, want <= %v", name, got, tc.want)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	const plain = "A:1234-kqV3vJ5cRqWQ0q9v7u7j3w, B:98765-mZ2pYq0u1xWQ0q9v7u7j3w, C:5-zZ2pYq0u1xWQ0q9v7u7j3w"
	for _, bc := range []struct{ name, s string }{
		{"plain", plain},
		{"composite", "MOVE:3-aZ2pYq0u1xWQ0q9v7u7j3w, D:17-bZ2pYq0u1xWQ0q9v7u7j3w|" + plain},
		{"unsorted", "C:5-zZ2pYq0u1xWQ0q9v7u7j3w, B:98765-mZ2pYq0u1xWQ0q9v7u7j3w, A:1234-kqV3vJ5cRqWQ0q9v7u7j3w"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(bc.s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkString(b *testing.B) {
	c := mustParse(b, "MOVE:3-aZ2pYq0u1xWQ0q9v7u7j3w, D:17-bZ2pYq0u1xWQ0q9v7u7j3w|A:1234-kqV3vJ5cRqWQ0q9v7u7j3w, B:98765-mZ2pYq0u1xWQ0q9v7u7j3w")
	b.ReportAllocs()
	for b.Loop() {
		_ = c.String()
	}
}

func BenchmarkMerge(b *testing.B) {
	x := mustVector(b, "A:1234-kqV3vJ5cRqWQ0q9v7u7j3w, B:98765-mZ2pYq0u1xWQ0q9v7u7j3w, C:5-zZ2pYq0u1xWQ0q9v7u7j3w")
	y := mustVector(b, "A:1235-kqV3vJ5cRqWQ0q9v7u7j3w, B:98764-mZ2pYq0u1xWQ0q9v7u7j3w, D:5-0Z2pYq0u1xWQ0q9v7u7j3w")
	b.ReportAllocs()
	for b.Loop() {
		_ = Merge(x, y)
	}
}

func BenchmarkCompare(b *testing.B) {
	x := mustVector(b, "A:1234-kqV3vJ5cRqWQ0q9v7u7j3w, B:98765-mZ2pYq0u1xWQ0q9v7u7j3w, C:5-zZ2pYq0u1xWQ0q9v7u7j3w")
	y := mustVector(b, "A:1234-kqV3vJ5cRqWQ0q9v7u7j3w, B:98764-mZ2pYq0u1xWQ0q9v7u7j3w")
	b.ReportAllocs()
	for b.Loop() {
		_ = Compare(x, y)
	}
}
