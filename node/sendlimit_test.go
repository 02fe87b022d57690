package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardnode/shardnode/config"
)

// TestSendLimitChangesAtRunTime: the move bandwidth a node starts with
// (resharding.max-send-bytes-per-sec) is what GET /admin/resharding/
// send-limit answers; a PUT changes it for the batches that wait from then
// on, 0 removes it, and a bad request is a 400 that changes nothing.
func TestSendLimitChangesAtRunTime(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *config.Config) { c.Resharding.MaxSendBytesPerSec = 1 << 20 })
	c := client{t, n.HTTPURL()}
	limit := func() float64 {
		t.Helper()
		r := c.do("GET", "/admin/resharding/send-limit", "")
		if r.Status != 200 {
			t.Fatalf("GET send-limit: %d %s", r.Status, r.Body)
		}
		m := r.json(t)
		if m["Node"] != "A" {
			t.Fatalf("send-limit of node %v, want A", m["Node"])
		}
		return m["BytesPerSecond"].(float64)
	}
	if got := limit(); got != 1<<20 {
		t.Fatalf("limit %v at start, want the configured %d", got, 1<<20)
	}
	// paced reports whether three 4 MiB batches in a row must wait for the
	// limit: at most one burst (4 MiB) goes at once, the rest would take
	// longer than the 100 ms each wait is given.
	paced := func() bool {
		t.Helper()
		waited := false
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			err := n.sendLimit.wait(ctx, 4<<20)
			cancel()
			waited = waited || err != nil
		}
		return waited
	}
	if !paced() {
		t.Fatal("batches went at once under a 1 MiB/s limit")
	}
	if r := c.do("PUT", "/admin/resharding/send-limit", `{"BytesPerSecond": 0}`); r.Status != 200 || limit() != 0 {
		t.Fatalf("PUT 0: %d %s", r.Status, r.Body)
	}
	if paced() {
		t.Fatal("a batch waited with no limit")
	}
	if r := c.do("PUT", "/admin/resharding/send-limit", `{"Node": "A", "BytesPerSecond": 2097152}`); r.Status != 200 || r.json(t)["BytesPerSecond"] != float64(2<<20) {
		t.Fatalf("PUT 2 MiB/s: %d %s", r.Status, r.Body)
	}
	if !paced() {
		t.Fatal("batches went at once under a 2 MiB/s limit set at run time")
	}
	// A batch waiting by a limit set too low goes by the new one as soon
	// as it is raised: at 64 KiB/s, 4 MiB more would wait a minute.
	c.do("PUT", "/admin/resharding/send-limit", `{"BytesPerSecond": 65536}`)
	n.sendLimit.l.ReserveN(time.Now(), 4<<20) // take what the burst holds
	waited := make(chan error, 1)
	go func() { waited <- n.sendLimit.wait(context.Background(), 4<<20) }()
	select {
	case err := <-waited:
		t.Fatalf("a 4 MiB batch went at once at 64 KiB/s (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.do("PUT", "/admin/resharding/send-limit", `{"BytesPerSecond": 0}`)
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a waiting batch still waits by the old limit")
	}
	c.do("PUT", "/admin/resharding/send-limit", `{"BytesPerSecond": 2097152}`)
	for _, bad := range []struct{ body, says string }{
		{`{}`, "BytesPerSecond"},
		{`{"BytesPerSecond": -5}`, "positive"},
		{`{"BytesPerSecond": "fast"}`, "malformed"},
		{`{"BytesPerSecond": 1, "Rate": 2}`, "malformed"},
		{`{"Node": "B", "BytesPerSecond": 1}`, "node A"},
		{`not json`, "malformed"},
	} {
		r := c.do("PUT", "/admin/resharding/send-limit", bad.body)
		if r.Status != 400 || !strings.Contains(string(r.Body), bad.says) || r.json(t)["Type"] == nil {
			t.Fatalf("PUT %s: %d %s, want a 400 that says %q", bad.body, r.Status, r.Body, bad.says)
		}
	}
	if got := limit(); got != 2<<20 {
		t.Fatalf("limit %v after refused requests, want 2 MiB/s still", got)
	}
	// /metrics shows the limit and the time batches waited for it.
	m := string(c.do("GET", "/metrics", "").Body)
	if !strings.Contains(m, "shardnode_resharding_send_limit_bytes_per_second 2.097152e+06") || strings.Contains(m, "shardnode_resharding_send_wait_seconds_total 0\n") ||
		!strings.Contains(m, "shardnode_resharding_send_wait_seconds_total ") {
		t.Fatalf("metrics lack the move bandwidth or its waits:\n%s", grepLines(m, "send_"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSendLimitChargesEveryByteOfALargeBatch: a batch larger than the
// burst is charged in full, not as one burst. Under 1 MiB/s a fresh
// limiter lets one 4 MiB batch go at once, but a 12 MiB batch (two large
// documents) must wait about 8 s for the bytes past the burst.
func TestSendLimitChargesEveryByteOfALargeBatch(t *testing.T) {
	within := func(l *sendLimiter, bytes int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return l.wait(ctx, bytes)
	}
	if err := within(newSendLimiter(1<<20), 4<<20); err != nil {
		t.Fatalf("one burst under a fresh limiter waited: %v", err)
	}
	if err := within(newSendLimiter(1<<20), 12<<20); err == nil {
		t.Fatal("a 12 MiB batch went at once under a 1 MiB/s limit: only one burst of it was charged")
	}
	if err := within(newSendLimiter(0), 64<<20); err != nil {
		t.Fatalf("a 64 MiB batch waited with no limit: %v", err)
	}
}
