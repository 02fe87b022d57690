package storage

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
)

// fataler is what the checks need of a *testing.T or *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// recomputeStats is every bucket's statistics computed from its items, as
// round.store counts them, independently of the store's own recovery: the
// size of a split item is read from its doc key. The change vector merges
// the versions of the bucket's items.
func recomputeStats(t fataler, db *pebble.DB) map[uint32]BucketStats {
	t.Helper()
	cvs := map[uint32]changevector.Vector{}
	out := map[uint32]BucketStats{}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixItem}, UpperBound: []byte{prefixItem + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		b := binary.BigEndian.Uint32(k[1:])
		d, err := decodeItem(b, v)
		if err != nil {
			t.Fatal(err)
		}
		cv, err := changevector.Parse(d.ChangeVector)
		if err != nil {
			t.Fatal(err)
		}
		cvs[b] = changevector.Merge(cvs[b], cv.Version)
		st := out[b]
		st.Bucket = b
		if !d.artificial() {
			size := int64(len(k) + len(v))
			if v[0] == itemFormatSplit {
				dv, closer, err := db.Get(docKey(k))
				if err != nil {
					t.Fatalf("doc key of %q: %v", k, err)
				}
				_, body, err := docValueBody(dv)
				if err != nil {
					t.Fatal(err)
				}
				size += int64(len(k) + uvarintLen(d.Etag) + len(body))
				closer.Close()
			}
			st.Size += size
			if d.Deleted() {
				st.TombstonesCount++
			} else {
				st.DocumentsCount++
			}
		}
		out[b] = st
	}
	for b, cv := range cvs {
		st := out[b]
		st.ChangeVector = cv.String()
		out[b] = st
	}
	return out
}

