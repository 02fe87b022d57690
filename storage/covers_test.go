package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardnode/shardnode/changevector"
)

// coveredFixture writes a bucket on a source store and returns the
// migration of it to an empty destination, with the version that
// migration brings and the bucket.
func coveredFixture(t *testing.T) (dst *Store, ops []Op, v changevector.Vector, b uint32) {
	t.Helper()
	ctx := context.Background()
	src := openTest(t, t.TempDir())
	res, err := src.Write(ctx, []Op{put("a$k", `{"v":1}`), put("b$k", `{"v":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	b = res[0].Bucket
	st, err := src.BucketStats(b)
	if err != nil {
		t.Fatal(err)
	}
	if v, err = changevector.ParseVector(st.ChangeVector); err != nil {
		t.Fatal(err)
	}
	dst, err = Open(Options{Dir: t.TempDir(), NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	return dst, migrateOps(t, src, b, 7), v, b
}

// TestWriteCoveredRefusesWholeWhenNotCovered: a condition that does not
// hold fails the group with ErrNotCovered and applies none of it; once
// the bucket holds the version the same write applies.
func TestWriteCoveredRefusesWholeWhenNotCovered(t *testing.T) {
	ctx := context.Background()
	dst, ops, v, b := coveredFixture(t)
	covers := []Covers{{Bucket: b, Version: v}}
	write := []Op{put("a$k", `{"v":10}`), put("c$k", `{"v":3}`)}
	if _, err := dst.WriteCovered(ctx, covers, write); !errors.Is(err, ErrNotCovered) {
		t.Fatalf("write before the migration: %v, want ErrNotCovered", err)
	}
	for _, id := range []string{"a$k", "c$k"} {
		if _, err := dst.Get(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s after a refused write: %v", id, err)
		}
	}
	if st, _ := dst.BucketStats(b); st.DocumentsCount != 0 {
		t.Fatalf("stats after a refused write: %+v", st)
	}
	if _, err := dst.Write(ctx, ops); err != nil {
		t.Fatal(err)
	}
	res, err := dst.WriteCovered(ctx, covers, write)
	if err != nil {
		t.Fatalf("write after the migration: %v", err)
	}
	if len(res) != len(write) {
		t.Fatalf("%d results for %d ops", len(res), len(write))
	}
	if d, err := dst.Get("a$k"); err != nil || string(d.Body) != `{"v":10}` {
		t.Fatalf("a$k: %+v %v", d, err)
	}
}

// TestWriteCoveredSharesTheRoundOfWhatItWaitsFor: in one commit round a
// group whose condition the round's earlier groups make true applies,
// and shares their commit; one ahead of them is refused.
func TestWriteCoveredSharesTheRoundOfWhatItWaitsFor(t *testing.T) {
	dst, ops, v, b := coveredFixture(t)
	covers := []Covers{{Bucket: b, Version: v}}
	req := func(c []Covers, ops []Op) *writeReq {
		return &writeReq{ops: ops, covers: c, now: time.Now().UTC(), resp: make(chan writeResp, 1)}
	}
	// The committer of a store nobody wrote to waits on its queue with no
	// timer armed: the test runs a round itself, as the committer would.
	early := req(covers, []Op{put("early$k", `{}`)})
	migrate := req(nil, ops)
	held := req(covers, []Op{put("a$k", `{"v":10}`)})
	before := dst.Stats().Commits
	dst.commitRound([]*writeReq{early, migrate, held})
	if r := <-early.resp; !errors.Is(r.err, ErrNotCovered) {
		t.Fatalf("a group ahead of the migration: %v, want ErrNotCovered", r.err)
	}
	if r := <-migrate.resp; r.err != nil {
		t.Fatal(r.err)
	}
	r := <-held.resp
	if r.err != nil {
		t.Fatalf("a group behind the migration in its round: %v", r.err)
	}
	if got := dst.Stats().Commits - before; got != 1 {
		t.Fatalf("%d commits for one round", got)
	}
	d, err := dst.Get("a$k")
	if err != nil || string(d.Body) != `{"v":10}` || d.ChangeVector != r.results[0].ChangeVector {
		t.Fatalf("a$k: %+v %v", d, err)
	}
	cv, _ := changevector.Parse(d.ChangeVector)
	for _, o := range ops {
		if moved, _ := changevector.Parse(o.ChangeVector); o.ID == "a$k" && changevector.Compare(cv.Version, moved.Version) != changevector.Newer {
			t.Fatalf("the write does not continue the moved version %s: %s", o.ChangeVector, d.ChangeVector)
		}
	}
	if _, err := dst.Get("early$k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused group's write: %v", err)
	}
}

// TestWriteQueuedOrdersWhatFollows: a group written once WriteQueued's
// callback ran commits after the queued one, so its condition on what
// the queued one brings holds, whichever round each lands in.
func TestWriteQueuedOrdersWhatFollows(t *testing.T) {
	ctx := context.Background()
	for i := range 50 {
		dst, ops, v, b := coveredFixture(t)
		done := make(chan error, 1)
		if _, err := dst.WriteQueued(ctx, ops, func() {
			go func() {
				_, err := dst.WriteCovered(ctx, []Covers{{Bucket: b, Version: v}}, []Op{put("a$k", `{"v":10}`)})
				done <- err
			}()
		}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("run %d: the write behind the queued migration: %v", i, err)
		}
	}
}
