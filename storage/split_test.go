package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
)

// bodyKeys counts the keys of the doc family: the split items kept whole.
func bodyKeys(t *testing.T, s *Store) int { return familyKeys(t, s, prefixDoc) }

// bigBody is a document body kept under its own key, tagged with v.
func bigBody(v int) string {
	return fmt.Sprintf(`{"v":%d,"pad":"%s"}`, v, strings.Repeat("p", bodyKeyMin))
}

// TestSplitItemsReadWhole: a document whose body is kept under its own key
// reads back whole through every path, and the body key follows the item
// through overwrites, shrinking, growing, deletion and a purge, leaving
// nothing behind and bucket sizes that add up.
func TestSplitItemsReadWhole(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	id := "orders/1"
	b := bucket.ForID(id)
	check := func(step string, wantBody string, wantBodyKeys int) {
		t.Helper()
		if n := bodyKeys(t, s); n != wantBodyKeys {
			t.Fatalf("%s: %d body keys, want %d", step, n, wantBodyKeys)
		}
		d, err := s.GetItem(id)
		if wantBody == "" {
			if err == nil && !d.Deleted() {
				t.Fatalf("%s: item still live: %s", step, d.Body)
			}
			return
		}
		if err != nil || string(d.Body) != wantBody {
			t.Fatalf("%s: get %q %v, want %q", step, d.Body, err, wantBody)
		}
		var walked, meta []*Document
		if err := s.IterateBuckets(b, b, func(d *Document) bool { walked = append(walked, d); return true }); err != nil {
			t.Fatal(err)
		}
		if err := s.IterateBucketsMeta(b, b, func(d *Document) bool { meta = append(meta, d); return true }); err != nil {
			t.Fatal(err)
		}
		if len(walked) != 1 || string(walked[0].Body) != wantBody || len(meta) != 1 || meta[0].Body != nil || meta[0].ChangeVector != d.ChangeVector {
			t.Fatalf("%s: walked %d items, meta %d", step, len(walked), len(meta))
		}
		ch, err := s.Changes(0, 100)
		if err != nil || len(ch) != 1 || string(ch[0].Body) != wantBody {
			t.Fatalf("%s: changes %v %v", step, ch, err)
		}
		var scanned int
		if err := s.Scan(func(d *Document) bool { scanned++; return string(d.Body) == wantBody }); err != nil || scanned != 1 {
			t.Fatalf("%s: scanned %d, %v", step, scanned, err)
		}
		st, err := s.BucketStats(b)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(len(itemKey(b, id)) + d.encodedLen())
		if d.splitBody() {
			want += int64(len(itemKey(b, id)) + d.bodyValueLen())
		}
		if st.Size != want || st.DocumentsCount != 1 {
			t.Fatalf("%s: bucket %+v, want size %d and one document", step, st, want)
		}
	}
	write := func(body string) string {
		t.Helper()
		res, err := s.Write(ctx, []Op{put(id, body)})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].ChangeVector
	}
	write(bigBody(1))
	check("big", bigBody(1), 1)
	write(`{"small":true}`)
	check("shrunk", `{"small":true}`, 0)
	write(bigBody(2))
	check("grown", bigBody(2), 1)
	// Two versions in one group: the last is what stays.
	if _, err := s.Write(ctx, []Op{put(id, bigBody(3)), put(id, `{"small":2}`), put(id, bigBody(4))}); err != nil {
		t.Fatal(err)
	}
	check("one group", bigBody(4), 1)
	// If-Match reads only the metadata and still compares versions.
	cv := write(bigBody(5))
	if _, err := s.Write(ctx, []Op{{Kind: OpPut, ID: id, Collection: "Users", Body: []byte(bigBody(6)), IfMatch: cv}}); err != nil {
		t.Fatal(err)
	}
	check("if-match", bigBody(6), 1)
	if _, err := s.Write(ctx, []Op{{Kind: OpDelete, ID: id}}); err != nil {
		t.Fatal(err)
	}
	check("deleted", "", 0)
	write(bigBody(7))
	d, err := s.GetItem(id)
	if err != nil {
		t.Fatal(err)
	}
	all, err := changevector.Parse(d.ChangeVector)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, []Op{{Kind: OpPurge, ID: id, CoveredBy: all.Version}}); err != nil {
		t.Fatal(err)
	}
	check("purged", "", 0)
}

// TestSplitItemsConflictKeepsBothBodies: a replication conflict between a
// stored split item (read without its body) and an incoming version keeps
// the winner's body and records the loser's whole.
func TestSplitItemsConflictKeepsBothBodies(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	id := "orders/2"
	if _, err := s.Write(ctx, []Op{put(id, bigBody(1))}); err != nil {
		t.Fatal(err)
	}
	// A concurrent version from another replica, modified earlier: the
	// stored one wins and must be rewritten with its body.
	in := Op{Kind: OpReplicate, ID: id, Collection: "Users", Body: []byte(bigBody(2)), ChangeVector: "B:1-otherdatabaseid000000", Source: "otherdatabaseid000000", LastModified: time.Unix(1, 0)}
	res, err := s.Write(ctx, []Op{in})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Conflict {
		t.Fatalf("no conflict: %+v", res[0])
	}
	d, err := s.GetItem(id)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Body) != bigBody(1) {
		t.Fatalf("winner body %q", d.Body)
	}
	cs, err := s.Conflicts(10)
	if err != nil || len(cs) != 1 {
		t.Fatalf("conflicts %v %v", cs, err)
	}
	var loser map[string]any
	if err := json.Unmarshal(cs[0].Document, &loser); err != nil || loser["v"] != float64(2) {
		t.Fatalf("loser %s: %v", cs[0].Document, err)
	}
}