// allStats is every bucket's statistics as RangeStats gives them, checked
// against BucketStats.
func allStats(t fataler, s *Store) map[uint32]BucketStats {
	t.Helper()
	out := map[uint32]BucketStats{}
	last := int64(-1)
	err := s.RangeStats(0, bucket.MaxID, func(st BucketStats) error {
		if int64(st.Bucket) <= last {
			return fmt.Errorf("bucket %d after %d", st.Bucket, last)
		}
		last = int64(st.Bucket)
		out[st.Bucket] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for b, st := range out {
		if one, err := s.BucketStats(b); err != nil || one != st {
			t.Fatalf("bucket %d: RangeStats %+v, BucketStats %+v %v", b, st, one, err)
		}
	}
	return out
}

// checkSpansStats draws spans in bucket order, with edges at, beside and
// between the buckets in all, and fails unless SpansStats gives exactly
// the statistics of all's buckets inside them, in bucket order.
func checkSpansStats(rt *rapid.T, s *Store, all map[uint32]BucketStats) {
	edges := []uint32{0, bucket.MaxID}
	for b := range all {
		edges = append(edges, b, max(b, 1)-1, min(b, bucket.MaxID-1)+1)
	}
	slices.Sort(edges)
	edges = slices.Compact(edges)
	var spans []bucket.Span
	for i := 0; i < len(edges); {
		from := edges[i]
		j := i + rapid.IntRange(0, 2).Draw(rt, "spanEdges")
		if j >= len(edges) {
			j = len(edges) - 1
		}
		if rapid.Bool().Draw(rt, "keepSpan") {
			spans = append(spans, bucket.Span{From: from, To: edges[j]})
		}
		i = j + 1
	}
	var got []BucketStats
	if err := s.SpansStats(spans, func(st BucketStats) error { got = append(got, st); return nil }); err != nil {
		rt.Fatal(err)
	}
	var want []BucketStats
	for _, b := range slices.Sorted(maps.Keys(all)) {
		for _, sp := range spans {
			if b >= sp.From && b <= sp.To {
				want = append(want, all[b])
			}
		}
	}
	if !slices.Equal(got, want) {
		rt.Fatalf("SpansStats(%v) = %+v, the buckets in them %+v", spans, got, want)
	}
}

// checkCounts fails unless every bucket's counts and size are those of its
// items and every bucket with items has statistics (and no other).
func checkCounts(t fataler, got, want map[uint32]BucketStats) {
	t.Helper()
	for b, w := range want {
		g, ok := got[b]
		if !ok {
			t.Fatalf("bucket %d holds items but has no statistics; recomputed %+v", b, w)
		}
		if g.DocumentsCount != w.DocumentsCount || g.TombstonesCount != w.TombstonesCount || g.Size != w.Size {
			t.Fatalf("bucket %d: statistics %+v, its items give %+v", b, g, w)
		}
	}
	for b, g := range got {
		if _, ok := want[b]; !ok {
			t.Fatalf("bucket %d has statistics %+v and no items", b, g)
		}
	}
}

// TestBucketStatsProperty applies random local, replicated, migrated and
// purge operations over a few buckets, with clean reopens and simulated
// crashes (the file system keeps only what was synced, and perhaps some of
// the rest) in between and checkpoints at random points, and checks after
// every step that each bucket's statistics are those of its items, with
// the merge of every version the store acknowledged as change vector.
func TestBucketStatsProperty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "replica")
	dbB, dbC, dbM := changevector.NewDatabaseID(), changevector.NewDatabaseID(), changevector.NewDatabaseID()
	rapid.Check(t, func(rt *rapid.T) {
		fs := vfs.NewCrashableMem()
		open := func() *Store {
			s, err := Open(Options{Dir: dir, NodeTag: "A", tune: func(o *pebble.Options) { o.FS = fs },
				checkpointBuckets: rapid.IntRange(1, 4).Draw(rt, "checkpointBuckets"),
				checkpointEvery:   rapid.SampledFrom([]time.Duration{time.Millisecond, time.Hour}).Draw(rt, "checkpointEvery"),
				checkpointPause:   rapid.SampledFrom([]time.Duration{0, 2 * time.Millisecond}).Draw(rt, "checkpointPause"),
				tailEntries:       rapid.IntRange(1, 6).Draw(rt, "tailEntries"),
				tailBytes:         rapid.SampledFrom([]int{300, 1500, 0}).Draw(rt, "tailBytes")})
			if err != nil {
				rt.Fatal(err)
			}
			s.tail.lastRead.Store(time.Now().UnixNano())
			s.statsCacheMax = rapid.IntRange(1, 4).Draw(rt, "statsCacheMax")
			return s
		}
		s := open()
		defer func() { s.Close() }()
		ctx := context.Background()
		want := map[uint32]changevector.Vector{} // merged versions acknowledged, by bucket
		ids := rapid.SampledFrom([]string{"a$x", "b$x", "c$x", "a$y", "b$y", "a$z"})
		body := func() []byte {
			if rapid.Bool().Draw(rt, "large") {
				return []byte(`{"pad":"` + strings.Repeat("p", bodyKeyMin) + `"}`)
			}
			return []byte(`{"v":1}`)
		}
		// version draws a version vector over three replicas, this one
		// among them; now and then an entry has another tag.
		version := func() changevector.Vector {
			var v changevector.Vector
			for i, db := range []string{s.DatabaseID(), dbB, dbC} {
				if rapid.Bool().Draw(rt, "entry") {
					tag := []string{"A", "B", "C"}[i]
					if rapid.IntRange(0, 9).Draw(rt, "retag") == 0 {
						tag = "D"
					}
					v = changevector.Merge(v, changevector.Vector(nil).With(tag, rapid.Uint64Range(1, 12).Draw(rt, "etag"), db))
				}
			}
			if v == nil {
				v = changevector.Vector(nil).With("B", 1, dbB)
			}
			return v
		}
		current := func(id string) changevector.Vector {
			d, err := s.GetItem(id)
			if err != nil {
				return nil
			}
			cv, err := changevector.Parse(d.ChangeVector)
			if err != nil {
				rt.Fatal(err)
			}
			return cv.Version
		}
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			var op Op
			switch kind := rapid.IntRange(0, 7).Draw(rt, "kind"); kind {
			case 0, 1:
				op = Op{Kind: OpPut, ID: ids.Draw(rt, "id"), Collection: "Users", Body: body()}
			case 2:
				op = Op{Kind: OpDelete, ID: ids.Draw(rt, "id")}
			case 3:
				op = Op{Kind: OpReplicate, ID: ids.Draw(rt, "id"), Collection: "Users", Body: body(), ChangeVector: version().String(),
					LastModified: time.Unix(rapid.Int64Range(1, 3).Draw(rt, "time"), 0), Source: dbB}
				if rapid.Bool().Draw(rt, "tombstone") {
					op.Flags, op.Body = FlagDeleted, nil
				}
			case 4:
				cv := version()
				text := cv.String()
				if rapid.Bool().Draw(rt, "composite") {
					text = changevector.Composite(changevector.Vector(nil).With(changevector.MoveTag, 1, dbM).With("B", 3, dbB), cv).String()
				}
				op = Op{Kind: OpMigrate, ID: ids.Draw(rt, "id"), Collection: "Users", Body: body(), ChangeVector: text,
					LastModified: time.Unix(rapid.Int64Range(1, 3).Draw(rt, "time"), 0), MigrationIndex: rapid.Uint64Range(1, 3).Draw(rt, "index"), DatabaseID: dbM}
			case 5:
				id := ids.Draw(rt, "id")
				covered := version()
				if rapid.Bool().Draw(rt, "covers") {
					covered = changevector.Merge(covered, current(id))
				}
				op = Op{Kind: OpPurge, ID: id, CoveredBy: covered}
			case 6: // clean reopen
				if err := s.Close(); err != nil {
					rt.Fatal(err)
				}
				s = open()
			case 7: // crash: only what was synced, and perhaps some of the rest, survives
				crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rapid.IntRange(0, 100).Draw(rt, "unsynced"), RNG: rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 0))})
				s.noFinalCheckpoint.Store(true)
				s.Close()
				fs = crashed
				s = open()
			}
			if op.Kind != 0 {
				res, err := s.Write(ctx, []Op{op})
				if err != nil {
					rt.Fatalf("%+v: %v", op, err)
				}
				r := res[0]
				if r.Etag == 0 || r.Skipped {
					continue
				}
				var v changevector.Vector
				if r.ChangeVector != "" { // a purge keeps the version, already merged
					cv, err := changevector.Parse(r.ChangeVector)
					if err != nil {
						rt.Fatal(err)
					}
					v = cv.Version
				}
				want[r.Bucket] = changevector.Merge(want[r.Bucket], v)
			}
			got := allStats(rt, s)
			checkCounts(rt, got, recomputeStats(rt, s.db))
			checkSpansStats(rt, s, got)
			checkTail(rt, s)
			if rapid.IntRange(0, 5).Draw(rt, "tailIdle") == 0 {
				s.tail.lastRead.Store(0) // nothing reads the feed: the next round drops the tail
			} else {
				s.tail.lastRead.Store(time.Now().UnixNano())
			}
			for b, v := range want {
				if got[b].ChangeVector != v.String() {
					rt.Fatalf("bucket %d: change vector %q, acknowledged versions merge to %q", b, got[b].ChangeVector, v.String())
				}
			}
		}
	})
}

