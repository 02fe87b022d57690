package systemtest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// listIDs lists the documents of a GET /docs listing at url, or fails
// unless each id comes once.
func listIDs(url string) ([]string, error) {
	r, err := testcluster.Expect(200, "GET", url, "")
	if err != nil {
		return nil, err
	}
	var out struct {
		Results []struct {
			Metadata struct {
				ID string `json:"@id"`
			} `json:"@metadata"`
		}
	}
	if err := json.Unmarshal(r.Body, &out); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	ids := make([]string, len(out.Results))
	seen := map[string]bool{}
	for i, d := range out.Results {
		if seen[d.Metadata.ID] {
			return nil, fmt.Errorf("GET %s: %s listed twice", url, d.Metadata.ID)
		}
		seen[d.Metadata.ID] = true
		ids[i] = d.Metadata.ID
	}
	return ids, nil
}

// TestListingFromEveryNodeDuringAMove: with one replica per shard, each on
// its own node, every node lists the whole database (asking the other two
// nodes for their shards), and keeps listing every document exactly once,
// in order, while a third of the buckets move between shards on two other
// nodes.
func TestListingFromEveryNodeDuringAMove(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":1}`)
	const docs, tenants = 1000, 100
	var cmds, want []string
	for i := 0; i < docs; i++ {
		id := fmt.Sprintf("item/%04d$t/%d", i, i%tenants)
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":%q,"Document":{"N":%d}}`, id, i))
		want = append(want, id)
	}
	testcluster.Must(t, 201, "POST", A+"/databases/db/bulk_docs", `{"Commands":[`+join(cmds)+`]}`)
	members := shardMembers(t, A, "db")
	if fmt.Sprint(members) != "map[0:[A] 1:[B] 2:[C]]" {
		t.Fatalf("members %v: want one shard per node", members)
	}
	check := func(node int) error {
		byID, err := listIDs(c.URL(node) + "/databases/db/docs?startsWith=ITEM/&pageSize=1000")
		if err == nil && !slices.Equal(byID, want) {
			err = fmt.Errorf("node %d lists %d ids by prefix, want %d in order", node, len(byID), len(want))
		}
		if err != nil {
			return err
		}
		recent, err := listIDs(c.URL(node) + "/databases/db/docs?pageSize=1000")
		if err == nil && len(recent) != docs {
			err = fmt.Errorf("node %d lists %d recent documents, want %d", node, len(recent), docs)
		}
		return err
	}
	for i := range c.Members {
		if err := check(i); err != nil {
			t.Fatal(err)
		}
	}
	// A node without a replica of a shard cannot list it alone.
	testcluster.Must(t, 404, "GET", A+"/databases/db$1/docs", "")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad error
	listings := 0
	for i := range c.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := check(i)
				mu.Lock()
				listings++
				if err != nil && bad == nil {
					bad = err
				}
				mu.Unlock()
			}
		}()
	}
	rec := testcluster.Must(t, 200, "GET", A+"/admin/databases/db", "").JSON(t)
	ranges := rec["Sharding"].(map[string]any)["BucketRanges"].([]any)
	to := uint32(ranges[1].(map[string]any)["BucketRangeStart"].(float64)) - 1
	op := waitOperation(t, A, "db", startReshard(t, c.URL(1), "db", 0, to, 2), 2*time.Minute)
	close(stop)
	wg.Wait()
	if bad != nil {
		t.Fatalf("after %d listings: %v", listings, bad)
	}
	if op["BucketsMigrated"].(float64) == 0 {
		t.Fatalf("nothing moved: %v", op)
	}
	for i := range c.Members {
		if err := check(i); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d listings during a move of %v non-empty buckets, each exact", listings, op["BucketsMigrated"])
}