// TestSplitItemsReadersSeeOneVersion: readers racing overwrites of a split
// item never get one version's change vector with another's body.
func TestSplitItemsReadersSeeOneVersion(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	id := "orders/3"
	var mu sync.Mutex
	bodyOf := map[string]string{} // change vector → body written with it
	var stop atomic.Bool
	var wg sync.WaitGroup
	type seen struct{ cv, body string }
	var reads []seen
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v := 0; v < 300; v++ {
			body := bigBody(v)
			if v%3 == 1 {
				body = fmt.Sprintf(`{"v":%d}`, v) // inline now and then
			}
			res, err := s.Write(ctx, []Op{put(id, body)})
			if err != nil {
				t.Error(err)
				break
			}
			mu.Lock()
			bodyOf[res[0].ChangeVector] = body
			mu.Unlock()
		}
		stop.Store(true)
	}()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []seen
			for !stop.Load() {
				d, err := s.GetItem(id)
				if err == ErrNotFound {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				local = append(local, seen{d.ChangeVector, string(d.Body)})
			}
			mu.Lock()
			reads = append(reads, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(reads) == 0 {
		t.Fatal("no reads raced the writes")
	}
	for _, r := range reads {
		if bodyOf[r.cv] != r.body {
			t.Fatalf("read change vector %s with body %q, written with %q", r.cv, r.body, bodyOf[r.cv])
		}
	}
}

// TestOnlyBodiesGoToBlobFiles: Pebble separates the values of the doc
// family and no other, so a mid-size document (inline body, item value over
// 256 bytes) and the metadata of a large one stay in the sstables, where a
// write reads them.
func TestOnlyBodiesGoToBlobFiles(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	mid := fmt.Sprintf(`{"m":"%s"}`, strings.Repeat("m", bodyKeyMin-20)) // inline, item value > 256 B
	for i := range 200 {
		if _, err := s.Write(ctx, []Op{put(fmt.Sprintf("mid/%d", i), mid)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if m := s.db.Metrics(); m.BlobFiles.LiveCount != 0 {
		t.Fatalf("mid-size items went to %d blob files (%d bytes)", m.BlobFiles.LiveCount, m.BlobFiles.ValueSize)
	}
	for i := range 200 {
		if _, err := s.Write(ctx, []Op{put(fmt.Sprintf("big/%d", i), bigBody(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	m := s.db.Metrics()
	// The blob files hold the large items, whole, and nothing else.
	var want uint64
	for i := range 200 {
		d, err := s.Get(fmt.Sprintf("big/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		want += uint64(d.docValueLen())
	}
	if m.BlobFiles.LiveCount == 0 || m.BlobFiles.ValueSize != want {
		t.Fatalf("blob files hold %d bytes of values, want the large items' %d", m.BlobFiles.ValueSize, want)
	}
}

// TestReadOrderFollowsTheDocuments: whole-document reads try the doc key
// first once they mostly find split items, and the item key first once
// they mostly find small ones, and read every document right either way,
// including ones that changed size since the guess was made.
func TestReadOrderFollowsTheDocuments(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	write := func(big bool, v int) {
		t.Helper()
		var ops []Op
		for i := range 100 {
			body := fmt.Sprintf(`{"v":%d}`, v)
			if big {
				body = bigBody(v)
			}
			ops = append(ops, put(fmt.Sprintf("d/%d", i), body))
		}
		if _, err := s.Write(ctx, ops); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func(big bool, v int) {
		t.Helper()
		want := fmt.Sprintf(`{"v":%d}`, v)
		if big {
			want = bigBody(v)
		}
		for i := range 100 {
			d, err := s.get(itemKey(bucket.ForID(fmt.Sprintf("d/%d", i)), fmt.Sprintf("d/%d", i)), bucket.ForID(fmt.Sprintf("d/%d", i)))
			if err != nil || string(d.Body) != want {
				t.Fatalf("d/%d: %v %q, want %q", i, err, d.Body, want)
			}
		}
	}
	write(false, 1)
	readAll(false, 1)
	if s.order.docFirst() {
		t.Fatal("small documents read: still trying doc keys first")
	}
	write(true, 2) // read item key first, then the doc key
	readAll(true, 2)
	if !s.order.docFirst() {
		t.Fatal("split documents read: still trying item keys first")
	}
	write(false, 3) // read doc key first, find none, then the item key
	readAll(false, 3)
	if _, err := s.get(itemKey(bucket.ForID("none"), "none"), bucket.ForID("none")); err != ErrNotFound {
		t.Fatalf("missing document: %v", err)
	}
}
