package node

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/shardnode/shardnode/replication"
	"github.com/shardnode/shardnode/resharding"
)

// TestEncodeMigrationPartsFitsTheLimit: a batch too big for the bus's
// payload goes in parts that each fit and that together carry every item
// once, in order; one that fits goes whole.
func TestEncodeMigrationPartsFitsTheLimit(t *testing.T) {
	b := &resharding.Batch{DB: "db", Shard: 2, Bucket: 7, MigrationIndex: 11, DatabaseID: "dbid"}
	for i := range 100 {
		b.Items = append(b.Items, replication.Item{ID: fmt.Sprintf("doc/%d", i), ChangeVector: "A:1-x", Body: bytes.Repeat([]byte("x"), 1000+i)})
	}
	whole, err := b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int64{int64(len(whole)), 20_000, 3_000, 100} {
		parts, err := encodeMigrationParts(b, limit)
		if err != nil {
			t.Fatal(err)
		}
		if limit == int64(len(whole)) && len(parts) != 1 {
			t.Fatalf("limit %d: a batch that fits went in %d parts", limit, len(parts))
		}
		var got []replication.Item
		for _, p := range parts {
			d, err := resharding.DecodeBatch(p)
			if err != nil {
				t.Fatalf("limit %d: %v", limit, err)
			}
			if int64(len(p)) > limit && len(d.Items) > 1 {
				t.Fatalf("limit %d: a part of %d items has %d bytes", limit, len(d.Items), len(p))
			}
			if d.DB != b.DB || d.Shard != b.Shard || d.Bucket != b.Bucket || d.MigrationIndex != b.MigrationIndex || d.DatabaseID != b.DatabaseID {
				t.Fatalf("limit %d: part header %+v", limit, d)
			}
			got = append(got, d.Items...)
		}
		if len(got) != len(b.Items) {
			t.Fatalf("limit %d: %d items in the parts, want %d", limit, len(got), len(b.Items))
		}
		for i := range got {
			if got[i].ID != b.Items[i].ID || !bytes.Equal(got[i].Body, b.Items[i].Body) {
				t.Fatalf("limit %d: item %d is %q, want %q", limit, i, got[i].ID, b.Items[i].ID)
			}
		}
	}
}
