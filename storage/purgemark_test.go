package storage

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
)

// TestPurgeMarkStopsLateCopiesOfWhatMoved: replica b purges a moved
// bucket before its sibling a's replication delivered all that a's last
// pass sent (a's node was down, or the wait timed out). The copies that
// arrive afterwards, across a restart of b, are stored as artificial
// tombstones, not live in a bucket the shard no longer owns; a write a
// made after the pass (a later leftover) and an item of another bucket
// still apply live.
func TestPurgeMarkStopsLateCopiesOfWhatMoved(t *testing.T) {
	ctx := context.Background()
	a := openTest(t, t.TempDir())
	bdir := t.TempDir()
	b, err := Open(Options{Dir: bdir, NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	const anchor = "tenants/9"
	bk := bucket.ForID(anchor)
	var ops []Op
	for i := range 6 {
		ops = append(ops, put(fmt.Sprintf("x/%d$%s", i, anchor), fmt.Sprintf(`{"n":%d}`, i)))
	}
	if _, err := a.Write(ctx, ops); err != nil {
		t.Fatal(err)
	}
	shipSome(t, a, b, 2) // b has x/0 and x/1 when the bucket is purged

	// a's last pass: everything of the bucket a held, through its feed.
	st, err := a.BucketStats(bk)
	if err != nil {
		t.Fatal(err)
	}
	pass := PurgeMark{ChangeVector: st.ChangeVector, SentThrough: map[string]uint64{a.DatabaseID(): a.LastEtag()}}
	if err := b.MarkPurged(bk, pass); err != nil {
		t.Fatal(err)
	}
	// The sender's pass at Moved, weaker, purges too; marking a pass
	// again changes nothing.
	atMoved := PurgeMark{ChangeVector: st.ChangeVector, SentThrough: map[string]uint64{a.DatabaseID(): 1}}
	for _, m := range []PurgeMark{atMoved, pass, atMoved} {
		if err := b.MarkPurged(bk, m); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(b.purgeMarksOf(bk)); n != 2 {
		t.Fatalf("bucket %d has %d marks, want 2", bk, n)
	}
	covered, _ := changevector.ParseVector(st.ChangeVector)
	var purge []Op
	for i := range 2 {
		purge = append(purge, Op{Kind: OpPurge, ID: fmt.Sprintf("x/%d$%s", i, anchor), CoveredBy: covered, SentFeeds: map[string]uint64{b.DatabaseID(): b.LastEtag()}, SentBy: a.DatabaseID()})
	}
	if _, err := b.Write(ctx, purge); err != nil {
		t.Fatal(err)
	}

	// The mark survives a restart.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err = Open(Options{Dir: bdir, NodeTag: "B"}); err != nil {
		t.Fatal(err)
	}

	// After the pass, a writes once more in the bucket (a leftover the
	// migrator moves) and in another bucket.
	if _, err := a.Write(ctx, []Op{put("x/late$"+anchor, `{"late":true}`), put("other/1", `{"o":1}`)}); err != nil {
		t.Fatal(err)
	}
	ship(t, a, b) // the late copies x/2..x/5, then the two new writes

	for i := range 6 {
		id := fmt.Sprintf("x/%d$%s", i, anchor)
		d, err := b.GetItem(id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if !d.Artificial() {
			t.Errorf("%s is stored %s on b; want an artificial tombstone (it moved away)", id, map[bool]string{true: "as a tombstone", false: "live"}[d.Deleted()])
		}
	}
	if _, err := b.Get("x/late$" + anchor); err != nil {
		t.Errorf("a write after the pass: %v; want it live for the documents migrator", err)
	}
	if _, err := b.Get("other/1"); err != nil {
		t.Errorf("another bucket's document: %v", err)
	}
	got, err := b.BucketStats(bk)
	if err != nil {
		t.Fatal(err)
	}
	if got.DocumentsCount != 1 {
		t.Errorf("bucket %d on b counts %d documents; want 1 (the later write)", bk, got.DocumentsCount)
	}
	// A re-sent copy of what is now an artificial tombstone is skipped.
	d, _ := a.GetItem("x/3$" + anchor)
	res, err := b.Write(ctx, []Op{{Kind: OpReplicate, ID: d.ID, Collection: d.Collection, Body: d.Body, ChangeVector: d.ChangeVector, LastModified: d.LastModified}})
	if err != nil || !res[0].Skipped {
		t.Errorf("re-sent copy: %+v %v; want skipped", res, err)
	}
	if _, err := b.Get("x/3$" + anchor); !errors.Is(err, ErrNotFound) {
		t.Errorf("x/3 after a re-send: %v", err)
	}
}

// TestPurgeMarkBlocksOnlyWhatTheSenderHad checks the rule item by item.
func TestPurgeMarkBlocksOnlyWhatTheSenderHad(t *testing.T) {
	cv := func(s string) changevector.ChangeVector {
		c, err := changevector.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	covered, _ := changevector.ParseVector("A:10-aaaa, C:7-cccc, X:4-xxxx")
	m := purgeMarks{{covered: covered, sentThrough: map[string]uint64{"aaaa": 10, "cccc": 5}}}
	for _, tc := range []struct {
		cv    string
		block bool
	}{
		{"A:3-aaaa", true},
		{"A:10-aaaa", true},
		{"A:11-aaaa", false},                       // written after the pass
		{"A:3-aaaa, C:5-cccc", true},               // both within
		{"A:3-aaaa, C:6-cccc", false},              // the sender had C only through 5
		{"B:2-bbbb", false},                        // a replica the pass does not name
		{"A:4-aaaa, MOVE:9-zzzz|X:4-xxxx", true},   // moved in earlier: the order entry tells
		{"A:12-aaaa, MOVE:9-zzzz|X:4-xxxx", false}, // moved in after the pass
		{"A:4-aaaa, MOVE:9-zzzz|X:5-xxxx", false},  // a version the pass does not cover
		{"MOVE:9-zzzz|X:4-xxxx", false},            // no write entry to judge by
	} {
		if got := m.blocks(cv(tc.cv)); got != tc.block {
			t.Errorf("%s: blocks %v, want %v", tc.cv, got, tc.block)
		}
	}
}
