package systemtest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestQueriesSeeAcknowledgedCreatesDuringBackAndForthMoves: writers create
// documents in one bucket while it moves back and forth, and after each
// acknowledged create each writer queries or lists, through any node, all
// it created. Around a flip the source takes writes until it applies the
// flip, and the new owner has them only once the source's last pass is
// in: a query or listing there before then would miss a document whose create was
// acknowledged, which the old owner no longer shows either. Every query
// and listing must return each acknowledged document, once.
func TestQueriesSeeAcknowledgedCreatesDuringBackAndForthMoves(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	b, home := bucketOf(t, A, "db", "x$items")
	const writers = 6
	var mu sync.Mutex
	var bad []string
	queries := 0
	var qlat []time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			acked := map[string]bool{}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d$items", w, i)
				r, err := testcluster.Do("PUT", c.URL(rnd.IntN(3))+"/databases/db/docs?id="+id, fmt.Sprintf(`{"W":%d,"I":%d}`, w, i))
				if err != nil || r.Status != 201 {
					continue
				}
				acked[id] = true
				via := c.URL(rnd.IntN(3))
				qs := time.Now()
				kind := "query"
				if i%2 == 1 {
					kind = "listing"
					r, err = testcluster.Do("GET", fmt.Sprintf("%s/databases/db/docs?startsWith=w%d-&metadataOnly=true", via, w), "")
				} else {
					r, err = testcluster.Do("POST", via+"/databases/db/queries", fmt.Sprintf(`{"Query":"from @all_docs where W = %d"}`, w))
				}
				if err != nil || r.Status != 200 {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("a %s through %s failed: %v %v", kind, via, err, r))
					mu.Unlock()
					continue
				}
				seen := map[string]int{}
				for _, d := range r.JSON(t)["Results"].([]any) {
					seen[d.(map[string]any)["@metadata"].(map[string]any)["@id"].(string)]++
				}
				mu.Lock()
				qlat = append(qlat, time.Since(qs))
				queries++
				for id := range acked {
					if seen[id] != 1 {
						bad = append(bad, fmt.Sprintf("a %s through %s after %d acknowledged creates returned %s %d times", kind, via, len(acked), id, seen[id]))
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, to := range []int{(home + 1) % 3, home, (home + 2) % 3, home, (home + 1) % 3, home} {
		id := startReshard(t, c.URL(to), "db", b, b, to)
		waitOperation(t, A, "db", id, 60*time.Second)
	}
	close(stop)
	wg.Wait()
	slices.Sort(qlat)
	t.Logf("%d queries and listings after acknowledged creates, p50 %v p99 %v max %v", queries, qlat[len(qlat)/2], qlat[len(qlat)*99/100], qlat[len(qlat)-1])
	for i, s := range bad {
		if i == 5 {
			break
		}
		t.Errorf("%d of %d: %s", i+1, len(bad), s)
	}
}
