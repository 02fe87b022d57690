package resharding

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/shardnode/shardnode/raftfsm"
)

// TestInSpans: the binary search agrees with a scan of every span.
func TestInSpans(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var spans []raftfsm.BucketSpan
		at := uint32(0)
		for range rapid.IntRange(0, 20).Draw(t, "n") {
			from := at + uint32(rapid.IntRange(0, 5).Draw(t, "gap"))
			to := from + uint32(rapid.IntRange(0, 5).Draw(t, "len"))
			spans = append(spans, raftfsm.BucketSpan{From: from, To: to})
			at = to + 1
		}
		b := uint32(rapid.IntRange(0, 250).Draw(t, "b"))
		want := false
		for _, sp := range spans {
			want = want || (b >= sp.From && b <= sp.To)
		}
		if got := inSpans(spans, b); got != want {
			t.Fatalf("inSpans(%v, %d) = %v", spans, b, got)
		}
	})
}
