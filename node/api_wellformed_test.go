package node

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/shardnode/shardnode/config"
)

// TestMalformedRequestsGetJSONErrors: a query string that does not parse
// is a 400 that says so (a bad escape in id read as "empty id", and on a
// GET as a listing), and a path that is not canonical is a JSON 404 naming
// the canonical one, not ServeMux's HTML redirect (which a client follows,
// sending a write again); neither changes anything.
func TestMalformedRequestsGetJSONErrors(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3}`)
	c.must(201, "PUT", "/databases/shop/docs?id=a", `{"v":1}`)
	before := c.must(200, "GET", "/databases/shop/stats", "").Body
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"PUT", "/databases/shop/docs?id=a%zzb", `{"v":2}`, 400, "malformed query string"},
		{"DELETE", "/databases/shop/docs?id=a%zzb", "", 400, "malformed query string"},
		{"GET", "/databases/shop/docs?id=a%zzb", "", 400, "malformed query string"},
		{"GET", "/databases/shop/docs?id=a;id=b", "", 400, "malformed query string"},
		{"PUT", "//databases/shop/docs?id=b", `{"v":2}`, 404, `did you mean \"/databases/shop/docs\"`},
		{"GET", "/databases//shop/docs?id=a", "", 404, "not canonical"},
		{"DELETE", "/databases/shop/./docs?id=a", "", 404, "not canonical"},
		{"GET", "/databases/shop/x/../docs?id=a", "", 404, "not canonical"},
	} {
		req, err := http.NewRequest(tc.method, n.HTTPURL()+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = "//" + req.URL.Host + tc.path[:strings.IndexByte(tc.path+"?", '?')] // exactly as written
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") ||
			!bytes.Contains(body, []byte(tc.want)) || !bytes.Contains(body, []byte(`"Type":`)) {
			t.Errorf("%s %s: %d %s %s, want %d JSON naming %q", tc.method, tc.path, res.StatusCode, res.Header.Get("Content-Type"), body, tc.status, tc.want)
		}
	}
	if after := c.must(200, "GET", "/databases/shop/stats", "").Body; !bytes.Equal(before, after) {
		t.Fatalf("malformed requests changed the database:\n%s\n%s", before, after)
	}
	c.must(200, "GET", "/databases/shop/docs?id=a%2Fb%20c&id=a", "") // escapes that parse still work
}

// TestProfilerIndexWithoutTrailingSlash: with debug.pprof on, the
// profiler's index answers on its path without the slash too, instead of
// ServeMux's redirect with an HTML body.
func TestProfilerIndexWithoutTrailingSlash(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *config.Config) { c.Debug.Pprof = true })
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/debug/pprof", "/debug/pprof/"} {
		res, err := hc.Get(n.HTTPURL() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(body), "goroutine") {
			t.Errorf("GET %s: %d %.80s", path, res.StatusCode, body)
		}
	}
}
