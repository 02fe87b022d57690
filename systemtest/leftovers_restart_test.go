package systemtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestRangeMovesAcrossCleanRestartsLeaveNothingForTheMigrator moves the
// range of shard 0 to shard 1 and back at replication factor 3 while
// writers overwrite the documents of the buckets in it, and restarts one
// node cleanly before each move and another while the move runs (every
// node holds a replica of both shards, so each restart stops a source and
// a destination replica, the raft leader among them in turn). A clean stop
// hands its writes over and a restarted replica catches up before it
// serves, so every write into a moving bucket is still covered by its
// move's passes: the documents migrator must start no migration, and
// every replica must hold only its shard's buckets.
func TestRangeMovesAcrossCleanRestartsLeaveNothingForTheMigrator(t *testing.T) {
	if testing.Short() {
		t.Skip("six range moves under writers and twelve restarts")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, MigratorIntervalMs: 3000})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":2,"ReplicationFactor":3}`)
	var ids []string
	tenants := 0
	for k := 0; tenants < 10; k++ {
		tenant := fmt.Sprintf("t/%d", k)
		if _, shard := bucketOf(t, A, "db", tenant); shard != 0 {
			continue
		}
		tenants++
		var cmds []string
		for i := range 20 + k%20 {
			id := fmt.Sprintf("d%d$%s", i, tenant)
			ids = append(ids, id)
			cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":%q,"Document":{"N":0}}`, id))
		}
		testcluster.Must(t, 201, "POST", A+"/databases/db/bulk_docs?waitForReplicas=3", `{"Commands":[`+join(cmds)+`]}`)
	}
	rec := testcluster.Must(t, 200, "GET", A+"/admin/databases/db", "").JSON(t)
	end := uint32(rec["Sharding"].(map[string]any)["BucketRanges"].([]any)[1].(map[string]any)["BucketRangeStart"].(float64)) - 1
	leftovers := followLeftoversOnEveryNode(t, c, "db")
	up := newUpNodes(c)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	runClients(&wg, 4, 17, stop, func(rnd *rand.Rand) {
		id := ids[rnd.IntN(len(ids))]
		// Errors are expected while a node stops; what is checked is
		// that nothing is left behind.
		_, _ = testcluster.Do("PUT", up.pick(rnd)+"/databases/db/docs?id="+id, fmt.Sprintf(`{"N":%d}`, rnd.IntN(1000)))
	})
	restart := func(i int) {
		up.set(i, false)
		c.Members[i].Stop()
		c.Members[i].Start()
		testcluster.WaitFor(t, 30*time.Second, c.Members[i].Tag+"'s replicas to catch up", func() error {
			r, err := testcluster.Expect(200, "GET", c.URL(i)+"/healthz", "")
			if err == nil && r.JSON(t)["CatchingUp"] != nil {
				err = fmt.Errorf("catching up: %v", r.JSON(t)["CatchingUp"])
			}
			return err
		})
		up.set(i, true)
	}
	to := 1
	for move := range 6 {
		restart(move % 3)
		mover := (move + 1) % 3
		op := startReshard(t, c.URL(mover), "db", 0, end, to)
		restart((move + 2) % 3)
		waitOperation(t, c.URL(mover), "db", op, 2*time.Minute)
		t.Logf("move %d to shard %d done; %d leftovers migrations so far", move+1, to, len(leftovers()))
		to = 1 - to
	}
	close(stop)
	wg.Wait()
	// Sweeps after the last ownership change run within a migrator
	// interval; give them two, then ask that nothing was found.
	testcluster.WaitFor(t, 20*time.Second, "every replica to agree", func() error { return converged(t, c, "db") })
	deadline := time.Now().Add(7 * time.Second)
	for time.Now().Before(deadline) && len(leftovers()) == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	if l := leftovers(); len(l) > 0 {
		t.Errorf("the documents migrator started %d migrations: %s", len(l), strings.Join(l, "; "))
	}
}

// followLeftoversOnEveryNode follows every member's /events for db,
// connecting again whenever a member's stream ends (it was restarted),
// and lists the leftovers migrations any of them reported, once each.
// With at most one member down at a time, every migration is seen.
func followLeftoversOnEveryNode(t *testing.T, c *testcluster.Cluster, db string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var seen []string
	var wg sync.WaitGroup
	for i := range c.Members {
		url := c.URL(i)
		wg.Go(func() {
			for ctx.Err() == nil {
				followLeftoversOnce(ctx, url, db, func(s string) {
					mu.Lock()
					if !slices.Contains(seen, s) {
						seen = append(seen, s)
					}
					mu.Unlock()
				})
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// followLeftoversOnce reads url's /events for db until the stream ends,
// calling found for each leftovers migration's Moving step.
func followLeftoversOnce(ctx context.Context, url, db string, found func(string)) {
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/databases/"+db+"/events", nil)
	if err != nil {
		return
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: ") && event == "migration":
			var m struct {
				Bucket                        uint32
				MigrationIndex                uint64
				SourceShard, DestinationShard int
				Step                          string
				Leftovers                     bool
			}
			if json.Unmarshal([]byte(line[len("data: "):]), &m) == nil && m.Leftovers && m.Step == "Moving" {
				found(fmt.Sprintf("bucket %d from shard %d to %d at index %d", m.Bucket, m.SourceShard, m.DestinationShard, m.MigrationIndex))
			}
		}
	}
}
