package node

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/shardnode/shardnode/rql"
	"github.com/shardnode/shardnode/storage"
)

// TestQueryTopKeepsTheFirstMatches: whatever the matches and their order of
// arrival, a shard's kept matches are the first keep of all of them in the
// query's order (its order by, then the id), and the total counts all.
func TestQueryTopKeepsTheFirstMatches(t *testing.T) {
	q, err := rql.Parse("from Users order by Age desc, Name", nil)
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 60).Draw(t, "n")
		keep := rapid.IntRange(-1, 70).Draw(t, "keep") // -1: a count (limit 0)
		var all []queryHit
		for i := range n {
			m := map[string]any{
				"Age":  float64(rapid.IntRange(0, 5).Draw(t, "age")),
				"Name": rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "name"),
			}
			all = append(all, queryHit{doc: &storage.Document{ID: fmt.Sprintf("users/%d", i)}, m: m})
		}
		top := newQueryTop(q, keep)
		for _, i := range rapid.Permutation(seq(n)).Draw(t, "arrival") {
			top.add(all[i])
		}
		slices.SortFunc(all, func(a, b queryHit) int { return queryOrder(q, a, b) })
		want := all
		switch {
		case keep < 0:
			want = nil
		case keep > 0 && keep < len(all):
			want = all[:keep]
		}
		got := top.docs()
		if top.total != n || len(got) != len(want) {
			t.Fatalf("kept %d of %d (total %d), want %d", len(got), n, top.total, len(want))
		}
		if keep > 0 {
			for i := range want {
				if got[i] != want[i].doc {
					t.Fatalf("kept #%d is %s, want %s", i, got[i].ID, want[i].doc.ID)
				}
			}
		}
	})
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
