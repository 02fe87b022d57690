package systemtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
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
	var ids []string
	tenants := 0
	for k := 0; tenants < 12; k++ {
		tenant := fmt.Sprintf("t/%d", k)
		if _, shard := bucketOf(t, A, "db", tenant); shard != 0 {
			continue
		}
		tenants++
		var cmds []string
		for i := range 35 + k%25 {
			id := fmt.Sprintf("d%d$%s", i, tenant)
			ids = append(ids, id)
			cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":%q,"Document":{"N":0}}`, id))
		}
		testcluster.Must(t, 201, "POST", A+"/databases/db/bulk_docs?waitForReplicas="+fmt.Sprint(rf), `{"Commands":[`+join(cmds)+`]}`)
	}
	rec := testcluster.Must(t, 200, "GET", A+"/admin/databases/db", "").JSON(t)
	end := uint32(rec["Sharding"].(map[string]any)["BucketRanges"].([]any)[1].(map[string]any)["BucketRangeStart"].(float64)) - 1
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

// followAllLeftovers follows url's /events for db and lists the
// migrations the documents migrator (or the driver, for racers) starts,
// of any bucket.
func followAllLeftovers(t *testing.T, url, db string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/databases/"+db+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
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
					mu.Lock()
					seen = append(seen, fmt.Sprintf("bucket %d from shard %d to %d at index %d", m.Bucket, m.SourceShard, m.DestinationShard, m.MigrationIndex))
					mu.Unlock()
				}
			}
		}
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
