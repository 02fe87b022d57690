package storage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
)

func openTest(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, NodeTag: "A"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openPeer opens a second replica, on node B, closed at the test's end.
func openPeer(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Options{Dir: t.TempDir(), NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(id, body string) Op {
	return Op{Kind: OpPut, ID: id, Collection: "Users", Body: []byte(body)}
}

func TestPutGetDeleteAndChangeVectors(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	res, err := s.Write(ctx, []Op{put("users/1", `{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("A:1-%s", s.DatabaseID())
	if res[0].ChangeVector != want || res[0].Etag != 1 || res[0].Bucket != bucket.ForID("users/1") {
		t.Fatalf("result %+v, want cv %s", res[0], want)
	}
	d, err := s.Get("USERS/1") // ids are case-insensitive
	if err != nil || string(d.Body) != `{"a":1}` || d.ID != "users/1" || d.Collection != "Users" {
		t.Fatalf("get: %+v %v", d, err)
	}
	// If-Match with a stale vector fails and changes nothing.
	res2, err := s.Write(ctx, []Op{put("users/1", `{"a":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Write(ctx, []Op{{Kind: OpPut, ID: "users/1", Body: []byte(`{"a":3}`), IfMatch: want}})
	var ce *ConcurrencyError
	if !errors.As(err, &ce) || ce.Actual != res2[0].ChangeVector {
		t.Fatalf("stale If-Match: %v", err)
	}
	if _, err := s.Write(ctx, []Op{{Kind: OpPut, ID: "users/1", Body: []byte(`{"a":3}`), IfMatch: res2[0].ChangeVector}}); err != nil {
		t.Fatalf("current If-Match: %v", err)
	}
	del, err := s.Write(ctx, []Op{{Kind: OpDelete, ID: "users/1"}})
	if err != nil || !del[0].Deleted {
		t.Fatalf("delete: %+v %v", del, err)
	}
	if _, err := s.Get("users/1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	tomb, err := s.GetItem("users/1")
	if err != nil || !tomb.Deleted() || tomb.Etag != 4 {
		t.Fatalf("tombstone: %+v %v", tomb, err)
	}
	st := s.Stats()
	if st.DocumentsCount != 0 || st.TombstonesCount != 1 || st.LastEtag != 4 {
		t.Fatalf("stats %+v", st)
	}
	// Deleting what is absent is a no-op without a tombstone.
	del, err = s.Write(ctx, []Op{{Kind: OpDelete, ID: "nobody"}})
	if err != nil || del[0].Deleted || s.LastEtag() != 4 {
		t.Fatalf("no-op delete: %+v %v etag %d", del, err, s.LastEtag())
	}
}

// TestIfNewRefusesALiveDocument: a write that asks for a new document
// (RavenDB's empty expected change vector) applies when the id is absent
// or deleted, and is refused, with its whole group, when it is live.
func TestIfNewRefusesALiveDocument(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	first, err := s.Write(ctx, []Op{{Kind: OpPut, ID: "n", Body: []byte(`{"v":1}`), IfNew: true}})
	if err != nil {
		t.Fatalf("a new document: %v", err)
	}
	_, err = s.Write(ctx, []Op{put("other", `{}`), {Kind: OpPut, ID: "N", Body: []byte(`{"v":2}`), IfNew: true}})
	var ce *ConcurrencyError
	if !errors.As(err, &ce) || ce.Actual != first[0].ChangeVector || ce.Expected != "" {
		t.Fatalf("a second new document under the same id: %v", err)
	}
	if _, err := s.Get("other"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused write's group was applied: %v", err)
	}
	if _, err := s.Write(ctx, []Op{{Kind: OpDelete, ID: "n", IfNew: true}}); !errors.As(err, &ce) {
		t.Fatalf("a delete expecting no document, of a live one: %v", err)
	}
	if _, err := s.Write(ctx, []Op{{Kind: OpDelete, ID: "n"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, []Op{{Kind: OpPut, ID: "n", Body: []byte(`{"v":3}`), IfNew: true}}); err != nil {
		t.Fatalf("a new document where one was deleted: %v", err)
	}
}

func TestGroupIsAtomic(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	_, err := s.Write(ctx, []Op{put("a", `{}`), {Kind: OpPut, ID: "b", Body: []byte(`{}`), IfMatch: "A:9-zzzzzzzzzzzzzzzzzzzzzz"}})
	if err == nil {
		t.Fatal("group with a failing op succeeded")
	}
	if _, err := s.Get("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("first op of a failed group was applied: %v", err)
	}
	if s.Stats().DocumentsCount != 0 || s.LastEtag() != 0 {
		t.Fatalf("failed group left traces: %+v", s.Stats())
	}
}

func TestChangesFeedAndBucketStats(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		if _, err := s.Write(ctx, []Op{put(fmt.Sprintf("orders/%d$users/1", i), `{"x":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Rewrite some: they move to the end of the feed, once.
	for i := 0; i < 10; i++ {
		if _, err := s.Write(ctx, []Op{put(fmt.Sprintf("orders/%d$users/1", i), `{"x":2}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Write(ctx, []Op{{Kind: OpDelete, ID: "orders/10$users/1"}}); err != nil {
		t.Fatal(err)
	}
	var all []*Document
	var after uint64
	for {
		batch, err := s.Changes(after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 {
			break
		}
		all = append(all, batch...)
		after = batch[len(batch)-1].Etag
	}
	if len(all) != 50 {
		t.Fatalf("feed has %d items, want 50 (one per id)", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Etag <= all[i-1].Etag {
			t.Fatal("feed not in etag order")
		}
	}
	if last := all[len(all)-1]; !last.Deleted() || last.ID != "orders/10$users/1" {
		t.Fatalf("last change %+v", last)
	}
	b := bucket.ForID("users/1")
	st, err := s.BucketStats(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.DocumentsCount != 49 || st.TombstonesCount != 1 || st.Size <= 0 {
		t.Fatalf("bucket stats %+v", st)
	}
	cv, _ := changevector.ParseVector(st.ChangeVector)
	if cv.EtagOf(s.DatabaseID()) != 61 {
		t.Fatalf("bucket cv %s", st.ChangeVector)
	}
	var n int
	if err := s.IterateBuckets(b, b, func(*Document) bool { n++; return true }); err != nil || n != 50 {
		t.Fatalf("bucket iteration saw %d items: %v", n, err)
	}
	// Everything survives a reopen, and etags continue.
	s.Close()
	s2 := openTest(t, dir)
	if s2.LastEtag() != 61 || s2.Stats().DocumentsCount != 49 {
		t.Fatalf("after reopen: %+v", s2.Stats())
	}
	res, err := s2.Write(ctx, []Op{put("new", `{}`)})
	if err != nil || res[0].Etag != 62 {
		t.Fatalf("etag after reopen: %+v %v", res, err)
	}
}

func TestConcurrentWritersShareCommits(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if _, err := s.Write(ctx, []Op{put(fmt.Sprintf("w%d/%d", w, i), `{"v":1}`), put("shared", fmt.Sprintf(`{"w":%d}`, w))}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.DocumentsCount != 64*50+1 || st.LastEtag != 64*50*2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestAcknowledgedWritesSurviveSIGKILL runs a writer in a child process,
// kills it with SIGKILL in the middle of a load, and checks that every
// write it acknowledged is there after reopening.
func TestAcknowledgedWritesSurviveSIGKILL(t *testing.T) {
	if os.Getenv("SHARDNODE_STORAGE_CHILD") != "" {
		childWriter(os.Getenv("SHARDNODE_STORAGE_CHILD"))
		return
	}
	dir := filepath.Join(t.TempDir(), "replica")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcknowledgedWritesSurviveSIGKILL$")
	cmd.Env = append(os.Environ(), "SHARDNODE_STORAGE_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]string{}
	sc := bufio.NewScanner(out)
	deadline := time.Now().Add(30 * time.Second)
	lines := 0
	for sc.Scan() && lines < 5000 && time.Now().Before(deadline) {
		lines++
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "ack" {
			acked[f[1]] = f[2] // a writer's acks for one id come in increasing order
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(acked) < 100 {
		t.Fatalf("child acknowledged only %d writes", len(acked))
	}
	s := openTest(t, dir)
	for id, v := range acked {
		d, err := s.Get(id)
		if err != nil {
			t.Fatalf("acknowledged %s lost: %v", id, err)
		}
		want, _ := strconv.Atoi(v)
		// A later write to the same id may have committed without its
		// acknowledgement being read: the stored version is at least v,
		// and its body is whole (a large one under its own key).
		got, ok := versionOf(d.Body)
		if !ok || got < want || string(d.Body) != childBody(id, got) {
			t.Fatalf("%s = %.60s…, acknowledged v=%s", id, d.Body, v)
		}
	}
	// Every large body is under its key and no body key is left over.
	split := 0
	if err := s.IterateBuckets(0, bucket.MaxID, func(d *Document) bool {
		if d.splitBody() {
			split++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n := bodyKeys(t, s); n != split || split == 0 {
		t.Fatalf("%d split items, %d body keys", split, n)
	}
	t.Logf("%d acknowledged writes all present after SIGKILL (%d bodies under their own key)", len(acked), split)
}

// childBody is what childWriter writes as version i of id: small or, for
// two versions in three, large enough to be kept under its own key, so
// items grow and shrink across the kill.
func childBody(id string, i int) string {
	if (len(id)+i)%3 == 0 {
		return fmt.Sprintf(`{"v":%d}`, i)
	}
	return fmt.Sprintf(`{"v":%d,"pad":"%s"}`, i, strings.Repeat(id[:1], bodyKeyMin))
}

// versionOf reads v from a body childWriter wrote.
func versionOf(body []byte) (int, bool) {
	rest, ok := strings.CutPrefix(string(body), `{"v":`)
	if !ok {
		return 0, false
	}
	end := strings.IndexAny(rest, ",}")
	if end < 0 {
		return 0, false
	}
	v, err := strconv.Atoi(rest[:end])
	return v, err == nil
}

func childWriter(dir string) {
	s, err := Open(Options{Dir: dir, NodeTag: "A"})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("w%d/k%d", w, i%50) // one writer per id: values only grow
				_, err := s.Write(context.Background(), []Op{{Kind: OpPut, ID: id, Body: []byte(childBody(id, i))}})
				if err != nil {
					return
				}
				mu.Lock()
				fmt.Printf("ack %s %d\n", id, i)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestWritesSeeStoredItemsAfterReopenAndEviction checks the committer's
// shortcuts (buckets that never held an item are not read back; bucket
// statistics are cached): after a reopen, and with a cache small enough to
// evict, every write still sees what is stored and keeps exact statistics.
func TestWritesSeeStoredItemsAfterReopenAndEviction(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = fmt.Sprintf("items/%d", i)
	}
	s, err := Open(Options{Dir: dir, NodeTag: "A"})
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]string{}
	for _, id := range ids {
		res, err := s.Write(ctx, []Op{put(id, `{"v":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		first[id] = res[0].ChangeVector
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A checkpoint every 16 buckets fills the cache.
	s, err = Open(Options{Dir: dir, NodeTag: "A", checkpointBuckets: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.statsCacheMax = 16
	for round := 0; round < 2; round++ {
		for _, id := range ids {
			// If-Match proves the write read the stored item.
			res, err := s.Write(ctx, []Op{{Kind: OpPut, ID: id, Collection: "Users", Body: []byte(`{"v":2}`), IfMatch: first[id]}})
			if err != nil {
				t.Fatalf("round %d, %s: %v", round, id, err)
			}
			first[id] = res[0].ChangeVector
		}
	}
	want := map[uint32]int64{}
	for _, id := range ids {
		want[bucket.ForID(id)]++
	}
	for b, n := range want {
		st, err := s.BucketStats(b)
		if err != nil {
			t.Fatal(err)
		}
		if st.DocumentsCount != n || st.TombstonesCount != 0 {
			t.Fatalf("bucket %d: %+v, want %d documents", b, st, n)
		}
	}
	if st := s.Stats(); st.DocumentsCount != int64(len(ids)) {
		t.Fatalf("store counts %d documents, want %d", st.DocumentsCount, len(ids))
	}
	// A bucket that never held anything is still written correctly.
	fresh := "never-before"
	if s.used.has(bucket.ForID(fresh)) {
		t.Fatalf("bucket of %q already used", fresh)
	}
	if _, err := s.Write(ctx, []Op{put(fresh, `{}`)}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.BucketStats(bucket.ForID(fresh)); st.DocumentsCount < 1 || !s.used.has(bucket.ForID(fresh)) {
		t.Fatalf("fresh bucket stats %+v", st)
	}
	s.Close() // the committer, which fills the cache, is done
	if len(s.statsCache) > 16 || len(s.statsCache) == 0 {
		t.Fatalf("stats cache holds %d entries, max 16", len(s.statsCache))
	}
}

// TestBulkRoundsSeeItemsInTheLastLevel: a round large enough to look its
// items up through the bloom-filtered iterator (probeMinOps) finds items
// compacted into the last level, large and small, and misses only the new
// ones, in buckets that hold others.
func TestBulkRoundsSeeItemsInTheLastLevel(t *testing.T) {
	ctx := context.Background()
	s, err := Open(Options{Dir: t.TempDir(), NodeTag: "A"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	large := `{"f":"` + strings.Repeat("x", 2*bodyKeyMin) + `"}`
	var ops []Op
	for i := 0; i < 2*probeMinOps; i++ {
		body := `{"v":1}`
		if i%2 == 0 {
			body = large
		}
		ops = append(ops, put(fmt.Sprintf("items/%d$b/%d", i, i%4), body))
	}
	res, err := s.Write(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	if n := s.db.Metrics().Levels[len(s.db.Metrics().Levels)-1].TablesCount; n == 0 {
		t.Fatalf("nothing in the last level after a manual compaction")
	}
	// One round: every stored item with its If-Match, and as many new
	// documents in the same four buckets.
	var again []Op
	for i, op := range ops {
		again = append(again, Op{Kind: OpPut, ID: op.ID, Collection: "Users", Body: []byte(`{"v":2}`), IfMatch: res[i].ChangeVector})
		again = append(again, put(fmt.Sprintf("new/%d$b/%d", i, i%4), `{"v":1}`))
	}
	if _, err := s.Write(ctx, again); err != nil {
		t.Fatalf("round of %d ops: %v", len(again), err)
	}
	// A stale If-Match in a large round is refused: the lookup found the
	// newer version.
	stale := append([]Op{{Kind: OpPut, ID: ops[0].ID, Collection: "Users", Body: []byte(`{}`), IfMatch: res[0].ChangeVector}}, again[1:2*probeMinOps]...)
	var ce *ConcurrencyError
	if _, err := s.Write(ctx, stale); !errors.As(err, &ce) || ce.Actual == "" {
		t.Fatalf("stale If-Match in a large round: %v, want a ConcurrencyError naming the stored version", err)
	}
	if st := s.Stats(); st.DocumentsCount != int64(2*len(ops)) {
		t.Fatalf("store counts %d documents, want %d", st.DocumentsCount, 2*len(ops))
	}
	for k := 0; k < 4; k++ {
		st, err := s.BucketStats(bucket.ForID(fmt.Sprintf("x$b/%d", k)))
		if err != nil {
			t.Fatal(err)
		}
		if st.DocumentsCount != int64(len(ops)/2) {
			t.Fatalf("bucket b/%d: %d documents, want %d", k, st.DocumentsCount, len(ops)/2)
		}
	}
}

// TestChangesStopAtDurableEtag: an item Pebble already shows but whose
// commit has not returned from its sync is not in the changes feed.
func TestChangesStopAtDurableEtag(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	if _, err := s.Write(ctx, []Op{put("a", `{}`), put("b", `{}`)}); err != nil {
		t.Fatal(err)
	}
	// What a batch looks like between its apply and its sync: readable in
	// Pebble, beyond the store's durable etag.
	b := bucket.ForID("c")
	doc := &Document{ID: "c", Collection: "Users", ChangeVector: "A:3-" + s.DatabaseID(), Etag: 3, Bucket: b, Body: []byte(`{}`)}
	if err := s.db.Set(itemKey(b, "c"), doc.encode(), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(etagKey(3), itemKey(b, "c")[1:], nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.Changes(0, 10)
	if err != nil || len(got) != 2 || got[1].Etag != 2 {
		t.Fatalf("changes %v %v, want etags 1 and 2 only", got, err)
	}
	if got, err := s.Changes(2, 10); err != nil || len(got) != 0 {
		t.Fatalf("changes after the durable etag: %v %v", got, err)
	}
}

// TestFeedOrigin: a replicated item stored as it came carries its origin in
// the feed; a local write over it does not; untagged and corrupt entries
// parse as such.
func TestFeedOrigin(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	src := changevector.NewDatabaseID()
	cv := "B:1-" + src
	if _, err := s.Write(ctx, []Op{{Kind: OpReplicate, ID: "r", Body: []byte(`{}`), ChangeVector: cv, LastModified: time.Now(), Source: src}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, []Op{put("l", `{}`)}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Changes(0, 10)
	if err != nil || len(got) != 2 || got[0].ID != "r" || got[0].Origin != src || got[1].Origin != "" {
		t.Fatalf("changes %+v %v", got, err)
	}
	if _, err := s.Write(ctx, []Op{put("r", `{"v":2}`)}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Changes(2, 10)
	if len(got) != 1 || got[0].ID != "r" || got[0].Origin != "" {
		t.Fatalf("after a local write: %+v", got)
	}
	ref := itemKey(bucket.ForID("x"), "x")[1:]
	for _, c := range []struct {
		v      []byte
		origin string
		ok     bool
	}{
		{ref, "", true},
		{feedRef("abc", ref), "abc", true},
		{feedRef("", ref), "", true},
		{[]byte{feedTagged}, "", false},
		{[]byte{feedTagged, 9, 'a'}, "", false},
		{[]byte{7, 0, 0, 0}, "", false},
	} {
		origin, r, err := parseFeedRef(c.v)
		if (err == nil) != c.ok || origin != c.origin || (c.ok && string(r) != string(ref)) {
			t.Errorf("parseFeedRef(%q) = %q %q %v", c.v, origin, r, err)
		}
	}
}

// TestOpensStoreWrittenBeforeValueSeparation: a replica written by a
// version that kept every value inside its sstables opens, is upgraded in
// place, and serves and updates its old documents next to new ones.
func TestOpensStoreWrittenBeforeValueSeparation(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	big := `{"f":"` + strings.Repeat("x", 2000) + `"}`
	old := func(o *pebble.Options) {
		o.FormatMajorVersion = pebble.FormatTableFormatV6
		o.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy { return pebble.ValueSeparationPolicy{} }
	}
	s, err := Open(Options{Dir: dir, NodeTag: "A", tune: old})
	if err != nil {
		t.Fatal(err)
	}
	cvs := map[string]string{}
	for i := range 100 {
		id := fmt.Sprintf("old/%d", i)
		res, err := s.Write(ctx, []Op{put(id, big)})
		if err != nil {
			t.Fatal(err)
		}
		cvs[id] = res[0].ChangeVector
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := s.db.Metrics().BlobFiles.LiveCount; n != 0 {
		t.Fatalf("old store wrote %d blob files", n)
	}
	if v := s.db.FormatMajorVersion(); v != pebble.FormatTableFormatV6 {
		t.Fatalf("old store format %v", v)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	if v := s.db.FormatMajorVersion(); v != pebble.FormatValueSeparation {
		t.Fatalf("reopened store format %v, want %v", v, pebble.FormatValueSeparation)
	}
	for i := range 100 {
		id := fmt.Sprintf("new/%d", i)
		if _, err := s.Write(ctx, []Op{put(id, big)}); err != nil {
			t.Fatal(err)
		}
	}
	for id, cv := range cvs {
		if _, err := s.Write(ctx, []Op{{Kind: OpPut, ID: id, Collection: "Users", Body: []byte(big + " "), IfMatch: cv}}); err != nil {
			t.Fatalf("update %s written before the upgrade: %v", id, err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if m := s.db.Metrics(); m.BlobFiles.LiveCount == 0 || m.BlobFiles.ReferencedValueSize < 200*2000 {
		t.Fatalf("bodies written after the upgrade are not separated: %+v", m.BlobFiles)
	}
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"old", "new"} {
		for i := range 100 {
			d, err := s.Get(fmt.Sprintf("%s/%d", prefix, i))
			if err != nil || len(d.Body) < 2000 {
				t.Fatalf("%s/%d after compaction: %v", prefix, i, err)
			}
		}
	}
	if st := s.Stats(); st.DocumentsCount != 200 {
		t.Fatalf("store counts %d documents, want 200", st.DocumentsCount)
	}
}
