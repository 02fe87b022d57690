package changevector

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// Small pools make overlapping database ids, equal etags and tag ties common.
var (
	genTag  = rapid.OneOf(rapid.SampledFrom([]string{"A", "B", "C", "AB", "Z", MoveTag}), rapid.StringMatching(`[A-Z]{1,4}`))
	genDBID = rapid.OneOf(rapid.SampledFrom([]string{"x", "y", "z", "X", "-", "a-b", "kqV3vJ5cRqWQ0q9v7u7j3w"}), rapid.StringMatching(`[A-Za-z0-9+/_-]{1,64}`))
	genEtag = rapid.OneOf(rapid.Uint64Range(0, 4), rapid.Uint64(), rapid.Just(uint64(1<<64-1)))

	genEntry = rapid.Custom(func(t *rapid.T) Entry {
		return Entry{Tag: genTag.Draw(t, "tag"), Etag: genEtag.Draw(t, "etag"), DBID: genDBID.Draw(t, "dbid")}
	})

	// genVector builds valid vectors through With, so it also exercises With.
	genVector = rapid.Custom(func(t *rapid.T) Vector {
		var v Vector
		for _, e := range rapid.SliceOfN(genEntry, 0, 8).Draw(t, "entries") {
			v = v.With(e.Tag, e.Etag, e.DBID)
		}
		return v
	})

	genCV = rapid.Custom(func(t *rapid.T) ChangeVector {
		version := genVector.Draw(t, "version")
		if rapid.Bool().Draw(t, "plain") {
			return Plain(version)
		}
		return Composite(genVector.Draw(t, "order"), version)
	})
)

// format writes v in a random but valid non-canonical way: entries shuffled,
// random whitespace around commas and at the ends.
func format(t *rapid.T, v Vector) string {
	space := rapid.StringOfN(rapid.RuneFrom([]rune(" \t\n\r\v\f")), 0, 3, -1)
	var b strings.Builder
	b.WriteString(space.Draw(t, "lead"))
	for i, e := range rapid.Permutation(v).Draw(t, "perm") {
		if i > 0 {
			b.WriteString(space.Draw(t, "before"))
			b.WriteByte(',')
			b.WriteString(space.Draw(t, "after"))
		}
		b.WriteString(e.String())
	}
	b.WriteString(space.Draw(t, "trail"))
	return b.String()
}

func TestPropVectorRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := genVector.Draw(t, "v")
		if err := v.Validate(); err != nil {
			t.Fatalf("generated vector invalid: %v", err)
		}
		s := v.String()
		p, err := ParseVector(s)
		if err != nil {
			t.Fatalf("ParseVector(%q): %v", s, err)
		}
		if !p.Equal(v) {
			t.Fatalf("ParseVector(%q) = %#v, want %#v", s, p, v)
		}
		if p.String() != s {
			t.Fatalf("String not idempotent: %q -> %q", s, p.String())
		}
		messy := format(t, v)
		q, err := ParseVector(messy)
		if err != nil {
			t.Fatalf("ParseVector(%q): %v", messy, err)
		}
		if !q.Equal(v) || q.String() != s {
			t.Fatalf("ParseVector(%q) = %q, want %q", messy, q, s)
		}
	})
}

func TestPropChangeVectorRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genCV.Draw(t, "c")
		s := c.String()
		if c.IsComposite() != strings.Contains(s, "|") {
			t.Fatalf("IsComposite = %v for %q", c.IsComposite(), s)
		}
		p, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if !p.Equal(c) || p.String() != s {
			t.Fatalf("Parse(%q) = %#v, want %#v", s, p, c)
		}
		// Non-canonical spelling of each part parses to the same value.
		messy := format(t, c.Order) + "|" + format(t, c.Version)
		q, err := Parse(messy)
		if err != nil {
			t.Fatalf("Parse(%q): %v", messy, err)
		}
		if !q.Equal(c) {
			t.Fatalf("Parse(%q) = %q, want %q", messy, q, s)
		}
	})
}

func TestPropMergeLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := genVector.Draw(t, "a"), genVector.Draw(t, "b"), genVector.Draw(t, "c")
		ab := Merge(a, b)
		if err := ab.Validate(); err != nil {
			t.Fatalf("Merge invalid: %v", err)
		}
		if ba := Merge(b, a); !ab.Equal(ba) {
			t.Fatalf("not commutative: %q vs %q", ab, ba)
		}
		if l, r := Merge(ab, c), Merge(a, Merge(b, c)); !l.Equal(r) {
			t.Fatalf("not associative: %q vs %q", l, r)
		}
		if aa := Merge(a, a); !aa.Equal(a) {
			t.Fatalf("not idempotent: %q vs %q", aa, a)
		}
		if !ab.Covers(a) || !ab.Covers(b) {
			t.Fatalf("Merge(%q, %q) = %q does not cover both", a, b, ab)
		}
		// Least upper bound: anything covering a and b covers Merge(a, b).
		if c.Covers(a) && c.Covers(b) && !c.Covers(ab) {
			t.Fatalf("%q covers %q and %q but not their merge %q", c, a, b, ab)
		}
		// Merge is the identity exactly when one side already covers the other.
		if r := Compare(ab, a); (r == Equal) != a.Covers(b) {
			t.Fatalf("Compare(Merge, a) = %v but a.Covers(b) = %v", r, a.Covers(b))
		}
		for _, e := range ab {
			if want := max(a.EtagOf(e.DBID), b.EtagOf(e.DBID)); e.Etag != want {
				t.Fatalf("Merge etag for %q = %d, want %d", e.DBID, e.Etag, want)
			}
		}
	})
}

