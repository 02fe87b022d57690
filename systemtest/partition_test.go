package systemtest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestIsolatedLeaderTakesNoWritesAndCatchesUp cuts the raft leader off
// from both other nodes (raft, the NATS routes and node-to-node HTTP all
// cut) while clients increment counters with If-Match and
// waitForReplicas=2 through every node, the isolated one included. The
// other two elect a leader and go on taking writes; the isolated node
// acknowledges none (it cannot confirm it is current), so no value is
// acknowledged twice. After the links heal the node catches up: every
// replica of every shard holds the same documents and change vectors, and
// each counter ends at the number of increments acknowledged.
func TestIsolatedLeaderTakesNoWritesAndCatchesUp(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, CuttableLinks: true})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":3}`)
	ctr := counterSet(t, A, "db", 6, "&waitForReplicas=2")
	victim := c.Leader()
	var isolated atomic.Bool
	var ackedWhileCut, ackedByVictim atomic.Int64
	var cutAt time.Time
	var firstAck atomic.Int64 // ns after cutAt of the first increment begun and acknowledged after the cut
	stop := make(chan struct{})
	var wg sync.WaitGroup
	runClients(&wg, 8, 1, stop, func(rnd *rand.Rand) {
		// Only increments begun after the cut count: one the victim took
		// before may be acknowledged after.
		cut := isolated.Load()
		k, n, via, ok := ctr.increment(t, rnd, func() string { return c.URL(rnd.IntN(3)) })
		if ok && cut && isolated.Load() {
			firstAck.CompareAndSwap(0, int64(time.Since(cutAt)))
			ackedWhileCut.Add(1)
			if via == c.URL(victim) {
				ackedByVictim.Add(1)
				t.Errorf("the isolated node acknowledged %s N=%d: %q", ctr.ids[k], n, ctr.acknowledgements(k, n))
			}
		}
	})
	waitAcked(t, ctr, 20)
	cutAt = time.Now()
	c.Isolate(victim)
	isolated.Store(true)
	others := []int{(victim + 1) % 3, (victim + 2) % 3}
	testcluster.WaitFor(t, 30*time.Second, "the isolated node to know it is cut off", func() error {
		r, err := testcluster.Do("GET", c.URL(victim)+"/healthz", "")
		if err != nil || r.Status != 503 {
			return fmt.Errorf("healthz: %v %d %s", err, r.Status, r.Body)
		}
		return nil
	})
	// A read through the cut-off node of a shard it holds, once its
	// replicas are marked behind, is refused at once as the node's: no
	// other member is reachable, and its own catches up only after the
	// heal (before, it waited 5 s for that and then failed as
	// ServiceUnavailable).
	testcluster.WaitFor(t, 30*time.Second, "a read through the isolated node to be refused as NodeCatchingUp", func() error {
		r, err := testcluster.Do("GET", c.URL(victim)+"/databases/db/docs?id="+ctr.ids[0], "")
		if err != nil || r.Status != 503 || r.JSON(t)["Type"] != "NodeCatchingUp" {
			return fmt.Errorf("GET: %v %d %s", err, r.Status, r.Body)
		}
		return nil
	})
	testcluster.WaitFor(t, 30*time.Second, "the other two to elect a leader", func() error {
		for _, i := range others {
			if _, err := testcluster.Expect(200, "GET", c.URL(i)+"/healthz", ""); err != nil {
				return err
			}
		}
		return nil
	})
	before := ackedWhileCut.Load()
	testcluster.WaitFor(t, 60*time.Second, "increments acknowledged by the majority", func() error {
		if n := ackedWhileCut.Load(); n < before+10 {
			return fmt.Errorf("%d acknowledged since the cut", n)
		}
		return nil
	})
	c.Heal()
	healedAt := time.Now()
	isolated.Store(false)
	testcluster.WaitFor(t, 60*time.Second, "the healed node to serve again", func() error {
		_, err := testcluster.Expect(200, "GET", c.URL(victim)+"/healthz", "")
		return err
	})
	t.Logf("first increment acknowledged %v after the cut; the healed node current again %v after the heal",
		time.Duration(firstAck.Load()).Round(time.Millisecond), time.Since(healedAt).Round(time.Millisecond))
	waitAcked(t, ctr, ctr.total()+20)
	ctr.settle(t, c, stop, &wg)
	t.Logf("%d increments acknowledged while node %s was cut off, %d of them through it", ackedWhileCut.Load(), c.Members[victim].Tag, ackedByVictim.Load())
}

// waitAcked waits until the counters have at least n acknowledged
// increments.
func waitAcked(t *testing.T, ctr *ifMatchCounters, n int) {
	t.Helper()
	testcluster.WaitFor(t, 60*time.Second, fmt.Sprintf("%d increments acknowledged", n), func() error {
		if got := ctr.total(); got < n {
			return fmt.Errorf("%d acknowledged", got)
		}
		return nil
	})
}

// TestLinkCutBetweenTwoNodes cuts the link between two nodes only, both
// still reaching the third: first two followers, then the raft leader and
// a follower. Raft keeps or elects a leader the third node hears, so both
// cut nodes may stay current; the bus does not relay through the third, so
// each sees the other down, and for the shard both hold each would take
// writes the other cannot see. Clients make If-Match increments with
// waitForReplicas=2 through every node: no value may be acknowledged
// twice, writes to the shards the cut does not split go on, and after the
// heal the replicas converge and every counter ends at its acknowledged
// increments.
func TestLinkCutBetweenTwoNodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		pair func(leader int) (int, int)
	}{
		{"followers", func(l int) (int, int) { return (l + 1) % 3, (l + 2) % 3 }},
		{"leader-and-follower", func(l int) (int, int) { return l, (l + 1) % 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Options{Nodes: 3, CuttableLinks: true})
			A := c.URL(0)
			testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
			members := shardMembers(t, A, "db")
			// Two counters per shard.
			var ids []string
			perShard := map[int]int{}
			for i := 0; len(ids) < 6; i++ {
				id := fmt.Sprintf("counter/%d", i)
				if _, s := bucketOf(t, A, "db", id); perShard[s] < 2 {
					perShard[s]++
					ids = append(ids, id)
				}
			}
			ctr := newCounters(t, A, "db", ids)
			ctr.params = "&waitForReplicas=2"
			i, j := tc.pair(c.Leader())
			stop := make(chan struct{})
			var wg sync.WaitGroup
			runClients(&wg, 8, 2, stop, func(rnd *rand.Rand) {
				ctr.increment(t, rnd, func() string { return c.URL(rnd.IntN(3)) })
			})
			waitAcked(t, ctr, 20)
			c.Cut(i, j)
			t.Logf("cut %s-%s; shards %v", c.Members[i].Tag, c.Members[j].Tag, members)
			// Increments of the counters on shards the cut does not split
			// go on.
			before := ctr.total()
			waitAcked(t, ctr, before+20)
			c.Heal()
			waitAcked(t, ctr, ctr.total()+20)
			ctr.settle(t, c, stop, &wg)
			if t.Failed() {
				for s, tags := range members {
					for _, tag := range tags {
						r, _ := testcluster.Do("GET", fmt.Sprintf("%s/databases/db$%d/conflicts", memberByTag(c, tag).URL(), s), "")
						t.Logf("conflicts of shard %d on %s: %s", s, tag, r.Body)
					}
				}
			}
		})
	}
}
