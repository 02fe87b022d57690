package systemtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestBackAndForthRangeMovesLeaveNothingForTheMigrator moves the range of
// shard 0 to shard 1 and back, again and again, while writers overwrite
// the documents of the buckets in it (every such bucket holds documents
// throughout, so none flips as empty under a racing write). Every write
// into a moving bucket is covered by its move's passes, so no move leaves
// anything behind: the documents migrator must start no migration, during
// the moves or after them.
func TestBackAndForthRangeMovesLeaveNothingForTheMigrator(t *testing.T) {
	if testing.Short() {
		t.Skip("six range moves under writers")
	}
	t.Run("rf2", func(t *testing.T) { backAndForthRangeMoves(t, 2) })
	t.Run("rf3", func(t *testing.T) { backAndForthRangeMoves(t, 3) })
}

func backAndForthRangeMoves(t *testing.T, rf int) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", fmt.Sprintf(`{"Shards":2,"ReplicationFactor":%d}`, rf))
	// Tenants whose buckets lie in shard 0's range, 35-59 documents each.
	ids := loadShard0Tenants(t, A, "db", 12, 35, 25, rf)
	end := shard0End(t, A, "db")
	leftovers := followAllLeftovers(t, A, "db")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]int{}
	runClients(&wg, 6, 11, stop, func(rnd *rand.Rand) {
		id := ids[rnd.IntN(len(ids))]
		r, err := testcluster.Do("PUT", c.URL(rnd.IntN(3))+"/databases/db/docs?id="+id, fmt.Sprintf(`{"N":%d}`, rnd.IntN(1000)))
		if err != nil || r.Status != 201 {
			mu.Lock()
			errs[fmt.Sprintf("%v %d", err, r.Status)]++
			mu.Unlock()
		}
	})
	to := 1
	for move := range 6 {
		op := startReshard(t, c.URL(move%3), "db", 0, end, to)
		waitOperation(t, A, "db", op, 2*time.Minute)
		t.Logf("move %d to shard %d done; %d leftovers migrations so far", move+1, to, len(leftovers()))
		to = 1 - to
	}
	close(stop)
	wg.Wait()
	// Sweeps after the last ownership change run within a second or two;
	// give them time to find something, then ask that nothing was found.
	testcluster.WaitFor(t, 10*time.Second, "every replica to agree", func() error { return converged(t, c, "db") })
	if len(errs) > 0 {
		t.Logf("writers' errors: %v", errs)
	}
	if l := leftovers(); len(l) > 0 {
		t.Errorf("the documents migrator started %d migrations: %s", len(l), strings.Join(l, "; "))
	}
}

// loadShard0Tenants creates documents d0$t/k, d1$t/k, ... of n tenants
// t/k whose buckets lie in shard 0's range, base+k%spread documents each,
// waiting for rf replicas, and returns their ids.
func loadShard0Tenants(t *testing.T, url, db string, n, base, spread, rf int) []string {
	t.Helper()
	var ids []string
	tenants := 0
	for k := 0; tenants < n; k++ {
		tenant := fmt.Sprintf("t/%d", k)
		if _, shard := bucketOf(t, url, db, tenant); shard != 0 {
			continue
		}
		tenants++
		var cmds []string
		for i := range base + k%spread {
			id := fmt.Sprintf("d%d$%s", i, tenant)
			ids = append(ids, id)
			cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":%q,"Document":{"N":0}}`, id))
		}
		testcluster.Must(t, 201, "POST", fmt.Sprintf("%s/databases/%s/bulk_docs?waitForReplicas=%d", url, db, rf), `{"Commands":[`+join(cmds)+`]}`)
	}
	return ids
}

// shard0End is the last bucket of shard 0's range in db's record, with
// shard 0 first and shard 1 next.
func shard0End(t *testing.T, url, db string) uint32 {
	t.Helper()
	rec := testcluster.Must(t, 200, "GET", url+"/admin/databases/"+db, "").JSON(t)
	return uint32(rec["Sharding"].(map[string]any)["BucketRanges"].([]any)[1].(map[string]any)["BucketRangeStart"].(float64)) - 1
}

// leftoverStart is the Moving step of a migration the documents migrator
// (or the driver, for racers) started, as /events tells it.
type leftoverStart struct {
	Bucket                        uint32
	MigrationIndex                uint64
	SourceShard, DestinationShard int
}

func (l leftoverStart) String() string {
	return fmt.Sprintf("bucket %d from shard %d to %d at index %d", l.Bucket, l.SourceShard, l.DestinationShard, l.MigrationIndex)
}

