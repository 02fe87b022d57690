package changevector

import (
	"bufio"
	"flag"
	"os"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite expectations in testdata/compare.txt")

var mirror = map[Relation]Relation{Equal: Equal, Newer: Older, Older: Newer, Conflict: Conflict}

// TestCompareDataDriven runs the cases in testdata/compare.txt; see the
// header of that file for its format.
func TestCompareDataDriven(t *testing.T) {
	const path = "testdata/compare.txt"
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	relations := map[string]Relation{}
	for r := range mirror {
		relations[r.String()] = r
	}
	var out strings.Builder
	cases := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		out.WriteString(line)
		out.WriteByte('\n')
		if trimmed := strings.TrimSpace(line); trimmed == "" || trimmed[0] == '#' {
			continue
		}
		cases++
		lhs, want, ok := strings.Cut(line, "=>")
		sa, sb, ok2 := strings.Cut(lhs, "|")
		wantRel, ok3 := relations[strings.TrimSpace(want)]
		if !ok || !ok2 || (!ok3 && !*rewrite) {
			t.Errorf("%s:%d: malformed case %q, want `A | B => Equal|Newer|Older|Conflict`", path, n, line)
			continue
		}
		a, err := ParseVector(sa)
		if err != nil {
			t.Errorf("%s:%d: %v", path, n, err)
			continue
		}
		b, err := ParseVector(sb)
		if err != nil {
			t.Errorf("%s:%d: %v", path, n, err)
			continue
		}
		got := Compare(a, b)
		if *rewrite {
			s := out.String()
			out.Reset()
			out.WriteString(s[:len(s)-len(line)-1] + lhs + "=> " + got.String() + "\n")
			continue
		}
		if got != wantRel {
			t.Errorf("%s:%d: Compare(%q, %q) = %v, want %v", path, n, a, b, got, wantRel)
		}
		if back := Compare(b, a); back != mirror[wantRel] {
			t.Errorf("%s:%d: Compare(%q, %q) = %v, want mirror %v", path, n, b, a, back, mirror[wantRel])
		}
		if covers := a.Covers(b); covers != (wantRel == Equal || wantRel == Newer) {
			t.Errorf("%s:%d: %q.Covers(%q) = %v with relation %v", path, n, a, b, covers, wantRel)
		}
		if m := Merge(a, b); !m.Covers(a) || !m.Covers(b) {
			t.Errorf("%s:%d: Merge = %q does not cover both inputs", path, n, m)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if cases < 20 {
		t.Errorf("%s: only %d cases read", path, cases)
	}
}
