package node

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// hiloNext asks for a HiLo range and decodes it.
func (c client) hiloNext(db, query string) hiloRange {
	c.t.Helper()
	var r hiloRange
	if err := json.Unmarshal(c.must(200, "GET", "/databases/"+db+"/hilo/next?"+query, "").Body, &r); err != nil {
		c.t.Fatal(err)
	}
	return r
}

// TestHiloRangesNeverOverlap: many clients asking at once for ranges of
// one tag get ranges that are disjoint and, together, contiguous from 1;
// each names the node that took it, and the HiLo document holds the
// highest number handed out.
func TestHiloRangesNeverOverlap(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3}`)

	const clients, each = 8, 10
	var mu sync.Mutex
	var got []hiloRange
	var wg sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := hiloRange{}
			for i := 0; i < each; i++ {
				q := url.Values{"tag": {"users"}, "lastBatchSize": {fmt.Sprint(last.LastSize)}, "lastRangeAt": {last.LastRangeAt}, "identityPartsSeparator": {"/"}, "lastMax": {fmt.Sprint(last.High)}}
				r := c.hiloNext("shop", q.Encode())
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
				last = r
			}
		}()
	}
	wg.Wait()
	sort.Slice(got, func(i, j int) bool { return got[i].Low < got[j].Low })
	next := int64(1)
	for _, r := range got {
		if r.Low != next || r.High < r.Low || r.High-r.Low+1 != r.LastSize {
			t.Fatalf("range %+v: want one starting at %d, of LastSize numbers; all: %+v", r, next, got)
		}
		if r.Prefix != "users/" || r.ServerTag != "A" {
			t.Fatalf("range %+v: want prefix users/ and server tag A", r)
		}
		if _, err := time.Parse(time.RFC3339Nano, r.LastRangeAt); err != nil {
			t.Fatalf("LastRangeAt %q: %v", r.LastRangeAt, err)
		}
		next = r.High + 1
	}
	doc := c.must(200, "GET", "/databases/shop/docs?id=Raven/Hilo/users", "").json(t)["Results"].([]any)[0].(map[string]any)
	if doc["Max"] != float64(next-1) || doc["@metadata"].(map[string]any)["@collection"] != "@hilo" {
		t.Fatalf("HiLo document %v, want Max %d in @hilo", doc, next-1)
	}
	// Each tag has its own document; lastMax never makes a range go back.
	if r := c.hiloNext("shop", "tag=orders"); r.Low != 1 || r.High != 32 || r.Prefix != "orders/" {
		t.Fatalf("first orders range %+v", r)
	}
	if r := c.hiloNext("shop", "tag=orders&lastMax=1000"); r.Low != 1001 {
		t.Fatalf("a range after lastMax 1000: %+v", r)
	}
	if r := c.hiloNext("shop", "tag=orders&lastMax=5"); r.Low != 1033 {
		t.Fatalf("a range after a lower lastMax: %+v", r)
	}
}

// TestHiloRangeSizeFollowsTheClient: RavenDB's rule for the next range's
// size, from the client's last size and when it took that range.
func TestHiloRangeSizeFollowsTheClient(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		last int64
		at   time.Time
		want int64
	}{
		{0, time.Time{}, 32},
		{100, time.Time{}, 100},
		{32, now.Add(-time.Second), 64},
		{1 << 20, now.Add(-time.Second), 1 << 20},
		{1 << 62, now.Add(-time.Second), 1 << 20},
		{64, now.Add(-45 * time.Second), 64},
		{64, now.Add(-2 * time.Minute), 32},
		{40, now.Add(-2 * time.Minute), 32},
		{0, now.Add(-time.Second), 32},
	} {
		if got := hiloCapacity(c.last, c.at, now); got != c.want {
			t.Errorf("hiloCapacity(%d, %v ago) = %d, want %d", c.last, now.Sub(c.at), got, c.want)
		}
	}
}

// TestHiloReturnGivesBackTheRest: a client that stops gives back the rest
// of its range, which the next range starts with, unless another range was
// handed out since; bad parameters are 400s that change nothing.
func TestHiloReturnGivesBackTheRest(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 2}`)

	a := c.hiloNext("shop", "tag=users") // 1..32
	c.must(204, "PUT", "/databases/shop/hilo/return?tag=users&end=32&last=5", "")
	if b := c.hiloNext("shop", "tag=users"); b.Low != 6 || b.High != 37 {
		t.Fatalf("after %+v returned from 5: %+v", a, b)
	}
	// Another range was handed out after this one: the return changes nothing.
	c.must(204, "PUT", "/databases/shop/hilo/return?tag=users&end=32&last=5", "")
	if b := c.hiloNext("shop", "tag=users"); b.Low != 38 {
		t.Fatalf("a stale return moved the range back: %+v", b)
	}
	// Returning to a tag never used writes nothing.
	c.must(204, "PUT", "/databases/shop/hilo/return?tag=nobody&end=32&last=0", "")
	c.must(404, "GET", "/databases/shop/docs?id=Raven/Hilo/nobody", "")

	for _, bad := range []struct{ method, path, want string }{
		{"GET", "/databases/shop/hilo/next", "tag: required"},
		{"GET", "/databases/shop/hilo/next?tag=users&lastBatchSize=x", `lastBatchSize "x"`},
		{"GET", "/databases/shop/hilo/next?tag=users&lastBatchSize=-1", `lastBatchSize "-1"`},
		{"GET", "/databases/shop/hilo/next?tag=users&lastMax=1.5", `lastMax "1.5"`},
		{"GET", "/databases/shop/hilo/next?tag=users&lastRangeAt=yesterday", `lastRangeAt "yesterday"`},
		{"GET", "/databases/shop/hilo/next?tag=users&identityPartsSeparator=%7C", "identityPartsSeparator"},
		{"GET", "/databases/shop/hilo/next?tag=users&identityPartsSeparator=ab", "identityPartsSeparator"},
		{"GET", "/databases/shop/hilo/next?tag=users%24", "tag"},
		{"GET", "/databases/shop$0/hilo/next?tag=users", "not of one shard replica"},
		{"PUT", "/databases/shop$0/hilo/return?tag=users&end=1&last=0", "not of one shard replica"},
		{"PUT", "/databases/shop/hilo/return?tag=users&end=10", "last: required"},
		{"PUT", "/databases/shop/hilo/return?tag=users&end=10&last=11", "after end"},
	} {
		r := c.must(400, bad.method, bad.path, "")
		if m := r.json(t); m["Type"] != "BadRequest" || !strings.Contains(m["Error"].(string), bad.want) {
			t.Errorf("%s %s: %s, want an error naming %q", bad.method, bad.path, r.Body, bad.want)
		}
	}
	c.must(404, "GET", "/databases/nope/hilo/next?tag=users", "")
	if b := c.hiloNext("shop", "tag=users"); b.Low != 70 {
		t.Fatalf("bad requests changed the HiLo document: %+v", b)
	}

	// A HiLo document that holds no Max is refused, not read as 0.
	for i, body := range []string{`{"Max":"many"}`, `{"Other":500}`, `{"Max":null}`, `{"Max":-1}`, `{"Max":1.5}`} {
		id := fmt.Sprintf("broken%d", i)
		c.must(201, "PUT", "/databases/shop/docs?id=Raven/Hilo/"+id, body)
		if r := c.must(409, "GET", "/databases/shop/hilo/next?tag="+id, "").json(t); r["Type"] != "InvalidHiloDocument" {
			t.Fatalf("HiLo document %s: %v", body, r)
		}
	}
}
