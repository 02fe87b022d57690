package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

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

// keepingWriter is a ResponseWriter that, like front's, takes whole
// answers without a copy (ownedWriter), and keeps what it was given.
type keepingWriter struct {
	header http.Header
	owned  map[int][]byte // answers taken without a copy, by their place in sent
	sent   []string       // what each answer was when it was written
}

func (w *keepingWriter) Header() http.Header { return w.header }
func (w *keepingWriter) WriteHeader(int)     {}
func (w *keepingWriter) Write(b []byte) (int, error) {
	w.sent = append(w.sent, string(b))
	return len(b), nil
}

func (w *keepingWriter) writeOwned(b []byte) {
	w.owned[len(w.sent)] = b
	w.sent = append(w.sent, string(b))
}

// TestAnswersTakenWithoutACopyStayAsWritten: a server sends an answer it
// took without a copy after the handler returned, so nothing may change
// it. Point GETs render into pooled buffers, which the next GET reuses:
// those must be copied; a query's answer may be taken as it is.
func TestAnswersTakenWithoutACopyStayAsWritten(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3, "ReplicationFactor": 1}`)
	for i := range 4 {
		c.must(201, "PUT", fmt.Sprintf("/databases/shop/docs?id=users/%d", i), fmt.Sprintf(`{"N":%d,"Pad":%q}`, i, strings.Repeat(strconv.Itoa(i), 50)))
	}
	h := n.routes()
	w := &keepingWriter{header: http.Header{}, owned: map[int][]byte{}}
	for i := range 4 {
		h.ServeHTTP(w, httptest.NewRequest("GET", fmt.Sprintf("/databases/shop/docs?id=users/%d", i), nil))
	}
	h.ServeHTTP(w, httptest.NewRequest("POST", "/databases/shop/queries", strings.NewReader(`{"Query":"from @all_docs"}`)))
	if len(w.sent) != 5 {
		t.Fatalf("%d answers, want 5", len(w.sent))
	}
	for i := range 4 {
		var out struct{ Results []struct{ N int } }
		if err := json.Unmarshal([]byte(w.sent[i]), &out); err != nil || len(out.Results) != 1 || out.Results[0].N != i {
			t.Fatalf("GET users/%d answered %s", i, w.sent[i])
		}
	}
	if _, ok := w.owned[4]; !ok {
		t.Fatal("the query's answer was copied: a large one would be held twice while it is sent")
	}
	for i, b := range w.owned {
		if w.sent[i] != string(b) {
			t.Fatalf("answer %d, taken without a copy, changed after it was written:\nwritten %s\nnow     %s", i+1, w.sent[i], b)
		}
	}
}