// TestBucketStatsSurviveSIGKILL runs writers in a child process that
// checkpoints bucket statistics often, kills it with SIGKILL in the middle
// of the load, and checks after reopening that every bucket's statistics
// are those of its items; three times over the same replica, so a
// recovery is itself followed by a crash.
func TestBucketStatsSurviveSIGKILL(t *testing.T) {
	if dir := os.Getenv("SHARDNODE_STATS_CHILD"); dir != "" {
		statsChildWriter(dir)
		return
	}
	dir := filepath.Join(t.TempDir(), "replica")
	clean := 0 // runs that left nothing to recover
	for run, kill := range []int{300, 2000, 900} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBucketStatsSurviveSIGKILL$")
		cmd.Env = append(os.Environ(), "SHARDNODE_STATS_CHILD="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		acks := 0
		deadline := time.Now().Add(30 * time.Second)
		for acks < kill && time.Now().Before(deadline) && sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ack ") {
				acks++
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if acks < kill {
			t.Fatalf("run %d: child acknowledged only %d writes", run, acks)
		}
		through := checkpointEtag(t, dir)
		s, err := Open(Options{Dir: dir, NodeTag: "A"})
		if err != nil {
			t.Fatal(err)
		}
		if through >= s.LastEtag() {
			clean++
		}
		got, want := allStats(t, s), recomputeStats(t, s.db)
		checkCounts(t, got, want)
		var docs int64
		for b, w := range want {
			// Only local writes: every version supersedes the one it
			// replaced, so the items' versions merge to the bucket's.
			if got[b].ChangeVector != w.ChangeVector {
				t.Fatalf("run %d, bucket %d: change vector %q, its items give %q", run, b, got[b].ChangeVector, w.ChangeVector)
			}
			docs += w.DocumentsCount
		}
		if st := s.Stats(); st.DocumentsCount != docs {
			t.Fatalf("run %d: store counts %d documents, its buckets %d", run, st.DocumentsCount, docs)
		}
		t.Logf("run %d: %d buckets agree with their items after SIGKILL at %d acknowledged writes (etag %d, checkpoint at %d)", run, len(want), acks, s.LastEtag(), through)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if clean == 3 {
		t.Fatal("every kill left the statistics checkpointed through the last etag: nothing was recovered")
	}
}

// checkpointEtag is the etag the statistics checkpoint of the replica in
// dir names.
func checkpointEtag(t *testing.T, dir string) uint64 {
	t.Helper()
	db, err := pebble.Open(dir, PebbleOptions(nil, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get(metaStatsCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return binary.BigEndian.Uint64(v)
}

// statsChildWriter puts and deletes documents, small and split, over a few
// hundred buckets until it is killed, checkpointing bucket statistics every
// 50 buckets or 5 ms.
func statsChildWriter(dir string) {
	s, err := Open(Options{Dir: dir, NodeTag: "A", checkpointBuckets: 50, checkpointEvery: 5 * time.Millisecond})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for {
				ops := make([]Op, 1+r.IntN(20))
				for i := range ops {
					id := fmt.Sprintf("d%d$b%d", r.IntN(20), r.IntN(300))
					switch r.IntN(4) {
					case 0:
						ops[i] = Op{Kind: OpDelete, ID: id}
					case 1:
						ops[i] = put(id, `{"pad":"`+strings.Repeat("p", bodyKeyMin+r.IntN(100))+`"}`)
					default:
						ops[i] = put(id, fmt.Sprintf(`{"v":%d}`, r.IntN(1000)))
					}
				}
				if _, err := s.Write(context.Background(), ops); err != nil {
					return
				}
				mu.Lock()
				fmt.Println("ack", len(ops))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestOpensStoreWithoutStatsCheckpoint: a replica written before
// checkpoints (no checkpoint key) wrote its statistics keys with every
// round, so they are complete through its last etag; the open keeps them
// as they are (a recount would not notice the tampered one below) and
// writes a checkpoint at that etag.
func TestOpensStoreWithoutStatsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, NodeTag: "A"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Write(ctx, []Op{put("a$k", `{}`), put("b$k", `{}`), put("c$j", `{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, PebbleOptions(nil, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	k := bucket.ForID("k")
	tampered := BucketStats{Bucket: k, DocumentsCount: 7, Size: 1}
	if err := db.Delete(metaStatsCheckpoint, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Set(bucketStatKey(k), tampered.encode(), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	if st, err := s.BucketStats(k); err != nil || st != tampered {
		t.Fatalf("bucket stats %+v %v, want them kept as %+v", st, err, tampered)
	}
	if st, err := s.BucketStats(bucket.ForID("j")); err != nil || st.DocumentsCount != 1 {
		t.Fatalf("bucket stats %+v %v", st, err)
	}
	v, closer, err := s.db.Get(metaStatsCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if got := binary.BigEndian.Uint64(v); got != 3 || s.LastEtag() != 3 {
		t.Fatalf("checkpoint at %d, last etag %d", got, s.LastEtag())
	}
	if _, err := s.Write(ctx, []Op{put("d$k", `{}`)}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.BucketStats(k); st.DocumentsCount != 8 {
		t.Fatalf("after a write: %+v", st)
	}
}

// checkTail checks that the feed's tail in memory answers every read it
// can answer exactly as Pebble does: the same items, in the same order,
// with the same metadata, bodies and origins, whether bodies of moved
// items are left or not, at several batch sizes.
func checkTail(rt *rapid.T, s *Store) {
	was := s.tail.lastRead.Load()
	defer s.tail.lastRead.Store(was)
	s.mu.RLock()
	floor, last := s.tail.floor, s.lastEtag
	s.mu.RUnlock()
	if floor > last {
		rt.Fatalf("tail floor %d above the last etag %d", floor, last)
	}
	moved := func(d *Document) bool { return d.Flags&FlagFromResharding != 0 }
	if _, ok := s.fromTail(floor-min(floor, 1), 10, nil); ok && floor > 0 {
		rt.Fatalf("the tail answered a read after %d, below its floor %d", floor-1, floor)
	}
	for after := floor; after <= last; after++ {
		for _, limit := range []int{1, 3, 1024} {
			for _, leave := range []func(*Document) bool{nil, moved} {
				fromTail, ok := s.fromTail(after, limit, leave)
				if !ok {
					rt.Fatalf("the tail did not answer a read after %d (floor %d)", after, floor)
				}
				stored, err := s.changesStored(after, limit, leave)
				if err != nil {
					rt.Fatal(err)
				}
				if len(fromTail) != len(stored) {
					rt.Fatalf("after %d, limit %d: the tail has %d items, Pebble %d: %v / %v", after, limit, len(fromTail), len(stored), fromTail, stored)
				}
				for i := range stored {
					a, b := fromTail[i], stored[i]
					if a.ID != b.ID || a.Collection != b.Collection || a.ChangeVector != b.ChangeVector || a.LastModified.UnixNano() != b.LastModified.UnixNano() ||
						a.LastModified.Location() != b.LastModified.Location() || a.Etag != b.Etag || a.Bucket != b.Bucket || a.Flags != b.Flags ||
						!bytes.Equal(a.Body, b.Body) || (a.Body == nil) != (b.Body == nil) || a.Origin != b.Origin || a.BodyUnread() != b.BodyUnread() || (b.BodyUnread() && a.bodyLen != b.bodyLen) {
						rt.Fatalf("after %d, item %d: the tail has %+v, Pebble %+v", after, i, a, b)
					}
				}
			}
		}
	}
}
