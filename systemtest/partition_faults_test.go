//go:build faults

package systemtest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestFaultMigrationSurvivesCutLinks cuts every link (raft, the NATS
// routes, node-to-node HTTP) between one node and the other two while a
// bucket migration is Moving, Moved, and between the ownership flip and
// the source cleanup: the node is the source's responsible node, a
// destination replica or the raft leader. Writers go on into the bucket
// through a node on the majority side and through the cut-off node. Once
// the others count the node down the links heal; then every move
// completes, every acknowledged write (those the cut-off node took before
// it knew, too) is on the destination, nothing is left on the source, the
// bucket is never migrated again, and the replicas converge.
//
// Run with: go test -tags faults ./systemtest -run Fault
func TestFaultMigrationSurvivesCutLinks(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, CuttableLinks: true, MigratorIntervalMs: 300,
		Failpoints: "resharding/before-send-completed=1500ms,resharding/before-confirm=1500ms,resharding/before-cleanup=1500ms"})
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	k := 0
	for _, status := range []string{"Moving", "Moved", "OwnershipTransferred"} {
		for _, role := range []string{"source", "destination", "leader"} {
			k++
			t.Run(status+"/"+role, func(t *testing.T) { cutDuringMigration(t, c, k, status, role) })
			if t.Failed() {
				return
			}
		}
	}
}

