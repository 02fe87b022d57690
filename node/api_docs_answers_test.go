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

// TestBulkResultNamesTheEmptyCollection: a PUT result for a document of no
// collection says "@empty", as RavenDB's does.
func TestBulkResultNamesTheEmptyCollection(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 1}`)
	r := c.must(201, "POST", "/databases/shop/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"a/1","Document":{"v":1}},{"Type":"PUT","Id":"a/2","Document":{"v":1,"@metadata":{"@collection":"As"}}}]}`).json(t)
	res := r["Results"].([]any)
	if got := res[0].(map[string]any)["@collection"]; got != "@empty" {
		t.Fatalf("no collection: %v", got)
	}
	if got := res[1].(map[string]any)["@collection"]; got != "As" {
		t.Fatalf("collection As: %v", got)
	}
}
