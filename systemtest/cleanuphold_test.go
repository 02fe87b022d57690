package systemtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestMoveWaitsWhileTooManyBucketsAwaitADownNodesCleanup: with one of the
// source shard's members stopped, every bucket with data a range move
// flips waits in the record for that member's cleanup. At
// resharding.max-awaiting-cleanup such buckets the move starts no new
// bucket and says why in its alerts (before, the record grew by an entry
// per bucket of the range until the node came back: a node down during a
// move of 100,000 buckets with data meant a record of 100,000 entries on
// every node and in every raft snapshot). Once the member is back its
// cleanups complete, the move goes on, and it completes with every
// document on the destination.
func TestMoveWaitsWhileTooManyBucketsAwaitADownNodesCleanup(t *testing.T) {
	const bound = 3
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, MaxAwaitingCleanup: bound})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":2,"ReplicationFactor":2}`)
	ids := loadShard0Tenants(t, A, "db", 8, 3, 2, 2)
	members := shardMembers(t, A, "db")
	// The member of shard 0 that is not a member of shard 1: it cleans up
	// after each flip, and confirms nothing as a destination.
	var down *testcluster.Member
	for _, tag := range members[0] {
		if !slices.Contains(members[1], tag) {
			down = memberByTag(c, tag)
		}
	}
	if down == nil {
		t.Fatalf("shards %v: no member of shard 0 outside shard 1", members)
	}
	var via string // a node that stays up
	for _, m := range c.Members {
		if m != down {
			via = m.URL()
			break
		}
	}
	down.Stop()
	id := startReshard(t, via, "db", 0, shard0End(t, via, "db"), 1)

	// The move goes as far as the bound and holds there, saying so.
	testcluster.WaitFor(t, 60*time.Second, "the move to hold at the bound", func() error {
		rec := testcluster.Must(t, 200, "GET", via+"/admin/databases/db", "").JSON(t)
		migs := rec["Sharding"].(map[string]any)["BucketMigrations"].(map[string]any)
		awaiting := 0
		for b, m := range migs {
			switch st := m.(map[string]any)["Status"]; st {
			case "OwnershipTransferred":
				awaiting++
			default:
				return fmt.Errorf("bucket %s %v", b, st)
			}
		}
		if awaiting > bound {
			t.Fatalf("%d buckets await cleanup, more than the bound of %d: %s", awaiting, bound, mustJSON(migs))
		}
		if awaiting < bound {
			return fmt.Errorf("%d buckets await cleanup", awaiting)
		}
		op := testcluster.Must(t, 200, "GET", via+"/databases/db/resharding/"+id, "").JSON(t)
		if op["Status"] != "Running" {
			t.Fatalf("operation %v with %s down, want Running", op["Status"], down.Tag)
		}
		alerts, _ := op["Alerts"].([]any)
		if !slices.ContainsFunc(alerts, func(a any) bool {
			s, _ := a.(string)
			return strings.Contains(s, "no new bucket starts") && strings.Contains(s, fmt.Sprintf("%d moved buckets", bound))
		}) {
			return fmt.Errorf("alerts %v", alerts)
		}
		// Said in a form a tool reads too: the view and a metric.
		if h, _ := op["CleanupHold"].(map[string]any); h["Waiting"] != float64(bound) || h["Limit"] != float64(bound) {
			return fmt.Errorf("CleanupHold %v", op["CleanupHold"])
		}
		if v := holdMetric(t, via); v != "1" {
			return fmt.Errorf("shardnode_resharding_cleanup_hold %q", v)
		}
		return nil
	})

	// Back, the member cleans up, and the move completes.
	down.Start()
	op := waitOperation(t, via, "db", id, 90*time.Second)
	if done, total := op["BucketsDone"], op["BucketsTotal"]; done != total {
		t.Fatalf("operation done %v of %v", done, total)
	}
	if h, ok := op["CleanupHold"]; ok {
		t.Fatalf("completed operation with CleanupHold %v", h)
	}
	if v := holdMetric(t, via); v != "0" {
		t.Fatalf("shardnode_resharding_cleanup_hold %q after the move", v)
	}
	for _, d := range ids {
		if _, shard := bucketOf(t, via, "db", d); shard != 1 {
			t.Fatalf("%s on shard %d after the move, want 1", d, shard)
		}
	}
	got := testcluster.Must(t, 200, "GET", via+"/databases/db/stats", "").JSON(t)
	if n := int(got["DocumentsCount"].(float64)); n != len(ids) {
		t.Fatalf("%d documents after the move, want %d", n, len(ids))
	}
	for _, sh := range got["Shards"].([]any) {
		if s := sh.(map[string]any); s["Shard"].(float64) == 0 && s["DocumentsCount"].(float64) != 0 {
			t.Fatalf("shard 0 still holds %v documents after the move", s["DocumentsCount"])
		}
	}
	testcluster.WaitFor(t, 30*time.Second, "replicas to converge", func() error { return converged(t, c, "db") })
}

// holdMetric is the value of shardnode_resharding_cleanup_hold for
// database db on the node at url, as its /metrics text shows it.
func holdMetric(t *testing.T, url string) string {
	t.Helper()
	body := testcluster.Must(t, 200, "GET", url+"/metrics", "").Body
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, `shardnode_resharding_cleanup_hold{db="db"} `); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
