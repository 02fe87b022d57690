package node

import "testing"

// TestETagListMatches: If-None-Match as RFC 9110 writes it (a list of quoted
// ETags, weak or not, or "*") and as RavenDB's clients send it (one change
// vector, maybe unquoted, which holds commas), compared by version parts
// as If-Match is: each replica of a moved document gives it its own order
// part.
func TestETagListMatches(t *testing.T) {
	const cv = "A:3-x, B:1-y"
	const moved = "A:9-o1, MOVE:3-db|A:3-x, B:1-y"
	for _, c := range []struct {
		inm, cv string
		want    bool
	}{
		{"", cv, false},
		{"*", cv, true},
		{cv, cv, true},
		{`"` + cv + `"`, cv, true},
		{` "` + cv + `" `, cv, true},
		{`"other", "` + cv + `"`, cv, true},
		{`W/"` + cv + `"`, cv, true},
		{`"other", W/"A:3-x"`, cv, false},
		{"A:3-x", cv, false},
		{`"A:3-x, B:1-y`, cv, false},
		{`"A:3-x", "B:1-y"`, cv, false},
		{`"B:7-o2, MOVE:3-db|A:3-x, B:1-y"`, moved, true},
		{`"B:7-o2, MOVE:3-db|A:4-x, B:1-y"`, moved, false},
		{cv, moved, true},
	} {
		if got := etagListMatches(c.inm, c.cv); got != c.want {
			t.Errorf("If-None-Match %q against %q: %v, want %v", c.inm, c.cv, got, c.want)
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
