//go:build faults

package systemtest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// migrationFaults runs f in each of the nine subtests: the migration's
// status (Moving, Moved, OwnershipTransferred) times the node it strikes
// (the source's sending node, a destination replica, the raft leader).
// The cluster has every resharding failpoint at 1.5 s (so each status
// lasts) and the documents migrator sweeping every 300 ms.
func migrationFaults(t *testing.T, opts testcluster.Options, f migrationFault) {
	opts.Nodes, opts.MigratorIntervalMs = 3, 300
	opts.Failpoints = "resharding/before-send-completed=1500ms,resharding/before-confirm=1500ms,resharding/before-cleanup=1500ms"
	c := testcluster.Start(t, opts)
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	k := 0
	for _, status := range []string{"Moving", "Moved", "OwnershipTransferred"} {
		for _, role := range []string{"source", "destination", "leader"} {
			k++
			t.Run(status+"/"+role, func(t *testing.T) { faultDuringMigration(t, c, k, status, role, f) })
			if t.Failed() {
				return
			}
		}
	}
}

// migrationFault is what a node goes through while a bucket migration
// runs: disrupt takes it away, restore (once the others counted it
// down) brings it back.
type migrationFault struct {
	verb             string // for the log: "killing", "cutting off"
	disrupt, restore func(c *testcluster.Cluster, victim int)
	// victimWrites adds a writer through the victim: the writes it
	// acknowledged before the fault must survive it too.
	victimWrites bool
}

// faultDuringMigration moves the bucket of anchor tenant/k to the next
// shard, with writers into it, and puts the node of role (the source's
// sending node, a destination replica, the raft leader) through f once the
// migration reaches status. Then the move must complete, the source hold
// nothing of the bucket, the replicas converge, every acknowledged write
// read back through every node from the destination, and the bucket never
// migrate again.
func faultDuringMigration(t *testing.T, c *testcluster.Cluster, k int, status, role string, f migrationFault) {
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
	// A writer through a node the fault spares, and one through the victim
	// when f asks, on ids of their own: each acknowledged value is the
	// latest its writer had acknowledged for that id.
	writers := []int{via}
	if f.victimWrites {
		writers = append(writers, victim)
	}
	for w, node := range writers {
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
	t.Logf("%s %s (%s) with bucket %d %s", f.verb, c.Members[victim].Tag, role, b, status)
	f.disrupt(c, victim)
	// Restore only once the others counted it down, so the move really
	// runs on without it for a while.
	testcluster.WaitFor(t, 10*time.Second, c.Members[victim].Tag+" to be reported down", func() error {
		cl := testcluster.Must(t, 200, "GET", c.URL(via)+"/cluster", "").JSON(t)
		for _, n := range cl["Nodes"].([]any) {
			if nm := n.(map[string]any); nm["Tag"] == c.Members[victim].Tag && nm["Status"] == "Down" {
				return nil
			}
		}
		return fmt.Errorf("cluster view %v", cl["Nodes"])
	})
	f.restore(c, victim)
	restored := time.Now()
	c.WaitAllUp()
	t.Logf("every node hears every other %v after the restore", time.Since(restored).Round(time.Millisecond))
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
	// A write the victim took in its last moment (a cut-off node that still
	// believed it was current, or one killed before it replicated) reaches
	// the other replica by replication after the restore.
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
