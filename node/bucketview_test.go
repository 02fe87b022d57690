package node

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/config"
)

// TestBucketFiguresCountAMovingDocumentOnce: while a bucket moves, its
// documents are on the source and the destination; the bucket view and the
// buckets report count each once (from the shard that owns the bucket: the
// source until the flip, the destination after), as a query does, list
// the ids once, and show what each shard holds in ByShard.
func TestBucketFiguresCountAMovingDocumentOnce(t *testing.T) {
	// Hold the move in Moved (copied, not flipped), then after the flip
	// before the source cleans up its copy.
	n := testNode(t, t.TempDir(), func(cfg *config.Config) {
		cfg.Debug.Failpoints = "resharding/before-confirm=3s,resharding/before-cleanup=3s"
	})
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 3}`)
	c.must(201, "PUT", "/databases/db/docs?id=users/2", `{"Name":"Ann"}`)
	b := bucket.ForID("users/2")
	src := int(c.must(200, "GET", "/databases/db/sharding/bucket?id=users/2", "").json(t)["Shard"].(float64))
	dst := (src + 1) % 3
	c.must(202, "POST", "/databases/db/resharding", fmt.Sprintf(`{"FromBucket": %d, "ToBucket": %d, "ToShard": %d}`, b, b, dst))

	status := func() string {
		for _, m := range c.must(200, "GET", "/databases/db/resharding", "").json(t)["BucketMigrations"].([]any) {
			if mm := m.(map[string]any); uint32(mm["Bucket"].(float64)) == b {
				return mm["Status"].(string)
			}
		}
		return ""
	}
	check := func(step string, owner int) {
		t.Helper()
		if got := status(); got != step {
			t.Fatalf("bucket %d is %q, want %q", b, got, step)
		}
		view := c.must(200, "GET", fmt.Sprintf("/databases/db/buckets/%d", b), "").json(t)
		ids := fmt.Sprint(view["Documents"])
		if view["DocumentsCount"] != float64(1) || ids != "[users/2]" {
			t.Errorf("%s: bucket view counts %v documents, ids %s, want 1 and [users/2]: %v", step, view["DocumentsCount"], ids, view)
		}
		want := []int{src, dst}
		slices.Sort(want)
		if got := fmt.Sprint(view["Shards"]); got != fmt.Sprint(want) {
			t.Errorf("%s: Shards %s, want %v (both hold the document)", step, got, want)
		}
		by, _ := view["ByShard"].([]any)
		if len(by) != 2 {
			t.Fatalf("%s: ByShard %v, want both shards", step, view["ByShard"])
		}
		var size float64
		for _, e := range by {
			em := e.(map[string]any)
			sn := int(em["Shard"].(float64))
			notOwned := float64(0)
			if sn != owner {
				notOwned = 1
			} else {
				size = em["Size"].(float64)
			}
			if em["DocumentsCount"] != float64(1) || em["NotOwnedDocumentsCount"] != notOwned {
				t.Errorf("%s: ByShard entry %v, want 1 document held, %v of it not owned (owner %d)", step, em, notOwned, owner)
			}
		}
		if view["Size"] != size {
			t.Errorf("%s: Size %v, want the owner's %v", step, view["Size"], size)
		}
		for _, q := range []string{fmt.Sprintf("from=%d&to=%d", b, b), "groups=7"} {
			rep := c.must(200, "GET", "/databases/db/buckets?"+q, "").json(t)
			var docs float64
			for _, g := range rep["Groups"].([]any) {
				docs += g.(map[string]any)["DocumentsCount"].(float64)
			}
			if docs != 1 {
				t.Errorf("%s: the report (%s) counts %v documents, want 1: %v", step, q, docs, rep)
			}
		}
		if got := c.must(200, "POST", "/databases/db/queries", `{"Query":"from @all_docs"}`).json(t)["TotalResults"]; got != float64(1) {
			t.Errorf("%s: a query counts %v", step, got)
		}
	}
	waitFor(t, 10*time.Second, "the bucket to be in Moved", func() bool { return status() == "Moved" })
	check("Moved", src)
	waitFor(t, 10*time.Second, "the bucket to change owner", func() bool { return status() == "OwnershipTransferred" })
	check("OwnershipTransferred", dst)
}
