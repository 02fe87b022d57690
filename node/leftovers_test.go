package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/storage"
)

// TestDocumentsMigratorMovesAnItemLeftInABucketItDoesNotOwn: an item that
// a shard holds in a bucket another shard owns (written here past the
// guard, as a write acknowledged by a dying source can be) is found by the
// documents migrator's sweep and moved to the owner, wherever the bucket
// lies among the other shards' ranges.
func TestDocumentsMigratorMovesAnItemLeftInABucketItDoesNotOwn(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *config.Config) { c.Resharding.MigratorIntervalMs = 50 })
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/left", `{"Shards": 3}`)
	rec := n.recordOf("left")
	// One id in each of the ranges shard 0 does not own.
	var ids []string
	for _, want := range []int{1, 2} {
		for i := 0; ; i++ {
			id := fmt.Sprintf("stray/%d", i)
			if rec.ShardOf(bucket.ForID(id)) == want {
				ids = append(ids, id)
				break
			}
		}
	}
	s0, _, ok := n.replicas.getWithReplicator("left", 0)
	if !ok {
		t.Fatal("shard 0 is not open")
	}
	for _, id := range ids {
		if _, err := s0.Write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: id, Collection: "Strays", Body: []byte(`{"v":1}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		owner := rec.ShardOf(bucket.ForID(id))
		for {
			onOwner := c.do("GET", fmt.Sprintf("/databases/left$%d/docs?id=%s", owner, id), "").Status == 200
			onSource := c.do("GET", "/databases/left$0/docs?id="+id, "").Status == 200
			if onOwner && !onSource {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: on its owner shard %d %v, still on shard 0 %v", id, owner, onOwner, onSource)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