func TestPropCompare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := genVector.Draw(t, "a"), genVector.Draw(t, "b")
		if rapid.Bool().Draw(t, "derive") {
			// Make b related to a more often than random draws would.
			b = Merge(a, b)
		}
		r, back := Compare(a, b), Compare(b, a)
		if back != mirror[r] {
			t.Fatalf("Compare(a,b) = %v but Compare(b,a) = %v", r, back)
		}
		if got := a.Covers(b); got != (r == Equal || r == Newer) {
			t.Fatalf("Covers = %v with relation %v", got, r)
		}
		if Compare(a, a) != Equal {
			t.Fatalf("Compare(a, a) != Equal")
		}
		// Reference definition, by etag per database id.
		aAhead, bAhead := false, false
		for _, e := range Merge(a, b) {
			x, y := a.EtagOf(e.DBID), b.EtagOf(e.DBID)
			aAhead = aAhead || x > y
			bAhead = bAhead || y > x
		}
		want := map[[2]bool]Relation{{false, false}: Equal, {true, false}: Newer, {false, true}: Older, {true, true}: Conflict}[[2]bool{aAhead, bAhead}]
		if r != want {
			t.Fatalf("Compare(%q, %q) = %v, want %v", a, b, r, want)
		}
	})
}

func TestPropWith(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v, e := genVector.Draw(t, "v"), genEntry.Draw(t, "e")
		w := v.With(e.Tag, e.Etag, e.DBID)
		if err := w.Validate(); err != nil {
			t.Fatal(err)
		}
		if w.EtagOf(e.DBID) != e.Etag {
			t.Fatalf("EtagOf after With = %d, want %d", w.EtagOf(e.DBID), e.Etag)
		}
		if e.Etag > v.EtagOf(e.DBID) && Compare(w, v) != Newer {
			t.Fatalf("local write with a higher etag not Newer: %q vs %q", w, v)
		}
		for _, x := range v {
			if x.DBID != e.DBID && w.EtagOf(x.DBID) != x.Etag {
				t.Fatalf("With changed another entry")
			}
		}
	})
}

func TestPropStripMove(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := genVector.Draw(t, "v")
		s := v.StripMove()
		for _, e := range s {
			if e.Tag == MoveTag {
				t.Fatalf("StripMove(%q) = %q keeps MOVE", v, s)
			}
		}
		if !v.Covers(s) || !s.StripMove().Equal(s) {
			t.Fatalf("StripMove(%q) = %q", v, s)
		}
		n := 0
		for _, e := range v {
			if e.Tag != MoveTag {
				n++
			}
		}
		if len(s) != n {
			t.Fatalf("StripMove(%q) = %q removed non-MOVE entries", v, s)
		}

		c := genCV.Draw(t, "c")
		sc := c.StripMove()
		if strings.Contains(sc.String(), MoveTag+":") {
			t.Fatalf("ChangeVector.StripMove(%q) = %q", c, sc)
		}
		if !sc.Order.Equal(c.Order.StripMove()) || !sc.Version.Equal(c.Version.StripMove()) {
			t.Fatalf("ChangeVector.StripMove(%q) = %q", c, sc)
		}
		if p, err := Parse(sc.String()); err != nil || !p.Equal(sc) {
			t.Fatalf("StripMove result %q does not round-trip: %v", sc, err)
		}
	})
}

func TestPropChangeVectorMerge(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := genCV.Draw(t, "a"), genCV.Draw(t, "b"), genCV.Draw(t, "c")
		ab := a.Merge(b)
		if !ab.Equal(b.Merge(a)) {
			t.Fatalf("not commutative")
		}
		if !ab.Merge(c).Equal(a.Merge(b.Merge(c))) {
			t.Fatalf("not associative")
		}
		if !a.Merge(a).Equal(a) {
			t.Fatalf("not idempotent")
		}
		if !ab.Order.Equal(Merge(a.Order, b.Order)) || !ab.Version.Equal(Merge(a.Version, b.Version)) {
			t.Fatalf("%q.Merge(%q) = %q: parts not merged separately", a, b, ab)
		}
		if !a.IsComposite() && !b.IsComposite() && ab.IsComposite() {
			t.Fatalf("merge of plain vectors is composite")
		}
		if p, err := Parse(ab.String()); err != nil || !p.Equal(ab) {
			t.Fatalf("merge result %q does not round-trip: %v", ab, err)
		}
	})
}

// TestAbsorbsIsMergeUnchanged: v absorbs o exactly when merging o into v
// leaves v as it was, tags included.
func TestAbsorbsIsMergeUnchanged(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := genVector.Draw(t, "v")
		var o Vector
		if rapid.Bool().Draw(t, "derived") {
			o = append(Vector(nil), v...) // often absorbed: a copy, perhaps lowered
			for i := range o {
				if rapid.Bool().Draw(t, "lower") && o[i].Etag > 0 {
					o[i].Etag--
				}
				if rapid.Bool().Draw(t, "retag") {
					o[i].Tag = genTag.Draw(t, "tag") // a tie Merge breaks by tag
				}
			}
		} else {
			o = genVector.Draw(t, "o")
		}
		if got, want := v.Absorbs(o), Merge(v, o).Equal(v); got != want {
			t.Fatalf("%q.Absorbs(%q) = %v, but Merge gives %q", v, o, got, Merge(v, o))
		}
	})
}
