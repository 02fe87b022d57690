package changevector

import (
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that whatever it accepts
// round-trips through String, and that ParseVector agrees with Parse on plain
// input.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		" ",
		"|",
		"A:1-x",
		"A:0-x",
		"A:3-dbid1, B:7-dbid2",
		"B:7-dbid2,A:3-dbid1",
		" \tA:1-x ,\nB:2-y\r",
		"MOVE:3-m, C:10-z|A:5-x, B:2-y",
		"A:1-x|A:1-x",
		"|A:1-x",
		"A:1-x|",
		"A:1-x|B:1-y|C:1-z",
		"ZZZZ:18446744073709551615-a-b_c+d/e",
		"A:18446744073709551616-x",
		"A:01-x",
		"A:1-x, B:2-x",
		"A:1-x,,B:2-y",
		"A:1234-kqV3vJ5cRqWQ0q9v7u7j3w, B:98765-mZ2pYq0u1xWQ0q9v7u7j3w",
		"a:1-x",
		"A:-1-x",
		"A:1-x:y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(s)
		if !strings.Contains(s, "|") {
			v, verr := ParseVector(s)
			if (err == nil) != (verr == nil) {
				t.Fatalf("Parse error %v, ParseVector error %v", err, verr)
			}
			if err == nil && (!c.Equal(Plain(v)) || c.IsComposite()) {
				t.Fatalf("Parse = %#v, ParseVector = %#v", c, v)
			}
		}
		if err != nil {
			if c.Order != nil || c.Version != nil {
				t.Fatalf("Parse(%q) failed with a non-zero result %#v", s, c)
			}
			return
		}
		if err := c.Order.Validate(); err != nil {
			t.Fatalf("Parse(%q).Order: %v", s, err)
		}
		if err := c.Version.Validate(); err != nil {
			t.Fatalf("Parse(%q).Version: %v", s, err)
		}
		out := c.String()
		c2, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(%q).String() = %q does not parse: %v", s, out, err)
		}
		if !c2.Equal(c) {
			t.Fatalf("Parse(%q) = %#v, but Parse(%q) = %#v", s, c, out, c2)
		}
		if out2 := c2.String(); out2 != out {
			t.Fatalf("String not canonical: %q then %q", out, out2)
		}
	})
}
