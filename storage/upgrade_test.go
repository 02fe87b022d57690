package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// toOldBodyLayout rewrites a closed replica in dir the way replicas were
// laid out before the doc family: each split item's body alone, after its
// etag, under the body family. It also plants a body no item refers to.
func toOldBodyLayout(t *testing.T, dir string) (split int) {
	t.Helper()
	db, err := pebble.Open(dir, PebbleOptions(nil, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixDoc}, UpperBound: []byte{prefixDoc + 1}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	for ok := it.First(); ok; ok = it.Next() {
		etag, body, err := docValueBody(it.Value())
		if err != nil {
			t.Fatal(err)
		}
		old := append(binary.AppendUvarint(nil, etag), body...)
		if err := b.Set(familyKey(prefixOldBody, it.Key()), old, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(append([]byte(nil), it.Key()...), nil); err != nil {
			t.Fatal(err)
		}
		split++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	orphan := familyKey(prefixOldBody, itemKey(7, "gone/1"))
	if err := b.Set(orphan, append(binary.AppendUvarint(nil, 3), bigBody(0)...), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	return split
}

// familyKeys counts the keys of one family.
func familyKeys(t *testing.T, s *Store, family byte) int {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{family}, UpperBound: []byte{family + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}

// TestOpenUpgradesOldBodyLayout: a replica written with bodies alone under
// the retired body family opens with every document readable whole, its
// split items under doc keys, no body key left (an orphan is dropped), the
// same statistics, and keeps working: overwrites and deletes of upgraded
// items leave no stale doc key.
func TestOpenUpgradesOldBodyLayout(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openTest(t, dir)
	var ops []Op
	for i := range 300 {
		body := fmt.Sprintf(`{"v":%d}`, i)
		if i%3 != 0 {
			body = bigBody(i)
		}
		ops = append(ops, put(fmt.Sprintf("users/%d", i), body))
	}
	if _, err := s.Write(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, []Op{{Kind: OpDelete, ID: "users/1"}}); err != nil {
		t.Fatal(err)
	}
	before, beforeSize := s.Stats(), totalSize(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if split := toOldBodyLayout(t, dir); split != 199 {
		t.Fatalf("%d split items in the old layout, want 199", split)
	}

	s = openTest(t, dir)
	if n := familyKeys(t, s, prefixOldBody); n != 0 {
		t.Fatalf("%d body keys left after the upgrade", n)
	}
	if n := familyKeys(t, s, prefixDoc); n != 199 {
		t.Fatalf("%d doc keys after the upgrade, want 199", n)
	}
	after := s.Stats()
	if after.DocumentsCount != before.DocumentsCount || after.TombstonesCount != before.TombstonesCount || after.LastEtag != before.LastEtag || after.ChangeVector != before.ChangeVector || totalSize(t, s) != beforeSize {
		t.Fatalf("stats changed by the upgrade: %+v, before %+v", after, before)
	}
	for i := range 300 {
		id := fmt.Sprintf("users/%d", i)
		d, err := s.Get(id)
		if i == 1 {
			if err != ErrNotFound {
				t.Fatalf("deleted %s: %v", id, err)
			}
			continue
		}
		want := fmt.Sprintf(`{"v":%d}`, i)
		if i%3 != 0 {
			want = bigBody(i)
		}
		if err != nil || string(d.Body) != want {
			t.Fatalf("get %s after the upgrade: %v %q", id, err, d.Body)
		}
	}
	// Upgraded items are ordinary items: replacing one with a small body
	// or a tombstone drops its doc key.
	if _, err := s.Write(ctx, []Op{put("users/2", `{"small":true}`), {Kind: OpDelete, ID: "users/4"}}); err != nil {
		t.Fatal(err)
	}
	if n := familyKeys(t, s, prefixDoc); n != 197 {
		t.Fatalf("%d doc keys after shrinking and deleting upgraded items, want 197", n)
	}
	if d, err := s.Get("users/2"); err != nil || string(d.Body) != `{"small":true}` {
		t.Fatalf("get users/2: %v", err)
	}
}

// totalSize adds up the sizes of every bucket of the replica.
func totalSize(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	if err := s.RangeStats(0, 1<<20-1, func(st BucketStats) error { n += st.Size; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}
