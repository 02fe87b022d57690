//go:build slow

package systemtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// The slowest system tests, a minute or two each on 2 cores: with them,
// systemtest took 605 s on this machine (session 36), over go test's
// 10-minute default. They build only with the tag slow, and CI runs every
// Test function of this file in a step of its own (.ci/run); by hand:
//
//	go test -tags slow -run 'TestQueriesDuringRangeMove' -timeout 20m ./systemtest

// TestKillDuringReplicatedLoadLosesNothing writes with waitForReplicas=2
// while one node is killed with SIGKILL; every acknowledged write must be
// there afterwards, and the restarted node catches up.
func TestKillDuringReplicatedLoadLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("process cluster")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes})
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	var mu sync.Mutex
	acked := map[string]int{}
	ackCount := 0
	outcomes := map[string]int{}
	defer func() {
		if t.Failed() {
			t.Logf("outcomes: %v", outcomes)
		}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := c.URL(w % 2) // A and B; C gets killed
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d/%d", w, i%100)
				start := time.Now()
				r, err := testcluster.Do("PUT", fmt.Sprintf("%s/databases/db/docs?id=%s&waitForReplicas=2&waitForReplicasTimeout=500ms", url, id), fmt.Sprintf(`{"v":%d}`, i))
				mu.Lock()
				if err == nil && r.Status == 201 {
					acked[id] = i
					ackCount++
				}
				if err != nil {
					outcomes[err.Error()]++
				} else {
					key := fmt.Sprintf("%d %s", r.Status, time.Since(start).Round(100*time.Millisecond))
					if r.Status != 201 {
						key += " " + string(r.Body[:min(len(r.Body), 160)])
					}
					outcomes[key]++
				}
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return ackCount }
	testcluster.WaitFor(t, 30*time.Second, "a write load", func() error {
		if n := count(); n < 200 {
			return fmt.Errorf("%d acked", n)
		}
		return nil
	})
	c.Members[2].Kill()
	before := count()
	testcluster.WaitFor(t, 60*time.Second, "writes to go on without C", func() error {
		if n := count(); n < before+200 {
			return fmt.Errorf("%d acked since the kill", n-before)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	c.Members[2].Start()
	testcluster.WaitFor(t, 60*time.Second, "replicas to converge after restart", func() error { return converged(t, c, "db") })
	for id, v := range acked {
		for i := range c.Members {
			r := testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db/docs?id=%s", c.URL(i), id), "").JSON(t)
			got := r["Results"].([]any)[0].(map[string]any)["v"].(float64)
			if int(got) < v {
				t.Fatalf("%s through %s: v=%v, acknowledged %d", id, c.Members[i].Tag, got, v)
			}
		}
	}
	t.Logf("%d acknowledged ids all present on every node", len(acked))
}

// TestRangeMovesAcrossCleanRestartsLeaveNothingForTheMigrator moves the
// range of shard 0 to shard 1 and back at replication factors 3 and 2
// while writers overwrite the documents of the buckets in it, and
// restarts one node cleanly before each move and another while the move
// runs (at replication factor 3 every node holds a replica of both
// shards, so each restart stops a source and a destination replica; the
// raft leader is among them in turn). A clean stop
// hands its writes over and a restarted replica catches up before it
// serves, so every write into a moving bucket is still covered by its
// move's passes: the documents migrator must start no migration, every
// replica must hold only its shard's buckets, and every id must hold its
// last acknowledged value (or that of a later write whose answer was
// lost).
func TestRangeMovesAcrossCleanRestartsLeaveNothingForTheMigrator(t *testing.T) {
	if testing.Short() {
		t.Skip("six range moves under writers and twelve restarts")
	}
	t.Run("rf3", func(t *testing.T) { rangeMovesAcrossCleanRestarts(t, 3) })
	t.Run("rf2", func(t *testing.T) { rangeMovesAcrossCleanRestarts(t, 2) })
}

// TestQueriesDuringRangeMove runs queries without pause while a range of
// 1,000 buckets holding 50,000 documents moves: every answer holds every
// document exactly once.
func TestQueriesDuringRangeMove(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	// 50,000 documents over the 1,000 buckets anchored by tenant/0..999,
	// which all live in shard 0's range or elsewhere: find the range first.
	const docs, tenants = 50000, 1000
	buckets := map[uint32]bool{}
	var cmds []string
	for i := 0; i < docs; i++ {
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"d%d$t/%d","Document":{"N":%d,"@metadata":{"@collection":"Items"}}}`, i, i%tenants, i))
		if len(cmds) == 2000 {
			testcluster.Must(t, 201, "POST", A+"/databases/db/bulk_docs", `{"Commands":[`+join(cmds)+`]}`)
			cmds = cmds[:0]
		}
	}
	for i := 0; i < tenants; i++ {
		b, _ := bucketOf(t, A, "db", fmt.Sprintf("t/%d", i))
		buckets[b] = true
	}
	// Move the whole of shard 0's range (it holds about a third of the
	// tenants' buckets, plus empty ones) to shard 2.
	rec := testcluster.Must(t, 200, "GET", A+"/admin/databases/db", "").JSON(t)
	ranges := rec["Sharding"].(map[string]any)["BucketRanges"].([]any)
	to := uint32(ranges[1].(map[string]any)["BucketRangeStart"].(float64)) - 1
	moving := 0
	for b := range buckets {
		if b <= to {
			moving++
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var queries int
	var bad error
	var mu sync.Mutex
	for q := 0; q < 2; q++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := testcluster.Expect(200, "POST", c.URL(q+1)+"/databases/db/queries", `{"Query":"from Items"}`)
				if err == nil {
					var out struct {
						Results      []map[string]any
						TotalResults int
					}
					err = json.Unmarshal(r.Body, &out)
					seen := map[float64]bool{}
					for _, d := range out.Results {
						n := d["N"].(float64)
						if seen[n] {
							err = fmt.Errorf("document %v twice", n)
							break
						}
						seen[n] = true
					}
					if err == nil && (len(seen) != docs || out.TotalResults != docs) {
						err = fmt.Errorf("query saw %d documents (TotalResults %d), want %d", len(seen), out.TotalResults, docs)
					}
				}
				mu.Lock()
				queries++
				if err != nil && bad == nil {
					bad = err
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	id := startReshard(t, A, "db", 0, to, 2)
	op := waitOperation(t, A, "db", id, 5*time.Minute)
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	if bad != nil {
		t.Fatalf("after %d queries: %v", queries, bad)
	}
	if op["DocumentsMoved"].(float64) < float64(docs*moving/tenants) {
		t.Fatalf("operation moved %v documents, want about %d", op["DocumentsMoved"], docs*moving/tenants)
	}
	t.Logf("moved %d non-empty buckets (+%d empty) in %v (%.1f ms per non-empty bucket) under %d full queries, each exact",
		moving, int(to)+1-moving, elapsed.Round(time.Millisecond), float64(elapsed.Milliseconds())/float64(moving), queries)
}

// TestWritesRacingAnEmptyBucketFlipAreMovedPromptly: writers put new
// documents while a move flips half of the bucket space, most of it empty,
// in bulk, and read each back once it is acknowledged. The source's
// replica leases the empty buckets before their flip (opSpanLease): a
// write into one is refused until the flip, then taken by the new owner,
// and a bucket written before the lease moves one at a time. So every
// acknowledged document reads back at once (before the lease, one that
// passed the source's guard just before such a flip committed on the
// source after it, and read back as 404 until it was moved), and every
// one is readable through the database once the operation ended.
// With three nodes and two replicas a shard, the writers write and read
// back through every node, and the lease goes to the source's other
// replica over the bus.
func TestWritesRacingAnEmptyBucketFlipAreMovedPromptly(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20 s move under load; run without -short")
	}
	t.Run("one node", func(t *testing.T) { racingEmptyFlip(t, 1, 1) })
	t.Run("three nodes, two replicas", func(t *testing.T) { racingEmptyFlip(t, 3, 2) })
}

func racingEmptyFlip(t *testing.T, nodes, rf int) {
	c := testcluster.Start(t, testcluster.Options{Nodes: nodes})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", fmt.Sprintf(`{"Shards":2,"ReplicationFactor":%d}`, rf))
	var cmds []string
	for i := range 3000 { // many non-empty buckets: the move takes a while
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"pre/%d","Document":{"N":%d}}`, i, i))
	}
	testcluster.Must(t, 201, "POST", A+"/databases/db/bulk_docs", `{"Commands":[`+join(cmds)+`]}`)
	stop := make(chan struct{})
	var mu sync.Mutex
	var acked, unread, where []string
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("n%d-%d", w, k)
				via := c.URL(w % nodes)
				if r, err := testcluster.Do("PUT", via+"/databases/db/docs?id="+id, `{"v":1}`); err == nil && r.Status == 201 {
					g, err := testcluster.Do("GET", via+"/databases/db/docs?id="+id, "")
					mu.Lock()
					acked = append(acked, id)
					miss := err != nil || g.Status != 200
					if miss {
						unread = append(unread, fmt.Sprintf("%s (%v %d)", id, err, g.Status))
					}
					mu.Unlock()
					if miss {
						w := whereIs(c, "db", id, 2, via)
						mu.Lock()
						where = append(where, w)
						mu.Unlock()
					}
				}
			}
		}()
	}
	testcluster.WaitFor(t, 30*time.Second, "writers under way", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(acked) < 200 {
			return fmt.Errorf("%d writes acknowledged", len(acked))
		}
		return nil
	})
	id := startReshard(t, A, "db", 0, 524287, 1)
	waitOperation(t, A, "db", id, 2*time.Minute)
	close(stop)
	wg.Wait()
	if len(unread) > 0 {
		t.Errorf("%d of %d acknowledged writes did not read back at once, the first %v", len(unread), len(acked), unread[:min(len(unread), 5)])
		for _, w := range where {
			t.Log(w)
		}
	}
	testcluster.WaitFor(t, 5*time.Second, "every acknowledged document readable through the database", func() error {
		missing := 0
		var first string
		for _, id := range acked {
			if r, err := testcluster.Do("GET", A+"/databases/db/docs?id="+id, ""); err != nil || r.Status != 200 {
				if missing == 0 {
					first = id
				}
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d acknowledged documents not readable, first %s", missing, len(acked), first)
		}
		return nil
	})
}

// whereIs says, for a document that did not read back through via, where
// it is as each node sees it: its bucket's owner by that node's record,
// which of the node's replicas of db's shards hold it, and whether it
// reads back through via now.
func whereIs(c *testcluster.Cluster, db, id string, shards int, via string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, right after its read missed:", id)
	for i, m := range c.Members {
		if r, err := testcluster.Do("GET", fmt.Sprintf("%s/databases/%s/sharding/bucket?id=%s", c.URL(i), db, id), ""); err == nil {
			fmt.Fprintf(&b, " node %s routes it by %s;", m.Tag, bytes.TrimSpace(r.Body))
		}
		for sh := range shards {
			if r, err := testcluster.Do("GET", fmt.Sprintf("%s/databases/%s$%d/docs?id=%s", c.URL(i), db, sh, id), ""); err == nil && r.Status == 200 {
				fmt.Fprintf(&b, " node %s's replica of shard %d holds it;", m.Tag, sh)
			}
		}
	}
	if r, err := testcluster.Do("GET", via+"/databases/"+db+"/docs?id="+id, ""); err == nil {
		fmt.Fprintf(&b, " read again through %s: %d", via, r.Status)
	}
	return b.String()
}
