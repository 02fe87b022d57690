package node

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardnode/shardnode/config"
)

// discardWriter is a ResponseWriter that keeps only the status: the
// handler's own work, without the network's.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(s int)   { w.status = s }
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(b)
	return len(b), nil
}

// BenchmarkGetHandler measures a point GET's work in the node, routing
// included, with the document in the document cache: what a GET costs the
// server beyond net/http's reading and writing (the bench command's get
// row measures the whole).
func BenchmarkGetHandler(b *testing.B) {
	b.Run("cached", func(b *testing.B) { benchmarkGetHandler(b, -1) })
	b.Run("uncached", func(b *testing.B) { benchmarkGetHandler(b, 0) })
}

func benchmarkGetHandler(b *testing.B, cacheBytes int64) {
	n := testNode(b, b.TempDir(), func(c *config.Config) {
		if cacheBytes >= 0 {
			c.Storage.DocCacheBytes = cacheBytes
		}
	})
	h := n.routes()
	put := func(method, path, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		if rec.Code/100 != 2 {
			b.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
	}
	put(http.MethodPut, "/admin/databases/bench", `{"Shards": 3, "ReplicationFactor": 1}`)
	const docs = 1000
	body := `{"@metadata":{"@collection":"Users"},"f":"` + strings.Repeat("x", 1000) + `"}`
	for i := 0; i < docs; i++ {
		put(http.MethodPut, fmt.Sprintf("/databases/bench/docs?id=users/%d", i), body)
	}
	reqs := make([]*http.Request, docs)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, fmt.Sprintf("/databases/bench/docs?id=users/%d", i), nil)
	}
	w := &discardWriter{h: http.Header{}}
	for _, r := range reqs { // fill the document cache
		h.ServeHTTP(w, r)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, reqs[i%docs])
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
}