func cutDuringMigration(t *testing.T, c *testcluster.Cluster, k int, status, role string) {
	anchor := fmt.Sprintf("tenant/%d", k)
	b, src := bucketOf(t, c.URL(0), "db", anchor)
	dst := (src + 1) % 3
	members := shardMembers(t, c.URL(0), "db")
	var victim int
	switch role {
	case "source":
		victim = indexOf(c, members[src][0])
	case "destination":
		victim = indexOf(c, members[dst][len(members[dst])-1])
	case "leader":
		victim = c.Leader()
	}
	via := (victim + 1) % 3
	var mu sync.Mutex
	acked := map[string]int{}
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("d%d$%s", i, anchor)
		testcluster.Must(t, 201, "PUT", fmt.Sprintf("%s/databases/db/docs?id=%s&waitForReplicas=2", c.URL(via), id), `{"v":0}`)
		acked[id] = 0
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// One writer through a node of the majority side, one through the node
	// that will be cut off, on ids of their own: each acknowledged value
	// is the latest its writer had acknowledged for that id.
	for w, node := range []int{via, victim} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("d%d$%s", w*40+i%40, anchor)
				r, err := testcluster.Do("PUT", fmt.Sprintf("%s/databases/db/docs?id=%s", c.URL(node), id), fmt.Sprintf(`{"v":%d}`, i))
				if err == nil && r.Status == 201 {
					mu.Lock()
					acked[id] = i
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	op := startReshard(t, c.URL(via), "db", b, b, dst)
	testcluster.WaitFor(t, 30*time.Second, "the migration to reach "+status, func() error {
		rec := testcluster.Must(t, 200, "GET", c.URL(via)+"/admin/databases/db", "").JSON(t)
		m, ok := rec["Sharding"].(map[string]any)["BucketMigrations"].(map[string]any)[fmt.Sprint(b)].(map[string]any)
		if !ok || m["Status"] != status {
			return fmt.Errorf("migration of bucket %d: %v", b, m)
		}
		return nil
	})
	t.Logf("cutting %s (%s) off with bucket %d %s", c.Members[victim].Tag, role, b, status)
	c.Isolate(victim)
	// Heal only once the others counted it down, so the move really runs
	// on without it for a while.
	testcluster.WaitFor(t, 10*time.Second, c.Members[victim].Tag+" to be reported down", func() error {
		cl := testcluster.Must(t, 200, "GET", c.URL(via)+"/cluster", "").JSON(t)
		for _, n := range cl["Nodes"].([]any) {
			if nm := n.(map[string]any); nm["Tag"] == c.Members[victim].Tag && nm["Status"] == "Down" {
				return nil
			}
		}
		return fmt.Errorf("cluster view %v", cl["Nodes"])
	})
	time.Sleep(time.Second) // the cut lasts a while past that: the others act without it
	c.Heal()
	healed := time.Now()
	c.WaitAllUp()
	t.Logf("every node hears every other %v after the heal", time.Since(healed).Round(time.Millisecond))
	waitOperation(t, c.URL(via), "db", op, 90*time.Second)
	close(stop)
	wg.Wait()
	testcluster.WaitFor(t, 60*time.Second, "the source to be empty", func() error {
		for _, tag := range members[src] {
			bk := testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db$%d/buckets/%d", memberByTag(c, tag).URL(), src, b), "").JSON(t)
			if bk["DocumentsCount"] != float64(0) {
				return fmt.Errorf("source replica on %s still holds %v documents of bucket %d", tag, bk["DocumentsCount"], b)
			}
		}
		return nil
	})
	// A write the cut-off node took in its last moment of believing it was
	// current reaches the other replica by replication after the heal.
	testcluster.WaitFor(t, 60*time.Second, "the replicas to converge", func() error { return converged(t, c, "db") })
	for id, v := range acked {
		for i := range c.Members {
			r := testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db/docs?id=%s", c.URL(i), id), "").JSON(t)
			d := r["Results"].([]any)[0].(map[string]any)
			if int(d["v"].(float64)) < v || int(d["@metadata"].(map[string]any)["@shard"].(float64)) != dst {
				t.Errorf("%s through %s: %v, acknowledged v=%d on shard %d", id, c.Members[i].Tag, d, v, dst)
				for _, s := range []int{src, dst} {
					for _, tag := range members[s] {
						r, _ := testcluster.Do("GET", fmt.Sprintf("%s/databases/db$%d/docs?id=%s", memberByTag(c, tag).URL(), s, id), "")
						t.Logf("shard %d on %s: %d %s", s, tag, r.Status, r.Body)
					}
				}
				r, _ := testcluster.Do("GET", c.URL(via)+"/databases/db/conflicts", "")
				t.Logf("conflicts: %s", r.Body)
				t.FailNow()
			}
		}
	}
	testcluster.WaitFor(t, 60*time.Second, "leftover migrations to finish", func() error {
		rec := testcluster.Must(t, 200, "GET", c.URL(via)+"/admin/databases/db", "").JSON(t)
		if m, ok := rec["Sharding"].(map[string]any)["BucketMigrations"].(map[string]any)[fmt.Sprint(b)]; ok {
			return fmt.Errorf("bucket %d still migrating: %v", b, m)
		}
		return nil
	})
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		rec := testcluster.Must(t, 200, "GET", c.URL(via)+"/admin/databases/db", "").JSON(t)
		if m, ok := rec["Sharding"].(map[string]any)["BucketMigrations"].(map[string]any)[fmt.Sprint(b)]; ok {
			t.Fatalf("bucket %d migrates again after its move: %v", b, m)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFaultKilledWhileCutOff cuts a node (not the raft leader) off from
// the others on a cluster of processes, kills it with SIGKILL while it is
// cut off, heals the links and starts it again, all under If-Match
// increments with waitForReplicas=2 through every running node: no value
// is acknowledged twice, every counter ends at its acknowledged
// increments, and the replicas converge. (RF 2: while the node is cut
// off, the two shards it holds cannot have two copies of a write, and
// their increments answer 504 after waitForReplicasTimeout, 2 s here.)
func TestFaultKilledWhileCutOff(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes, CuttableLinks: true})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	var ids []string
	for i := range 6 {
		ids = append(ids, fmt.Sprintf("counter/%d", i))
	}
	ctr := newCounters(t, A, "db", ids)
	ctr.params = "&waitForReplicas=2&waitForReplicasTimeout=2s"
	victim := (c.Leader() + 1) % 3
	up := newUpNodes(c)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	runClients(&wg, 8, 3, stop, func(rnd *rand.Rand) {
		ctr.increment(t, rnd, func() string { return up.pick(rnd) })
	})
	waitAcked(t, ctr, 20)
	c.Isolate(victim)
	via := c.URL((victim + 1) % 3)
	testcluster.WaitFor(t, 10*time.Second, c.Members[victim].Tag+" to be reported down", func() error {
		cl := testcluster.Must(t, 200, "GET", via+"/cluster", "").JSON(t)
		for _, n := range cl["Nodes"].([]any) {
			if nm := n.(map[string]any); nm["Tag"] == c.Members[victim].Tag && nm["Status"] == "Down" {
				return nil
			}
		}
		return fmt.Errorf("cluster view %v", cl["Nodes"])
	})
	// Shards with a replica on the cut-off node cannot have two copies:
	// only the third shard's counters move on.
	waitAcked(t, ctr, ctr.total()+5)
	t.Logf("killing %s while cut off, after %d increments", c.Members[victim].Tag, ctr.total())
	up.set(victim, false)
	c.Members[victim].Kill()
	c.Heal()
	c.Members[victim].Start()
	up.set(victim, true)
	t.Logf("%s restarted, after %d increments", c.Members[victim].Tag, ctr.total())
	waitAcked(t, ctr, ctr.total()+40)
	close(stop)
	wg.Wait()
	testcluster.WaitFor(t, 60*time.Second, "the replicas to converge", func() error { return converged(t, c, "db") })
	for i := range c.Members {
		ctr.check(t, c.URL(i))
	}
}
