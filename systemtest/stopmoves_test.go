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

// TestIncrementsWhileNodesStopCleanlyDuringMoves: clients increment
// counters with If-Match through every running node while the counters'
// bucket moves back and forth without pause, and the nodes stop cleanly
// and start again in turn. A stopping node hands its shards' writes over
// to the next member at the end of its drain; had it still made a moving
// bucket's last pass after that, the pass would miss the writes the next
// member took, and the destination would take writes on older versions
// (an explorer: increments acknowledged twice around each SIGTERM). Each
// acknowledged value must be unique, and each counter must end at the
// number of increments acknowledged.
func TestIncrementsWhileNodesStopCleanlyDuringMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts nodes during moves")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	const clients = 6
	ctr := newCounters(t, c.URL(0), "db", []string{"counter/0$ctr", "counter/1$ctr"})
	b, home := bucketOf(t, c.URL(0), "db", ctr.ids[0])
	up := newUpNodes(c)
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	runClients(&wg, clients, 3, stop, func(rnd *rand.Rand) {
		ctr.increment(t, rnd, func() string { return up.pick(rnd) })
	})
	// The bucket moves back and forth for as long as the nodes restart.
	var moves atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		rnd := rand.New(rand.NewPCG(9, 9))
		for to := (home + 1) % 3; !stopped(); to = (to + 1) % 3 {
			var op string
			for op == "" && !stopped() {
				r, err := testcluster.Do("POST", up.pick(rnd)+"/databases/db/resharding", fmt.Sprintf(`{"FromBucket":%d,"ToBucket":%d,"ToShard":%d}`, b, b, to))
				if err == nil && r.Status == 202 {
					op = r.JSON(t)["OperationId"].(string)
				}
			}
			for !stopped() {
				r, err := testcluster.Do("GET", up.pick(rnd)+"/databases/db/resharding/"+op, "")
				if err == nil && r.Status == 200 && r.JSON(t)["Status"] == "Completed" {
					moves.Add(1)
					break
				}
				time.Sleep(10 * time.Millisecond) // polling an operation's status
			}
		}
	}()
	for round := range 9 {
		up.set(round%3, false)
		c.Members[round%3].Stop()
		c.Members[round%3].Start()
		up.set(round%3, true)
		// A few moves with every node up before the next stop.
		done := moves.Load()
		testcluster.WaitFor(t, 60*time.Second, "moves after a restart", func() error {
			if got := moves.Load(); got < done+2 {
				return fmt.Errorf("%d moves since the restart", got-done)
			}
			return nil
		})
	}
	close(stop)
	wg.Wait()
	t.Logf("%d moves", moves.Load())
	ctr.check(t, c.URL(0))
}

// TestIncrementsAcrossCleanRestarts: clients increment counters with
// If-Match through every running node during a rolling restart: each node
// in turn stops cleanly, stays down while the other members take
// increments, starts again, and the next stops once its replicas caught
// up. A restarted replica must not take a write before it has the
// increments its peers took meanwhile (one opened just after its node
// became ready did, until the catch-up first asked its peers): each
// acknowledged value must be unique.
func TestIncrementsAcrossCleanRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts nodes")
	}
	incrementsAcrossRestarts(t, testcluster.InProcess, 6)
}

// incrementsAcrossRestarts runs TestIncrementsAcrossCleanRestarts' load
// over a cluster of mode while rounds nodes, in turn, stop cleanly and
// start again.
func incrementsAcrossRestarts(t *testing.T, mode testcluster.Mode, rounds int) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: mode})
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	const clients = 6
	ids := make([]string, 6)
	for i := range ids {
		ids[i] = fmt.Sprintf("counter/%d", i)
	}
	ctr := newCounters(t, c.URL(0), "db", ids)
	up := newUpNodes(c)
	var total atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	runClients(&wg, clients, 5, stop, func(rnd *rand.Rand) {
		if _, _, _, ok := ctr.increment(t, rnd, func() string { return up.pick(rnd) }); ok {
			total.Add(1)
		}
	})
	for round := range rounds {
		i := round % 3
		up.set(i, false)
		c.Members[i].Stop()
		from := total.Load()
		testcluster.WaitFor(t, 30*time.Second, "increments while a node is down", func() error {
			if got := total.Load() - from; got < 200 {
				return fmt.Errorf("%d increments since the stop", got)
			}
			return nil
		})
		c.Members[i].Start()
		up.set(i, true)
		// As a rolling restart should: the next node stops only once this
		// one's replicas caught up (see docs/operations.md, Restart).
		waitCaughtUp(t, c, i)
		from = total.Load()
		testcluster.WaitFor(t, 30*time.Second, "increments after the restart", func() error {
			if got := total.Load() - from; got < 200 {
				return fmt.Errorf("%d increments since the restart", got)
			}
			return nil
		})
	}
	close(stop)
	wg.Wait()
	t.Logf("%d increments acknowledged", total.Load())
	ctr.check(t, c.URL(0))
}
