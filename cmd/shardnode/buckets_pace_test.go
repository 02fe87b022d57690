package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// paceNode fakes one node's /admin/resharding/send-limit (and, for the
// first, /cluster); down makes it answer 503.
type paceNode struct {
	mu    sync.Mutex
	limit int64
	down  bool
}

func startPaceNodes(t *testing.T, n int) ([]*paceNode, []*httptest.Server) {
	nodes := make([]*paceNode, n)
	srvs := make([]*httptest.Server, n)
	for i := range nodes {
		p := &paceNode{}
		nodes[i] = p
		mux := http.NewServeMux()
		mux.HandleFunc("GET /cluster", func(w http.ResponseWriter, _ *http.Request) {
			var list []string
			for j, s := range srvs {
				list = append(list, fmt.Sprintf(`{"Tag":"%c","HttpUrl":"%s","Status":"Up"}`, 'A'+j, s.URL))
			}
			fmt.Fprintf(w, `{"Leader":"A","Nodes":[%s]}`, strings.Join(list, ","))
		})
		answer := func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"Node":"X","BytesPerSecond":%d}`, p.limit)
		}
		mux.HandleFunc("GET /admin/resharding/send-limit", func(w http.ResponseWriter, _ *http.Request) {
			p.mu.Lock()
			defer p.mu.Unlock()
			answer(w)
		})
		mux.HandleFunc("PUT /admin/resharding/send-limit", func(w http.ResponseWriter, r *http.Request) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.down {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprint(w, `{"Error":"node stopping","Type":"NodeStopping"}`)
				return
			}
			b, _ := io.ReadAll(r.Body)
			var req struct{ BytesPerSecond int64 }
			if err := json.Unmarshal(b, &req); err != nil {
				t.Errorf("PUT body %s: %v", b, err)
			}
			p.limit = req.BytesPerSecond
			answer(w)
		})
		srvs[i] = httptest.NewServer(mux)
		t.Cleanup(srvs[i].Close)
	}
	return nodes, srvs
}

// TestPaceSetsEveryNode: "buckets pace --rate" sets the move bandwidth on
// every node /cluster lists, "pace" shows it, a node that fails is
// reported while the others are still set, and a bad rate sends nothing.
func TestPaceSetsEveryNode(t *testing.T) {
	nodes, srvs := startPaceNodes(t, 3)
	out, err := run(t.Context(), "buckets", "pace", "--url", srvs[1].URL, "--rate", "20MiB")
	if err != nil {
		t.Fatalf("pace --rate: %v\n%s", err, out)
	}
	for i, p := range nodes {
		if p.limit != 20<<20 {
			t.Errorf("node %d limit %d, want 20 MiB/s", i, p.limit)
		}
	}
	if !strings.Contains(out, "A    20.0 MiB/s (20971520 bytes/s)") || !strings.Contains(out, "C    20.0 MiB/s") {
		t.Errorf("pace --rate output:\n%s", out)
	}
	nodes[2].limit = 0
	out, err = run(t.Context(), "buckets", "pace", "--url", srvs[0].URL)
	if err != nil || !strings.Contains(out, "B    20.0 MiB/s") || !strings.Contains(out, "C    no limit") {
		t.Errorf("pace: %v\n%s", err, out)
	}
	nodes[1].down = true
	out, err = run(t.Context(), "buckets", "pace", "--url", srvs[0].URL, "--rate", "0")
	if err == nil || !strings.Contains(err.Error(), "1 of 3 nodes") || !strings.Contains(out, "NodeStopping") {
		t.Errorf("pace --rate 0 with B failing: %v\n%s", err, out)
	}
	if nodes[0].limit != 0 || nodes[2].limit != 0 || nodes[1].limit != 20<<20 {
		t.Errorf("limits %d %d %d after --rate 0 with B failing", nodes[0].limit, nodes[1].limit, nodes[2].limit)
	}
	for _, bad := range []string{"fast", "-1", "10MB"} {
		if _, err := run(t.Context(), "buckets", "pace", "--url", srvs[0].URL, "--rate", bad); err == nil || !strings.Contains(err.Error(), "--rate") {
			t.Errorf("--rate %s: %v", bad, err)
		}
	}
	if nodes[0].limit != 0 {
		t.Errorf("a bad --rate changed node A's limit to %d", nodes[0].limit)
	}
}
