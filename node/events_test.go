package node

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
)

// TestEventsListEveryStepOfAMove follows /events while a bucket with
// documents moves between two shards of one node, and checks that the
// stream carries each of the bucket's steps once, in order (no FinalPass:
// nothing was written between Moved and the flip), with raft
// indexes as ids, and the operation's completion.
func TestEventsListEveryStepOfAMove(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	var cmds []string
	for i := 0; i < 20; i++ {
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"orders/%d$tenants/7","Document":{"n":%d}}`, i, i))
	}
	c.must(201, "POST", "/databases/db/bulk_docs", `{"Commands":[`+strings.Join(cmds, ",")+`]}`)
	b := bucket.ForID("tenants/7")
	rec := c.must(200, "GET", "/admin/databases/db", "").json(t)
	to := 1
	for _, r := range rec["Sharding"].(map[string]any)["BucketRanges"].([]any) {
		rr := r.(map[string]any)
		if uint32(rr["BucketRangeStart"].(float64)) <= b {
			to = 1 - int(rr["ShardNumber"].(float64))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", n.HTTPURL()+"/databases/db/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	c.must(202, "POST", "/databases/db/resharding", fmt.Sprintf(`{"FromBucket": %d, "ToBucket": %d, "ToShard": %d}`, b, b, to))

	var seen []string
	var lastID uint64
	sc := bufio.NewScanner(res.Body)
	var event string
	var id uint64
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "id: "):
			fmt.Sscan(line[4:], &id)
		case strings.HasPrefix(line, "data: "):
			if id < lastID {
				t.Fatalf("event id %d after %d", id, lastID)
			}
			lastID = id
			var d map[string]any
			if err := json.Unmarshal([]byte(line[6:]), &d); err != nil {
				t.Fatalf("event data %s: %v", line, err)
			}
			switch event {
			case "migration":
				if uint32(d["Bucket"].(float64)) == b {
					seen = append(seen, d["Step"].(string))
				}
			case "operation":
				if d["Status"] == "Completed" {
					if got := strings.Join(seen, ","); got != "Moving,Moved,OwnershipTransferred,FinalPass,Completed" {
						t.Fatalf("steps of bucket %d: %s", b, got)
					}
					return
				}
			case "resync":
				t.Fatalf("resync on an idle node: %s", line)
			}
		}
	}
	t.Fatalf("stream ended (%v) before the operation completed; steps %v", sc.Err(), seen)
}

// TestCancelResharding: a cancelled operation stops starting migrations,
// the one in flight finishes, every document stays readable exactly once,
// and bad cancels are refused.
func TestCancelResharding(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	var cmds []string
	for i := 0; i < 400; i++ {
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"users/%d","Document":{"n":%d}}`, i, i))
	}
	c.must(201, "POST", "/databases/db/bulk_docs", `{"Commands":[`+strings.Join(cmds, ",")+`]}`)
	// Shard 0 owns the first half of the buckets: move all of it to 1.
	id := c.must(202, "POST", "/databases/db/resharding", `{"FromBucket": 0, "ToBucket": 524287, "ToShard": 1}`).json(t)["OperationId"].(string)
	op := c.must(200, "DELETE", "/databases/db/resharding/"+id, "").json(t)
	if op["Status"] != "Cancelled" {
		t.Fatalf("cancelled operation %v", op)
	}
	c.must(409, "DELETE", "/databases/db/resharding/"+id, "")
	c.must(404, "DELETE", "/databases/db/resharding/0000", "")
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec := c.must(200, "GET", "/admin/databases/db", "").json(t)
		if len(rec["Sharding"].(map[string]any)["BucketMigrations"].(map[string]any)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("migrations still in flight after the cancel: %v", rec["Sharding"].(map[string]any)["BucketMigrations"])
		}
		time.Sleep(20 * time.Millisecond)
	}
	after := c.must(200, "GET", "/databases/db/resharding/"+id, "").json(t)
	if after["Status"] != "Cancelled" || after["BucketsDone"].(float64) >= after["BucketsTotal"].(float64) {
		t.Fatalf("operation after the cancel: %v", after)
	}
	total := 0.0
	for s := 0; s < 2; s++ {
		total += c.must(200, "GET", fmt.Sprintf("/databases/db$%d/stats", s), "").json(t)["DocumentsCount"].(float64)
	}
	if total != 400 {
		t.Fatalf("shards hold %v documents, want 400", total)
	}
	for i := 0; i < 400; i += 7 {
		c.must(200, "GET", fmt.Sprintf("/databases/db/docs?id=users/%d", i), "")
	}
}

// TestEventsQuietDatabaseKeepsUpWithTheJournal: while another database
// makes more changes than the FSM's journal holds (raftfsm's maxChanges,
// 8,192), the stream of a database that does not change keeps up with the
// journal: it sends no resync, and then sends the database's next change.
func TestEventsQuietDatabaseKeepsUpWithTheJournal(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/quiet", `{"Shards": 2}`)
	c.must(201, "PUT", "/admin/databases/busy", `{"Shards": 2}`)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", n.HTTPURL()+"/databases/quiet/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()

	// Each start of an operation over buckets its target already owns
	// completes as it applies: one journal change of "busy" per command.
	const changes, workers = 8192 + 300, 8
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for i := w; i < changes; i += workers {
				r, err := http.Post(n.HTTPURL()+"/databases/busy/resharding", "application/json",
					strings.NewReader(`{"FromBucket": 0, "ToBucket": 0, "ToShard": 0}`))
				if err != nil {
					errs <- err
					return
				}
				r.Body.Close()
				if r.StatusCode != http.StatusAccepted {
					errs <- fmt.Errorf("start operation on busy: status %d", r.StatusCode)
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	id := c.must(202, "POST", "/databases/quiet/resharding", `{"FromBucket": 0, "ToBucket": 0, "ToShard": 0}`).json(t)["OperationId"].(string)

	sc := bufio.NewScanner(res.Body)
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: "):
			switch event {
			case "resync":
				t.Fatalf("resync on a database that did not change: %s", line)
			case "operation":
				if strings.Contains(line, id) {
					return
				}
			}
		}
	}
	t.Fatalf("stream ended (%v) before the quiet database's operation %s", sc.Err(), id)
}

// TestEventsStartWithTheOperationsNewestFirst: a new stream begins with
// the database's operations as GET /resharding lists them, newest first,
// whatever order the record holds them in.
func TestEventsStartWithTheOperationsNewestFirst(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	for i := 0; i < 6; i++ {
		c.must(202, "POST", "/databases/db/resharding", fmt.Sprintf(`{"FromBucket": %d, "ToBucket": %d, "ToShard": 1}`, 10+i, 10+i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", n.HTTPURL()+"/databases/db/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	var starts []float64
	for len(starts) < 6 && sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") {
			var d map[string]any
			if err := json.Unmarshal([]byte(line[6:]), &d); err != nil {
				t.Fatalf("event data %s: %v", line, err)
			}
			if s, ok := d["StartIndex"].(float64); ok {
				starts = append(starts, s)
			}
		}
	}
	if len(starts) != 6 || !slices.IsSortedFunc(starts, func(a, b float64) int { return cmp.Compare(b, a) }) {
		t.Fatalf("the stream began with operations started at %v, want six, newest first", starts)
	}
}