// scanLeftoverStarts reads an /events stream until it ends, calling found
// for each leftovers migration's Moving step.
func scanLeftoverStarts(r io.Reader, found func(leftoverStart)) {
	sc := bufio.NewScanner(r)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: ") && event == "migration":
			var m struct {
				leftoverStart
				Step      string
				Leftovers bool
			}
			if json.Unmarshal([]byte(line[len("data: "):]), &m) == nil && m.Leftovers && m.Step == "Moving" {
				found(m.leftoverStart)
			}
		}
	}
}

// openEvents opens url's /events stream for db.
func openEvents(ctx context.Context, url, db string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/databases/"+db+"/events", nil)
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(req)
}

// followAllLeftovers follows url's /events for db and lists the
// migrations the documents migrator (or the driver, for racers) starts,
// of any bucket.
func followAllLeftovers(t *testing.T, url, db string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res, err := openEvents(ctx, url, db)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		scanLeftoverStarts(res.Body, func(l leftoverStart) {
			mu.Lock()
			seen = append(seen, l.String())
			mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		res.Body.Close()
		<-done
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func rangeMovesAcrossCleanRestarts(t *testing.T, rf int) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, MigratorIntervalMs: 3000})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", fmt.Sprintf(`{"Shards":2,"ReplicationFactor":%d}`, rf))
	ids := loadShard0Tenants(t, A, "db", 10, 20, 20, rf)
	end := shard0End(t, A, "db")
	leftovers := followLeftoversOnEveryNode(t, c, "db")
	up := newUpNodes(c)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Each writer owns the ids of its number and writes increasing values,
	// so that the value each id ends with is known: its last acknowledged
	// one, or one of the writes after it whose outcome the writer never
	// heard (errors are expected while a node stops).
	const writers = 4
	type written struct {
		acked   int   // 0: the load's
		unknown []int // values written since, unanswered or refused
	}
	outcomes := make([]map[string]*written, writers)
	for w := range writers {
		outcomes[w] = map[string]*written{}
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 17))
			for v := 1; ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				id := ids[w+writers*rnd.IntN((len(ids)-w+writers-1)/writers)]
				o := outcomes[w][id]
				if o == nil {
					o = &written{}
					outcomes[w][id] = o
				}
				r, err := testcluster.Do("PUT", up.pick(rnd)+"/databases/db/docs?id="+id, fmt.Sprintf(`{"N":%d}`, v))
				if err == nil && r.Status == 201 {
					o.acked, o.unknown = v, nil
				} else {
					o.unknown = append(o.unknown, v)
				}
			}
		})
	}
	restart := func(i int) {
		up.set(i, false)
		c.Members[i].Stop()
		c.Members[i].Start()
		waitCaughtUp(t, c, i)
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
	// No acknowledged write is lost, and nothing older comes back.
	lost, checked := 0, 0
	for w := range writers {
		for id, o := range outcomes[w] {
			if o.acked > 0 {
				checked++
			}
			var got struct{ Results []struct{ N int } }
			if err := json.Unmarshal(testcluster.Must(t, 200, "GET", A+"/databases/db/docs?id="+id, "").Body, &got); err != nil || len(got.Results) != 1 {
				t.Fatalf("read %s: %v %+v", id, err, got)
			}
			if n := got.Results[0].N; n != o.acked && !slices.Contains(o.unknown, n) {
				lost++
				t.Errorf("%s holds %d; the last acknowledged write was %d, and %v went unanswered after it", id, n, o.acked, o.unknown)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d ids lost their last acknowledged write", lost)
	}
	if checked < len(ids)/2 {
		t.Errorf("only %d of %d ids had an acknowledged write to check", checked, len(ids))
	}
	t.Logf("%d ids checked against their last acknowledged write", checked)
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
				if res, err := openEvents(ctx, url, db); err == nil {
					scanLeftoverStarts(res.Body, func(l leftoverStart) {
						mu.Lock()
						if s := l.String(); !slices.Contains(seen, s) {
							seen = append(seen, s)
						}
						mu.Unlock()
					})
					res.Body.Close()
				}
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

// TestSingleBucketMovesAmongThreeShardsLeaveNothingForTheMigrator moves
// single buckets (FromBucket = ToBucket) of 12 tenants among three shards
// of three replicas each, to random destinations, three moves at a time
// (one per source, each started as soon as the previous one of its mover
// completed), while writers create, overwrite and delete the tenants'
// documents through random nodes, and the documents migrator sweeps every
// 3 s. Every write into a moving bucket is covered by its move's passes:
// the migrator must start no migration, during the moves or after them.
// Unlike the range moves above, each bucket often comes back to a shard
// within a second of leaving it, and the destinations' replicas store a
// bucket's snapshot while their records may not show its migration yet.
func TestSingleBucketMovesAmongThreeShardsLeaveNothingForTheMigrator(t *testing.T) {
	if testing.Short() {
		t.Skip("120 single-bucket moves under writers")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, MigratorIntervalMs: 3000})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":3}`)
	type tenant struct {
		name   string
		bucket uint32
		shard  int // where it is before the moves
		n      int
	}
	var tenants []tenant
	seen := map[uint32]bool{}
	for k := 0; len(tenants) < 12; k++ {
		tn := tenant{name: fmt.Sprintf("t/%d", k), n: 35 + k%25}
		if tn.bucket, tn.shard = bucketOf(t, A, "db", tn.name); seen[tn.bucket] {
			continue // one tenant per bucket: each mover moves its own
		}
		seen[tn.bucket] = true
		tenants = append(tenants, tn)
		var cmds []string
		for i := range tn.n {
			cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"d%d$%s","Document":{"N":0}}`, i, tn.name))
		}
		testcluster.Must(t, 201, "POST", A+"/databases/db/bulk_docs?waitForReplicas=3", `{"Commands":[`+join(cmds)+`]}`)
	}
	leftovers := followAllLeftovers(t, A, "db")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]int{}
	acked := 0
	runClients(&wg, 6, 17, stop, func(rnd *rand.Rand) {
		tn := tenants[rnd.IntN(len(tenants))]
		// Ids past the tenant's first documents are created (and deleted)
		// as the writers go.
		url := fmt.Sprintf("%s/databases/db/docs?id=d%d$%s", c.URL(rnd.IntN(3)), rnd.IntN(tn.n+10), tn.name)
		var r testcluster.Response
		var err error
		if rnd.IntN(5) == 0 {
			r, err = testcluster.Do("DELETE", url, "")
		} else {
			r, err = testcluster.Do("PUT", url, fmt.Sprintf(`{"N":%d}`, rnd.IntN(1000)))
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil || (r.Status != 201 && r.Status != 204) {
			errs[fmt.Sprintf("%v %d %.80s", err, r.Status, r.Body)]++
			return
		}
		acked++
	})
	// Each mover runs in its own goroutine, which must not fail the test
	// itself: it returns its error.
	move := func(tn tenant, to int, url string) error {
		r, err := testcluster.Expect(202, "POST", url+"/databases/db/resharding", fmt.Sprintf(`{"FromBucket":%d,"ToBucket":%d,"ToShard":%d}`, tn.bucket, tn.bucket, to))
		if err != nil {
			return err
		}
		var started struct{ OperationId string }
		if err := json.Unmarshal(r.Body, &started); err != nil {
			return err
		}
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			r, err := testcluster.Expect(200, "GET", A+"/databases/db/resharding/"+started.OperationId, "")
			if err != nil {
				return err
			}
			var op struct{ Status string }
			if err := json.Unmarshal(r.Body, &op); err != nil {
				return err
			}
			if op.Status == "Completed" {
				return nil
			}
		}
		return fmt.Errorf("moving bucket %d to shard %d: operation %s not completed after 2 minutes", tn.bucket, to, started.OperationId)
	}
	const movers, movesEach = 3, 40
	var mwg sync.WaitGroup
	moveErrs := make([]error, movers)
	for p := range movers {
		mwg.Go(func() {
			rnd := rand.New(rand.NewPCG(5, uint64(p)))
			var mine []tenant
			for i, tn := range tenants {
				if i%movers == p {
					mine = append(mine, tn)
				}
			}
			// Where each of the mover's buckets is: only this mover moves them.
			at := map[uint32]int{}
			for _, tn := range mine {
				at[tn.bucket] = tn.shard
			}
			for i := range movesEach {
				tn := mine[rnd.IntN(len(mine))]
				to := (at[tn.bucket] + 1 + rnd.IntN(2)) % 3
				if moveErrs[p] = move(tn, to, c.URL((i+p)%3)); moveErrs[p] != nil {
					return
				}
				at[tn.bucket] = to
			}
		})
	}
	mwg.Wait()
	close(stop)
	wg.Wait()
	if err := errors.Join(moveErrs...); err != nil {
		t.Fatal(err)
	}
	// Past a whole migrator interval after the last move, every replica
	// has swept at least once with nothing moving.
	time.Sleep(4 * time.Second)
	testcluster.WaitFor(t, 30*time.Second, "every replica to agree", func() error { return converged(t, c, "db") })
	t.Logf("%d single-bucket moves, %d acknowledged writes", movers*movesEach, acked)
	if len(errs) > 0 {
		t.Logf("writers' errors: %v", errs)
	}
	if l := leftovers(); len(l) > 0 {
		t.Errorf("the documents migrator started %d migrations: %s", len(l), strings.Join(l, "; "))
	}
}
