package storage

import (
	"context"
	"testing"
)

// ship applies every change of from (after etag 0) to to, as replication
// does, and records progress.
func ship(t *testing.T, from, to *Store) []Result {
	t.Helper()
	items, err := from.Changes(to.ReplicationProgress(from.DatabaseID()), 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ops []Op
	for _, d := range items {
		ops = append(ops, Op{Kind: OpReplicate, ID: d.ID, Collection: d.Collection, Body: d.Body, ChangeVector: d.ChangeVector, LastModified: d.LastModified, Flags: d.Flags})
	}
	if len(items) > 0 {
		ops = append(ops, Op{Kind: OpSetProgress, Source: from.DatabaseID(), Etag: items[len(items)-1].Etag})
	}
	res, err := to.Write(context.Background(), ops)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestReplicationDecidesByVersion(t *testing.T) {
	ctx := context.Background()
	a := openTest(t, t.TempDir())
	b, err := Open(Options{Dir: t.TempDir(), NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.Write(ctx, []Op{put("u/1", `{"v":"a1"}`), put("u/2", `{"v":"a2"}`)}); err != nil {
		t.Fatal(err)
	}
	ship(t, a, b)
	d, err := b.Get("u/1")
	ad, _ := a.Get("u/1")
	if err != nil || d.ChangeVector != ad.ChangeVector || string(d.Body) != `{"v":"a1"}` {
		t.Fatalf("replicated %+v %v", d, err)
	}
	// Shipping again sends nothing (progress is durable), and shipping
	// back is skipped as equal.
	if res := ship(t, a, b); len(res) != 0 {
		t.Fatalf("reshipped %d items", len(res))
	}
	for _, r := range ship(t, b, a) {
		if r.Kind == OpReplicate && !r.Skipped {
			t.Fatalf("echo applied: %+v", r)
		}
	}
	// B updates u/2 (newer): A applies it. B deletes u/1: the tombstone
	// replicates.
	if _, err := b.Write(ctx, []Op{put("u/2", `{"v":"b2"}`), {Kind: OpDelete, ID: "u/1"}}); err != nil {
		t.Fatal(err)
	}
	ship(t, b, a)
	if d, _ := a.Get("u/2"); string(d.Body) != `{"v":"b2"}` {
		t.Fatalf("newer not applied: %s", d.Body)
	}
	if _, err := a.Get("u/1"); err != ErrNotFound {
		t.Fatalf("tombstone not applied: %v", err)
	}
	// Concurrent writes conflict: both converge to the later one, the
	// loser is recorded on each side.
	if _, err := a.Write(ctx, []Op{put("u/3", `{"v":"first"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, []Op{put("u/3", `{"v":"second"}`)}); err != nil {
		t.Fatal(err)
	}
	ship(t, a, b)
	ship(t, b, a)
	ship(t, a, b)
	da, _ := a.Get("u/3")
	db, _ := b.Get("u/3")
	if string(da.Body) != `{"v":"second"}` || string(db.Body) != `{"v":"second"}` || da.ChangeVector != db.ChangeVector {
		t.Fatalf("not converged: a=%s %s b=%s %s", da.Body, da.ChangeVector, db.Body, db.ChangeVector)
	}
	// The replica that saw the conflict (B, receiving A's older write)
	// records the loser; A simply received the newer resolution.
	var all []Conflict
	for _, s := range []*Store{a, b} {
		cs, err := s.Conflicts(10)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, cs...)
	}
	if len(all) != 1 || string(all[0].Document) != `{"v":"first"}` || all[0].ResolvedTo != da.ChangeVector {
		t.Fatalf("conflicts: %+v", all)
	}
}
