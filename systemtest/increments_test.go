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
	const clients = 8
	ctr := newCounters(t, A, "db", []string{"counter/0$ctr", "counter/1$ctr"})
	b, home := bucketOf(t, A, "db", ctr.ids[0])
	var mu sync.Mutex
	var stale []string // reads, sent after a write was acknowledged, that missed it
	stop := make(chan struct{})
	var wg sync.WaitGroup
	runClients(&wg, clients, 1, stop, func(rnd *rand.Rand) {
		node := func() string { return c.URL(rnd.IntN(3)) }
		k, n, url, ok := ctr.increment(t, rnd, node)
		if !ok {
			return
		}
		// Read your write, through any node.
		via := node()
		r, err := testcluster.Do("GET", via+"/databases/db/docs?id="+ctr.ids[k], "")
		if err != nil || r.Status != 200 {
			return
		}
		d := r.JSON(t)["Results"].([]any)[0].(map[string]any)
		if got := int(d["N"].(float64)); got < n {
			mu.Lock()
			stale = append(stale, fmt.Sprintf("%s: N=%d acknowledged through %s, then read N=%d through %s (shard %v)", ctr.ids[k], n, url, got, via, d["@metadata"].(map[string]any)["@shard"]))
			mu.Unlock()
		}
	})
	from := home
	for _, to := range []int{(home + 1) % 3, home, (home + 2) % 3, home, (home + 1) % 3, home} {
		id := startReshard(t, c.URL(to), "db", b, b, to)
		waitOperation(t, A, "db", id, 60*time.Second)
		from = to
	}
	_ = from
	close(stop)
	wg.Wait()
	ctr.check(t, A)
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
