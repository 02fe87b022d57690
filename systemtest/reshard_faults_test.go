//go:build faults

package systemtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestFaultMigrationSurvivesKills kills (SIGKILL) the source's responsible
// node, a destination replica and the raft leader, each while a bucket
// migration is Moving, Moved, and between the ownership flip and the
// source cleanup (failpoints hold each step for a while). After the
// restart every move completes, no acknowledged write is lost, nothing is
// left on the source, and the bucket is never migrated again.
//
// Run with: go test -tags faults ./systemtest -run Fault
func TestFaultMigrationSurvivesKills(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes, MigratorIntervalMs: 300,
		Failpoints: "resharding/before-send-completed=1500ms,resharding/before-confirm=1500ms,resharding/before-cleanup=1500ms"})
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	k := 0
	for _, status := range []string{"Moving", "Moved", "OwnershipTransferred"} {
		for _, role := range []string{"source", "destination", "leader"} {
			k++
			t.Run(status+"/"+role, func(t *testing.T) { killDuringMigration(t, c, k, status, role) })
			if t.Failed() {
				return
			}
		}
	}
}

func killDuringMigration(t *testing.T, c *testcluster.Cluster, k int, status, role string) {
	anchor := fmt.Sprintf("tenant/%d", k)
	b, src := bucketOf(t, c.URL(0), "db", anchor)
	dst := (src + 1) % 3
	members := shardMembers(t, c.URL(0), "db")
	leader := c.Leader()
	var victim int
	switch role {
	case "source":
		victim = indexOf(c, members[src][0])
	case "destination":
		victim = indexOf(c, members[dst][len(members[dst])-1])
	case "leader":
		victim = leader
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
	wg.Add(1)
	go func() { // a writer into the moving bucket through a node that lives
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("d%d$%s", i%40, anchor)
			r, err := testcluster.Do("PUT", fmt.Sprintf("%s/databases/db/docs?id=%s", c.URL(via), id), fmt.Sprintf(`{"v":%d}`, i))
			if err == nil && r.Status == 201 {
				mu.Lock()
				acked[id] = i
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	op := startReshard(t, c.URL(via), "db", b, b, dst)
	testcluster.WaitFor(t, 30*time.Second, "the migration to reach "+status, func() error {
		rec := testcluster.Must(t, 200, "GET", c.URL(via)+"/admin/databases/db", "").JSON(t)
		m, ok := rec["Sharding"].(map[string]any)["BucketMigrations"].(map[string]any)[fmt.Sprint(b)].(map[string]any)
		if !ok || m["Status"] != status {
			return fmt.Errorf("migration of bucket %d: %v", b, m)
		}
		return nil
	})
	t.Logf("killing %s (%s) with bucket %d %s", c.Members[victim].Tag, role, b, status)
	c.Members[victim].Kill()
	// Restart only once the others noticed, so the move really runs on
	// without the victim for a while.
	testcluster.WaitFor(t, 10*time.Second, c.Members[victim].Tag+" to be reported down", func() error {
		cl := testcluster.Must(t, 200, "GET", c.URL(via)+"/cluster", "").JSON(t)
		for _, n := range cl["Nodes"].([]any) {
			if nm := n.(map[string]any); nm["Tag"] == c.Members[victim].Tag && nm["Status"] == "Down" {
				return nil
			}
		}
		return fmt.Errorf("cluster view %v", cl["Nodes"])
	})
	c.Members[victim].Start()
	waitOperation(t, c.URL(via), "db", op, 90*time.Second)
	close(stop)
	wg.Wait()
	// Leftovers (a write acknowledged by the victim just before it died)
	// reach the owner through the documents migrator; then nothing is left
	// on the source and every acknowledged write is on the destination.
	testcluster.WaitFor(t, 60*time.Second, "the source to be empty", func() error {
		for _, tag := range members[src] {
			bk := testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db$%d/buckets/%d", memberByTag(c, tag).URL(), src, b), "").JSON(t)
			if bk["DocumentsCount"] != float64(0) {
				return fmt.Errorf("source replica on %s still holds %v documents of bucket %d", tag, bk["DocumentsCount"], b)
			}
		}
		return nil
	})
	for id, v := range acked {
		r := testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db/docs?id=%s", c.URL(victim), id), "").JSON(t)
		d := r["Results"].([]any)[0].(map[string]any)
		if int(d["v"].(float64)) < v || int(d["@metadata"].(map[string]any)["@shard"].(float64)) != dst {
			t.Fatalf("%s: %v, acknowledged v=%d on shard %d", id, d, v, dst)
		}
	}
	// Leftover migrations (if any) finish; then the bucket is never
	// migrated again: the migrator sweeps every 300 ms.
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

func indexOf(c *testcluster.Cluster, tag string) int {
	for i, m := range c.Members {
		if m.Tag == tag {
			return i
		}
	}
	panic(tag)
}

// TestFaultFrozenSenderAfterTheFlip freezes (SIGSTOP) the sending node
// between the ownership flip and its last pass, with writes flowing into
// the bucket, for longer than the others take to count it down, then
// thaws it. The move must complete by a recorded last pass (the sender's
// own, or its replacement's), not by the source replicas' 30 s fallback
// that purges without one (an explorer saw every source replica wait it
// out, logging "purging a moved bucket without the sender's last pass").
func TestFaultFrozenSenderAfterTheFlip(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes, MigratorIntervalMs: 300,
		Failpoints: "resharding/before-final-pass=2s"})
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":2,"ReplicationFactor":3}`)
	const anchor = "tenant/frozen"
	b, src := bucketOf(t, c.URL(0), "db", anchor)
	dst := 1 - src
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, m := range c.Members {
				if m.Running() {
					_, _ = testcluster.Do("PUT", fmt.Sprintf("%s/databases/db/docs?id=d%d$%s", m.URL(), i%50, anchor), fmt.Sprintf(`{"v":%d}`, i))
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	op := startReshard(t, c.URL(0), "db", b, b, dst)
	var sender string
	testcluster.WaitFor(t, 30*time.Second, "the flip", func() error {
		rec := testcluster.Must(t, 200, "GET", c.URL(0)+"/admin/databases/db", "").JSON(t)
		m, ok := rec["Sharding"].(map[string]any)["BucketMigrations"].(map[string]any)[fmt.Sprint(b)].(map[string]any)
		if !ok || m["Status"] != "OwnershipTransferred" {
			return fmt.Errorf("migration of bucket %d: %v", b, m)
		}
		sender, _ = m["SentByNode"].(string)
		return nil
	})
	victim := memberByTag(c, sender)
	t.Logf("freezing sender %s of bucket %d after the flip", sender, b)
	victim.Pause()
	var via *testcluster.Member
	for _, m := range c.Members {
		if m != victim {
			via = m
		}
	}
	testcluster.WaitFor(t, 10*time.Second, sender+" to be reported down", func() error {
		cl := testcluster.Must(t, 200, "GET", via.URL()+"/cluster", "").JSON(t)
		for _, n := range cl["Nodes"].([]any) {
			if nm := n.(map[string]any); nm["Tag"] == sender && nm["Status"] == "Down" {
				return nil
			}
		}
		return fmt.Errorf("cluster view %v", cl["Nodes"])
	})
	// The new owner takes the bucket's writes only once a last pass is
	// recorded: with the sender frozen before its own, another member of
	// the source shard must make it.
	frozenAt := time.Now()
	testcluster.WaitFor(t, 20*time.Second, "a write into the bucket while its sender is frozen", func() error {
		_, err := testcluster.Expect(201, "PUT", fmt.Sprintf("%s/databases/db/docs?id=while-frozen$%s", via.URL(), anchor), `{"v":0}`)
		return err
	})
	t.Logf("the bucket took a write %v after its sender froze", time.Since(frozenAt).Round(time.Millisecond))
	victim.Resume()
	waitOperation(t, via.URL(), "db", op, 90*time.Second)
	testcluster.WaitFor(t, 60*time.Second, "the migration to leave the record", func() error {
		rec := testcluster.Must(t, 200, "GET", via.URL()+"/admin/databases/db", "").JSON(t)
		if m, ok := rec["Sharding"].(map[string]any)["BucketMigrations"].(map[string]any)[fmt.Sprint(b)]; ok {
			return fmt.Errorf("bucket %d still migrating: %v", b, m)
		}
		return nil
	})
	for _, m := range c.Members {
		if strings.Contains(m.Log(), "purging a moved bucket without the sender's last pass") {
			t.Errorf("node %s purged by the 30 s fallback:\n%s", m.Tag, grepLines(m.Log(), "last pass", "final", "replac"))
		}
	}
}

// grepLines returns the lines of s that contain any of subs.
func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
