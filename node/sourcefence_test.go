package node

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/storage"
)

// TestSourceFenceAnswersTheReplicasOwnWritesIntoTheBucket: a source
// replica told by a bucket's sender of its flip answers the etag of the
// newest write it took itself into that bucket (0 for a bucket it took
// none in), which the sender then waits to hold, and refuses routed writes
// into it from then on, as after the flip, for the fence's window and
// until its node has the sender's record.
func TestSourceFenceAnswersTheReplicasOwnWritesIntoTheBucket(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	c.must(201, "PUT", "/databases/db/docs?id=a$t1", `{"v":1}`)
	r := c.must(201, "PUT", "/databases/db/docs?id=b$t1", `{"v":1}`)
	cv, err := changevector.Parse(r.json(t)["ChangeVector"].(string))
	if err != nil {
		t.Fatal(err)
	}
	rec := n.recordOf("db")
	l, err := n.local("db", 0)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(id string) sourceFenceReply {
		t.Helper()
		data, _ := json.Marshal(sourceFenceRequest{DB: "db", Shard: 0, Bucket: bucket.ForID(id), To: 3, RecordEtag: rec.Etag + 7})
		out, err := n.serveSourceFence(context.Background(), data)
		if err != nil {
			t.Fatal(err)
		}
		return out.(sourceFenceReply)
	}
	got := ask("t1")
	if got.DatabaseID != l.s.DatabaseID() || got.OwnEtag != cv.Version.EtagOf(l.s.DatabaseID()) || got.OwnEtag == 0 {
		t.Errorf("bucket with writes: %+v, want %s at the last write's etag %d", got, l.s.DatabaseID(), cv.Version.EtagOf(l.s.DatabaseID()))
	}
	if got := ask("t2"); got.OwnEtag != 0 {
		t.Errorf("bucket without writes: own etag %d, want 0", got.OwnEtag)
	}

	// From the fence on, routed writes into the fenced buckets are refused
	// as the write guard refuses them after the flip, naming the new
	// owner by the sender's record; others, and direct writes, go in.
	write := func(routed bool, id string) error {
		l.routed = routed
		_, err := l.write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: id, Body: []byte(`{"v":2}`)}}, writeConcern{}, 0)
		return err
	}
	var ae *apiError
	if err := write(true, "c$t1"); !errors.As(err, &ae) || ae.Type != "BucketNotOwned" || ae.Owner == nil || *ae.Owner != (ownerHint{Shard: 3, RecordEtag: rec.Etag + 7}) {
		t.Errorf("routed write into a fenced bucket: %v (owner %+v), want BucketNotOwned naming shard 3 at etag %d", err, ae, rec.Etag+7)
	}
	if err := write(true, "c$t3"); err != nil {
		t.Errorf("routed write into another bucket: %v", err)
	}
	if err := write(false, "d$t1"); err != nil {
		t.Errorf("write to db$0 itself into the fenced bucket: %v", err)
	}
	// A mark whose record this node has reached is moot: the write
	// guard decides from then on.
	n.sourceFences.set(sourceFenceKey{"db", 0, bucket.ForID("t1")}, ownerHint{Shard: 3, RecordEtag: n.recordOf("db").Etag})
	if err := write(true, "f$t1"); err != nil {
		t.Errorf("routed write into a bucket fenced by a record this node has: %v", err)
	}
	n.sourceFences.set(sourceFenceKey{"db", 0, bucket.ForID("t1")}, ownerHint{Shard: 3, RecordEtag: rec.Etag + 7})
	n.sourceFences.mu.Lock()
	for k, v := range n.sourceFences.m {
		v.until = time.Now()
		n.sourceFences.m[k] = v
	}
	n.sourceFences.mu.Unlock()
	if err := write(true, "e$t1"); err != nil {
		t.Errorf("routed write once the fence's window ended: %v", err)
	}

	// One replica only: nothing to ask, the sender goes on at once.
	if err := (reshardCluster{n}).FenceSourceReplicas(context.Background(), "db", 0, bucket.ForID("t1"), 3, rec.Etag); err != nil {
		t.Fatal(err)
	}
}
