package storage

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
)

func migrateOps(t *testing.T, from *Store, b uint32, index uint64) []Op {
	t.Helper()
	var ops []Op
	err := from.IterateBuckets(b, b, func(d *Document) bool {
		if !d.Artificial() {
			ops = append(ops, Op{Kind: OpMigrate, ID: d.ID, Collection: d.Collection, Body: d.Body, ChangeVector: d.ChangeVector,
				LastModified: d.LastModified, Flags: d.Flags, MigrationIndex: index, DatabaseID: "DBIDDBIDDBIDDBIDDBIDDB"})
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// TestMoveThereAndBack moves a bucket's items to another replica (composite
// change vectors, duplicates no-ops), purges the source (artificial
// tombstones, stats empty), checks that If-Match survives, and moves the
// bucket back over the artificial tombstones.
func TestMoveThereAndBack(t *testing.T) {
	ctx := context.Background()
	src := openTest(t, t.TempDir())
	dst, err := Open(Options{Dir: t.TempDir(), NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	res, err := src.Write(ctx, []Op{put("a$k", `{"v":1}`), put("b$k", `{"v":2}`), put("c$k", `{"v":3}`), {Kind: OpDelete, ID: "c$k"}})
	if err != nil {
		t.Fatal(err)
	}
	preMoveCV := res[0].ChangeVector
	b := res[0].Bucket
	ops := migrateOps(t, src, b, 42)
	if len(ops) != 3 {
		t.Fatalf("%d items to move", len(ops))
	}
	out, err := dst.Write(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := dst.Get("a$k")
	cv, _ := changevector.Parse(d.ChangeVector)
	if !cv.IsComposite() || !strings.Contains(d.ChangeVector, "MOVE:42-DBIDDBIDDBIDDBIDDBIDDB") || d.Flags&FlagFromResharding == 0 {
		t.Fatalf("moved item %+v", d)
	}
	pre, _ := changevector.Parse(preMoveCV)
	if changevector.Compare(cv.Version, pre.Version) != changevector.Equal {
		t.Fatalf("version changed in the move: %s vs %s", d.ChangeVector, preMoveCV)
	}
	// Sending again (a restarted source) is a no-op by version.
	again, err := dst.Write(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range again {
		if !r.Skipped {
			t.Fatalf("duplicate applied: %+v", r)
		}
	}
	st, _ := dst.BucketStats(b)
	if st.DocumentsCount != 2 || st.TombstonesCount != 1 {
		t.Fatalf("destination stats %+v", st)
	}
	// If-Match with the pre-move vector still matches; the version goes on.
	w, err := dst.Write(ctx, []Op{{Kind: OpPut, ID: "a$k", Body: []byte(`{"v":10}`), IfMatch: preMoveCV}})
	if err != nil {
		t.Fatalf("If-Match after move: %v", err)
	}
	after, _ := changevector.Parse(w[0].ChangeVector)
	if !after.Version.Covers(pre.Version) || changevector.Compare(after.Version, pre.Version) != changevector.Newer {
		t.Fatalf("version does not continue: %s after %s", w[0].ChangeVector, preMoveCV)
	}
	// Purge the source for what moved: nothing counts any more.
	srcBucket, _ := src.BucketStats(b)
	covered, _ := changevector.ParseVector(srcBucket.ChangeVector)
	var purge []Op
	for _, o := range ops {
		purge = append(purge, Op{Kind: OpPurge, ID: o.ID, CoveredBy: covered})
	}
	if _, err := src.Write(ctx, purge); err != nil {
		t.Fatal(err)
	}
	st, _ = src.BucketStats(b)
	if st.DocumentsCount != 0 || st.TombstonesCount != 0 || st.Size != 0 {
		t.Fatalf("source stats after purge %+v", st)
	}
	if _, err := src.Get("a$k"); err != ErrNotFound {
		t.Fatalf("purged item readable: %v", err)
	}
	// A sibling replica sending the purged version late is blocked.
	late, err := src.Write(ctx, []Op{{Kind: OpReplicate, ID: "b$k", Body: []byte(`{"v":2}`), ChangeVector: ops[1].ChangeVector, LastModified: ops[1].LastModified}})
	if err != nil || !late[0].Skipped {
		t.Fatalf("late sibling copy: %+v %v", late, err)
	}
	// Move everything back: the artificial tombstones do not block it.
	back, err := src.Write(ctx, migrateOps(t, dst, b, 77))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range back {
		if r.Skipped {
			t.Fatalf("moving back skipped %s", r.ID)
		}
	}
	if d, err := src.Get("b$k"); err != nil || string(d.Body) != `{"v":2}` {
		t.Fatalf("b$k after moving back: %+v %v", d, err)
	}
	if d, err := src.Get("a$k"); err != nil || string(d.Body) != `{"v":10}` {
		t.Fatalf("a$k after moving back: %+v %v", d, err)
	}
	_ = out
}

// TestPurgeKeepsWhatTheSenderNeverHad: a purge bounded by how far this
// replica's feed reached the sender keeps an item stored here later, even
// when the move's merged version covers its version (the version came from
// another shard's replica, so it says nothing of what the sender held).
func TestPurgeKeepsWhatTheSenderNeverHad(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	res, err := s.Write(ctx, []Op{{Kind: OpPut, ID: "old$k", Body: []byte(`{"v":1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	bound := res[0].Etag
	if _, err := s.Write(ctx, []Op{{Kind: OpPut, ID: "late$k", Body: []byte(`{"v":2}`)}}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.BucketStats(bucket.ForID("old$k"))
	covered, _ := changevector.ParseVector(st.ChangeVector) // covers both versions
	if _, err := s.Write(ctx, []Op{
		{Kind: OpPurge, ID: "old$k", CoveredBy: covered, SentFeeds: map[string]uint64{s.DatabaseID(): bound}},
		{Kind: OpPurge, ID: "late$k", CoveredBy: covered, SentFeeds: map[string]uint64{s.DatabaseID(): bound}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("old$k"); err != ErrNotFound {
		t.Fatalf("the item the sender had is still here: %v", err)
	}
	if d, err := s.Get("late$k"); err != nil || string(d.Body) != `{"v":2}` {
		t.Fatalf("the item stored after the sender's bound was purged: %v %v", d, err)
	}
}

// TestPurgeTakesWhatCameFromTheSender: above the bound, an item this
// replica got from the sender itself was the sender's, and its version
// tells whether it moved: it is purged when covered.
func TestPurgeTakesWhatCameFromTheSender(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	res, err := s.Write(ctx, []Op{{Kind: OpPut, ID: "own$k", Body: []byte(`{"v":1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	bound := res[0].Etag
	const sender = "SenderReplicaId"
	if _, err := s.Write(ctx, []Op{{Kind: OpReplicate, ID: "theirs$k", Body: []byte(`{"v":2}`), ChangeVector: "Z:7-" + sender,
		LastModified: time.Now().UTC(), Source: sender}}); err != nil {
		t.Fatal(err)
	}
	covered, _ := changevector.ParseVector("Z:7-" + sender + ", A:99-" + s.DatabaseID())
	if _, err := s.Write(ctx, []Op{{Kind: OpPurge, ID: "theirs$k", CoveredBy: covered, SentFeeds: map[string]uint64{s.DatabaseID(): bound}, SentBy: sender}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("theirs$k"); err != ErrNotFound {
		t.Fatalf("an item from the sender, covered, was kept: %v", err)
	}
}

// TestPurgeTakesWhatTheSenderHadFromAThirdReplica: above the bound, an
// item that came here from another replica than the sender is still the
// sender's when the sender had applied every write its order names (its
// feed bounds say so): it is purged when covered. One whose order names a
// write past the sender's bound of that feed, or a replica the sender
// does not name, is kept for the documents migrator. At replication
// factor 3 the first case left a whole bucket behind after a restart.
func TestPurgeTakesWhatTheSenderHadFromAThirdReplica(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	res, err := s.Write(ctx, []Op{{Kind: OpPut, ID: "own$k", Body: []byte(`{"v":1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	bound := res[0].Etag
	const sender, third, other = "SenderReplicaId", "ThirdReplicaId", "OtherReplicaId"
	for _, it := range []struct{ id, cv string }{
		{"had$k", "B:40-" + sender + ", C:12-" + third},
		{"later$k", "B:40-" + sender + ", C:13-" + third},
		{"unnamed$k", "B:40-" + sender + ", D:3-" + other},
	} {
		if _, err := s.Write(ctx, []Op{{Kind: OpReplicate, ID: it.id, Body: []byte(`{"v":2}`), ChangeVector: it.cv,
			LastModified: time.Now().UTC(), Source: third}}); err != nil {
			t.Fatal(err)
		}
	}
	covered, _ := changevector.ParseVector("B:40-" + sender + ", C:13-" + third + ", D:3-" + other + ", A:99-" + s.DatabaseID())
	feeds := map[string]uint64{sender: 50, third: 12, s.DatabaseID(): bound}
	var ops []Op
	for _, id := range []string{"had$k", "later$k", "unnamed$k"} {
		ops = append(ops, Op{Kind: OpPurge, ID: id, CoveredBy: covered, SentBy: sender, SentFeeds: feeds})
	}
	if _, err := s.Write(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("had$k"); err != ErrNotFound {
		t.Fatalf("an item whose every write the sender had, covered, was kept: %v", err)
	}
	for _, id := range []string{"later$k", "unnamed$k"} {
		if _, err := s.Get(id); err != nil {
			t.Fatalf("%s, with a write the sender never had, was purged: %v", id, err)
		}
	}
}
