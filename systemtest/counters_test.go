package systemtest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// ifMatchCounters are documents {"N": n} that clients increment with If-Match:
// read through one node, write n+1 with the change vector read through
// another. Two writes acknowledged with the same value mean two replicas
// (or shards) took writes on the same version, and one was lost.
type ifMatchCounters struct {
	db  string
	ids []string
	// params are added to each increment's PUT (e.g. "&waitForReplicas=2").
	params string
	// retries is how many times a PUT answered 503 (not applied, retry)
	// is sent again, as is, 200 ms later.
	retries int
	mu      sync.Mutex
	acked   []map[int]int      // per counter: value → times acknowledged
	how     []map[int][]string // per counter and value: each acknowledgement, for the report
	unknown []int              // per counter: failed or 5xx writes, which may have applied
}

// newCounters creates the counters at 0 through url.
func newCounters(t testing.TB, url, db string, ids []string) *ifMatchCounters {
	c := &ifMatchCounters{db: db, ids: ids, acked: make([]map[int]int, len(ids)), how: make([]map[int][]string, len(ids)), unknown: make([]int, len(ids))}
	for i, id := range ids {
		c.acked[i] = map[int]int{}
		c.how[i] = map[int][]string{}
		testcluster.Must(t, 201, "PUT", url+"/databases/"+db+"/docs?id="+id, `{"N":0}`)
	}
	return c
}

// counterSet creates n counters, counter/0 to counter/n-1, at 0 through
// url; params are added to each increment's PUT.
func counterSet(t testing.TB, url, db string, n int, params string) *ifMatchCounters {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("counter/%d", i)
	}
	c := newCounters(t, url, db, ids)
	c.params = params
	return c
}

// increment increments a random counter once, reading and writing through
// nodes node picks. It returns the counter, the value written and the
// node that acknowledged it (ok false when no write was acknowledged).
func (c *ifMatchCounters) increment(t testing.TB, rnd *rand.Rand, node func() string) (k, n int, via string, ok bool) {
	k = rnd.IntN(len(c.ids))
	base := "/databases/" + c.db + "/docs?id=" + c.ids[k]
	r, err := testcluster.Do("GET", node()+base, "")
	if err != nil || r.Status != 200 {
		return k, 0, "", false
	}
	d := r.JSON(t)["Results"].([]any)[0].(map[string]any)
	n = int(d["N"].(float64)) + 1
	cv := d["@metadata"].(map[string]any)["@change-vector"].(string)
	via = node()
	sent := time.Now()
	r, err = testcluster.Do("PUT", via+base+c.params, fmt.Sprintf(`{"N":%d}`, n), "If-Match", cv)
	for try := 0; try < c.retries && err == nil && r.Status == 503; try++ {
		time.Sleep(200 * time.Millisecond)
		via = node()
		r, err = testcluster.Do("PUT", via+base+c.params, fmt.Sprintf(`{"N":%d}`, n), "If-Match", cv)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil || r.Status >= 500:
		c.unknown[k]++
	case r.Status == 201:
		c.acked[k][n]++
		c.how[k][n] = append(c.how[k][n], fmt.Sprintf("sent %s, answered %s through %s, If-Match %s: %s",
			sent.Format("15:04:05.000"), time.Now().Format("15:04:05.000"), via, cv, r.Body))
		return k, n, via, true
	}
	if err == nil && strings.Contains(string(r.Body), "ConcurrentWriteWon") {
		// Of unknown outcome (a 504); kept for the report.
		c.how[k][n] = append(c.how[k][n], fmt.Sprintf("SUPERSEDED sent %s, answered %s through %s, If-Match %s: %s",
			sent.Format("15:04:05.000"), time.Now().Format("15:04:05.000"), via, cv, r.Body))
	}
	return k, n, via, false
}

// acknowledgements describes each acknowledgement of counter k's value n.
func (c *ifMatchCounters) acknowledgements(k, n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.how[k][n])
}

// total is how many increments were acknowledged, over every counter.
func (c *ifMatchCounters) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, a := range c.acked {
		for _, times := range a {
			n += times
		}
	}
	return n
}

// check fails t for a value acknowledged twice, and for a counter (read
// through url) that does not end at the number of increments acknowledged,
// plus at most those of unknown outcome.
func (c *ifMatchCounters) check(t testing.TB, url string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, id := range c.ids {
		total := 0
		for v, times := range c.acked[k] {
			total += times
			if times > 1 {
				t.Errorf("%s: N=%d acknowledged %d times: concurrent writes were both accepted: %q", id, v, times, c.how[k][v])
			}
		}
		r := testcluster.Must(t, 200, "GET", url+"/databases/"+c.db+"/docs?id="+id, "").JSON(t)
		n := int(r["Results"].([]any)[0].(map[string]any)["N"].(float64))
		if n < total || n > total+c.unknown[k] {
			t.Errorf("%s ends at N=%d after %d acknowledged increments (%d of unknown outcome)", id, n, total, c.unknown[k])
			for v := min(n, total); v <= max(n, total); v++ {
				t.Logf("%s N=%d: %q", id, v, c.how[k][v])
			}
		}
		t.Logf("%s: N=%d, %d increments acknowledged, %d unknown", id, n, total, c.unknown[k])
	}
}

// settle stops the clients (closing stop, waiting for wg), waits until the
// replicas of db converge, and checks the counters through every node.
func (c *ifMatchCounters) settle(t *testing.T, cl *testcluster.Cluster, stop chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	close(stop)
	wg.Wait()
	testcluster.WaitFor(t, 60*time.Second, "the replicas to converge", func() error { return converged(t, cl, c.db) })
	for i := range cl.Members {
		c.check(t, cl.URL(i))
	}
}

// upNodes picks, at random, a node of a cluster that runs: tests that stop
// and start members say so with set.
type upNodes struct {
	c  *testcluster.Cluster
	up []atomic.Bool
}

func newUpNodes(c *testcluster.Cluster) *upNodes {
	u := &upNodes{c: c, up: make([]atomic.Bool, len(c.Members))}
	for i := range u.up {
		u.up[i].Store(true)
	}
	return u
}

// set records whether member i runs.
func (u *upNodes) set(i int, up bool) { u.up[i].Store(up) }

// pick returns the URL of a running member; one must run.
func (u *upNodes) pick(rnd *rand.Rand) string {
	for {
		if i := rnd.IntN(len(u.up)); u.up[i].Load() {
			return u.c.URL(i)
		}
	}
}

// waitCaughtUp waits until member i's /healthz no longer lists replicas
// catching up, as a rolling restart should before the next node stops
// (see docs/operations.md, Restart).
func waitCaughtUp(t *testing.T, c *testcluster.Cluster, i int) {
	t.Helper()
	testcluster.WaitFor(t, 30*time.Second, c.Members[i].Tag+"'s replicas to catch up", func() error {
		r, err := testcluster.Expect(200, "GET", c.URL(i)+"/healthz", "")
		if err == nil && r.JSON(t)["CatchingUp"] != nil {
			err = fmt.Errorf("catching up: %v", r.JSON(t)["CatchingUp"])
		}
		return err
	})
}

// runClients starts n clients, counted in wg, each calling step with its
// own random source (seeded by seed and its number) until stop is closed.
func runClients(wg *sync.WaitGroup, n int, seed uint64, stop <-chan struct{}, step func(rnd *rand.Rand)) {
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), seed))
			for {
				select {
				case <-stop:
					return
				default:
				}
				step(rnd)
			}
		}()
	}
}
