package node

import (
	"errors"
	"testing"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/storage"
)

// TestWriteGuardNamesOwnerAndTrustsNewerRecord checks the write guard's
// two sides: a refusal names the owning shard and the record that says
// so, and a write routed by a record newer than the replica's is let in.
func TestWriteGuardNamesOwnerAndTrustsNewerRecord(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3, "ReplicationFactor": 1}`)
	rec := n.recordOf("shop")
	if rec == nil {
		t.Fatal("no record for shop")
	}
	id := "users/1"
	owner := rec.ShardOf(bucket.ForID(id))
	other := (owner + 1) % 3
	ops := []storage.Op{{Kind: storage.OpPut, ID: id}}

	if err := n.guardWrites("shop", owner, ops, 0); err != nil {
		t.Fatalf("owner refused: %v", err)
	}
	for _, routed := range []uint64{0, rec.Etag} {
		err := n.guardWrites("shop", other, ops, routed)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Type != "BucketNotOwned" || ae.Owner == nil {
			t.Fatalf("non-owner routed by etag %d: %v, want BucketNotOwned naming the owner", routed, err)
		}
		if ae.Owner.Shard != owner || ae.Owner.RecordEtag != rec.Etag {
			t.Fatalf("refusal names %+v, want shard %d at etag %d", *ae.Owner, owner, rec.Etag)
		}
	}
	// A router whose record is newer than this node's chose this shard by
	// that later committed state: accepted.
	if err := n.guardWrites("shop", other, ops, rec.Etag+1); err != nil {
		t.Fatalf("write routed by a newer record refused: %v", err)
	}
}
