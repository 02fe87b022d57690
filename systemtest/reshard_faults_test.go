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
	migrationFaults(t, testcluster.Options{Mode: testcluster.Processes}, killed)
}

// killed kills the victim with SIGKILL, and starts it again once the
// others counted it down.
var killed = migrationFault{
	verb:    "killing",
	disrupt: func(c *testcluster.Cluster, victim int) { c.Members[victim].Kill() },
	restore: func(c *testcluster.Cluster, victim int) { c.Members[victim].Start() },
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
	// acked closes at the writer's first acknowledged write: a move
	// started before it could find the bucket empty and flip it as an
	// empty bucket, with no sender to freeze.
	acked := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var once sync.Once
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, m := range c.Members {
				if m.Running() {
					if _, err := testcluster.Expect(201, "PUT", fmt.Sprintf("%s/databases/db/docs?id=d%d$%s", m.URL(), i%50, anchor), fmt.Sprintf(`{"v":%d}`, i)); err == nil {
						once.Do(func() { close(acked) })
					}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	select {
	case <-acked:
	case <-time.After(30 * time.Second):
		t.Fatalf("no write into bucket %d was acknowledged in 30 s", b)
	}
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
