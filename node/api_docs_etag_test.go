package node

import "testing"

// TestETagListMatches: If-None-Match as RFC 9110 writes it (a list of quoted
// ETags, weak or not, or "*") and as RavenDB's clients send it (one change
// vector, maybe unquoted, which holds commas).
func TestETagListMatches(t *testing.T) {
	const cv = "A:3-x, B:1-y"
	for _, c := range []struct {
		inm  string
		want bool
	}{
		{"", false},
		{"*", true},
		{cv, true},
		{`"` + cv + `"`, true},
		{` "` + cv + `" `, true},
		{`"other", "` + cv + `"`, true},
		{`W/"` + cv + `"`, true},
		{`"other", W/"A:3-x"`, false},
		{"A:3-x", false},
		{`"A:3-x, B:1-y`, false},
		{`"A:3-x", "B:1-y"`, false},
	} {
		if got := etagListMatches(c.inm, cv); got != c.want {
			t.Errorf("If-None-Match %q: %v, want %v", c.inm, got, c.want)
		}
	}
}
