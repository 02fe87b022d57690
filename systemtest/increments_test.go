package systemtest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestIncrementsDuringBackAndForthMoves: clients increment counters with
// If-Match (read, add one, write with the change vector read; on 409 read
// again) through every node while the counters' bucket moves back and
// forth. Around each flip the old owner and the new one must never both
// take a write: each acknowledged increment is a value no other one was
// acknowledged with, each counter ends at the number of increments
// acknowledged, and a read sent after a write was acknowledged sees it,
// through any node.
func TestIncrementsDuringBackAndForthMoves(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	const counters, clients = 2, 8
	ids := make([]string, counters)
	for i := range ids {
		ids[i] = fmt.Sprintf("counter/%d$ctr", i)
		testcluster.Must(t, 201, "PUT", A+"/databases/db/docs?id="+ids[i], `{"N":0}`)
	}
	b, home := bucketOf(t, A, "db", ids[0])
	var mu sync.Mutex
	acked := make([]map[int]int, counters) // value -> times acknowledged
	for i := range acked {
		acked[i] = map[int]int{}
	}
	unknown := make([]int, counters) // 5xx answers: maybe applied
	var stale []string               // reads, sent after a write was acknowledged, that missed it
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := rnd.IntN(counters)
				url := c.URL(rnd.IntN(3))
				r, err := testcluster.Do("GET", url+"/databases/db/docs?id="+ids[k], "")
				if err != nil || r.Status != 200 {
					continue
				}
				d := r.JSON(t)["Results"].([]any)[0].(map[string]any)
				n := int(d["N"].(float64))
				cv := d["@metadata"].(map[string]any)["@change-vector"].(string)
				url = c.URL(rnd.IntN(3))
				r, err = testcluster.Do("PUT", url+"/databases/db/docs?id="+ids[k], fmt.Sprintf(`{"N":%d}`, n+1), "If-Match", cv)
				mu.Lock()
				switch {
				case err != nil || r.Status >= 500:
					unknown[k]++
				case r.Status == 201:
					acked[k][n+1]++
				}
				mu.Unlock()
				if err != nil || r.Status != 201 {
					continue
				}
				// Read your write, through any node.
				via := c.URL(rnd.IntN(3))
				r, err = testcluster.Do("GET", via+"/databases/db/docs?id="+ids[k], "")
				if err != nil || r.Status != 200 {
					continue
				}
				d = r.JSON(t)["Results"].([]any)[0].(map[string]any)
				if got := int(d["N"].(float64)); got < n+1 {
					mu.Lock()
					stale = append(stale, fmt.Sprintf("%s: N=%d acknowledged through %s, then read N=%d through %s (shard %v)", ids[k], n+1, url, got, via, d["@metadata"].(map[string]any)["@shard"]))
					mu.Unlock()
				}
			}
		}()
	}
	from := home
	for _, to := range []int{(home + 1) % 3, home, (home + 2) % 3, home, (home + 1) % 3, home} {
		id := startReshard(t, c.URL(to), "db", b, b, to)
		waitOperation(t, A, "db", id, 60*time.Second)
		from = to
	}
	_ = from
	close(stop)
	wg.Wait()
	for k, id := range ids {
		total := 0
		for v, times := range acked[k] {
			total += times
			if times > 1 {
				t.Errorf("%s: N=%d acknowledged %d times: concurrent writes were both accepted", id, v, times)
			}
		}
		r := testcluster.Must(t, 200, "GET", A+"/databases/db/docs?id="+id, "").JSON(t)
		n := int(r["Results"].([]any)[0].(map[string]any)["N"].(float64))
		if n < total || n > total+unknown[k] {
			t.Errorf("%s ends at N=%d after %d acknowledged increments (%d of unknown outcome)", id, n, total, unknown[k])
		}
		t.Logf("%s: N=%d, %d increments acknowledged, %d unknown", id, n, total, unknown[k])
	}
	for i, st := range stale {
		if i == 5 {
			break
		}
		t.Errorf("stale read %d of %d: %s", i+1, len(stale), st)
	}
	// The destinations held writes for the last passes, and say so.
	held := 0.0
	for i := range c.Members {
		st := testcluster.Must(t, 200, "GET", c.URL(i)+"/databases/db/stats", "").JSON(t)
		h := st["ArrivalHolds"].(map[string]any)
		held += h["WritesHeld"].(float64)
		t.Logf("node %v held %v writes for arriving buckets, p50 %v / p99 %v / max %v ms", h["Node"], h["WritesHeld"], h["DelayP50Ms"], h["DelayP99Ms"], h["DelayMaxMs"])
	}
	if held == 0 {
		t.Errorf("no node reports a write held for an arriving bucket across %d moves under a write load", 6)
	}
}
