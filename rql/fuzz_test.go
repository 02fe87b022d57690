package rql

import (
	"errors"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "from Orders", "from @all_docs", "from 'Order Lines' where A = 1",
		"from Users where Name = 'x' or not (Age >= 3 and Address.City != null) order by Name desc, id() limit 10 offset 2",
		`from U where a = "q\"\\" and b <> -1.5e-3 and c == $p0 and d < $p1 or e = $p2 and f = $p3`,
		"from U where id() = 'users/1' limit $p1", "from U offset 3 limit 1", "from U where (a = 1",
		"from U where a = 1.2.3", "from U limit -1", "from U where a = 'unterminated",
		"from U where a in ('x', $p0, $p4) and b between 1 and $p1 limit $p2, 5",
		"from U where startsWith(a.b, 'x') or not endsWith(id(), $p0) or exists(c)", "from U where a in (1,",
		"from U order by x include a, b[].c, 'd e' limit 1", "from U include @metadata.@id",
	} {
		f.Add(s)
	}
	params := map[string]any{"p0": "x", "p1": 1.0, "p2": nil, "p3": true, "p4": []any{"y", 2.0, nil}}
	docs := sampleDocs(f)
	f.Fuzz(func(t *testing.T, s string) {
		q, err := Parse(s, params)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) returned %T, want *ParseError", s, err)
			}
			if pe.Pos < 0 || pe.Pos > len(s) || pe.Query != s {
				t.Fatalf("Parse(%q): bad error %+v", s, pe)
			}
			_ = pe.Error()
			return
		}
		for _, d := range docs {
			q.Matches(d)
			q.Compare(d, docs[0])
		}
		s1 := q.String()
		q2, err := Parse(s1, nil)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its String %q fails: %v", s, s1, err)
		}
		if s2 := q2.String(); s2 != s1 {
			t.Fatalf("round trip of %q: %q != %q", s, s1, s2)
		}
	})
}
