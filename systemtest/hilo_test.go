package systemtest

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestHiloRangesDuringMoves: RavenDB clients' HiLo ranges, asked for
// through all three nodes at once while the bucket of the HiLo document
// moves back and forth, never overlap: every number of 1..Max is handed
// out exactly once, and the HiLo document ends on its last owner with
// that Max.
func TestHiloRangesDuringMoves(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	const hiloID = "Raven/Hilo/users"
	testcluster.Must(t, 200, "GET", A+"/databases/db/hilo/next?tag=users", "") // the document exists before it moves
	b, home := bucketOf(t, A, "db", hiloID)

	type hiloRange struct {
		Low, High int64
		ServerTag string
		node      int
	}
	var mu sync.Mutex
	got := []hiloRange{{Low: 1, High: 32, ServerTag: "?"}} // the first one, above
	errs := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 12; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := testcluster.Do("GET", c.URL(w%3)+"/databases/db/hilo/next?tag=users", "")
				mu.Lock()
				switch {
				case err != nil:
					errs[err.Error()]++
				case r.Status != 200:
					errs[fmt.Sprintf("%d %.160s", r.Status, r.Body)]++
				default:
					var hr hiloRange
					if err := json.Unmarshal(r.Body, &hr); err != nil {
						errs[err.Error()]++
					}
					hr.node = w % 3
					got = append(got, hr)
				}
				mu.Unlock()
			}
		}()
	}
	from := home
	for _, to := range []int{(home + 1) % 3, (home + 2) % 3, home} {
		id := startReshard(t, c.URL(to), "db", b, b, to)
		waitOperation(t, A, "db", id, 60*time.Second)
		from = to
	}
	close(stop)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("HiLo requests failed during the moves: %v", errs)
	}
	tags := map[string]bool{}
	for _, m := range c.Members {
		tags[m.Tag] = true
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Low < got[j].Low })
	next := int64(1)
	for _, r := range got {
		if r.Low != next || r.High < r.Low {
			t.Fatalf("range %d..%d (through node %d, taken by %s): want one starting at %d", r.Low, r.High, r.node, r.ServerTag, next)
		}
		if r.ServerTag != "?" && !tags[r.ServerTag] {
			t.Fatalf("range %d..%d names server %q, not a node of the cluster", r.Low, r.High, r.ServerTag)
		}
		next = r.High + 1
	}
	doc := testcluster.Must(t, 200, "GET", c.URL(1)+"/databases/db/docs?id="+hiloID, "").JSON(t)["Results"].([]any)[0].(map[string]any)
	if doc["Max"] != float64(next-1) {
		t.Fatalf("HiLo document holds Max %v, want %d", doc["Max"], next-1)
	}
	if _, shard := bucketOf(t, A, "db", hiloID); shard != from {
		t.Fatalf("HiLo document on shard %d, want %d", shard, from)
	}
	t.Logf("%d ranges, numbers 1..%d, across 3 moves of bucket %d", len(got), next-1, b)
}
