package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/changevector"
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
	a, b := openTest(t, t.TempDir()), openPeer(t)
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

// TestShippingWhileWritingConverges: a replica that ships the changes feed
// while writers keep overwriting documents (some crossing the size at which
// bodies go under a doc key) ends with every document as the source has it.
// A feed read pairs each entry with the item as of the same state: read
// later, an item rewritten meanwhile would carry a newer etag, and a batch
// ending on it would move the receiver's progress past entries it never
// sent.
func TestShippingWhileWritingConverges(t *testing.T) {
	a, b := openTest(t, t.TempDir()), openTest(t, t.TempDir())
	ctx := context.Background()
	ids := make([]string, 6)
	for i := range ids {
		ids[i] = fmt.Sprintf("r/%d", i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(halt) // before the stores close, also when the test fails
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for v := 0; ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				id := ids[r.IntN(len(ids))]
				body := fmt.Sprintf(`{"v":%d,"p":"%s"}`, v, strings.Repeat("p", r.IntN(600)))
				if _, err := a.Write(ctx, []Op{put(id, body)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		shipSome(t, a, b, 3) // small batches: many batch ends
	}
	halt()
	for a.LastEtag() > b.ReplicationProgress(a.DatabaseID()) {
		shipSome(t, a, b, 3)
	}
	for _, id := range ids {
		da, errA := a.Get(id)
		db, errB := b.Get(id)
		if (errA == nil) != (errB == nil) || (errA == nil && (string(da.Body) != string(db.Body) || da.ChangeVector != db.ChangeVector)) {
			t.Fatalf("%s: source %v %.40q, replica %v %.40q", id, errA, bodyOf(da), errB, bodyOf(db))
		}
	}
}

// shipSome ships at most n changes of from to to, as a replicator does:
// its progress becomes the etag of the last item shipped. The items must
// come in feed order, each as of its feed entry.
func shipSome(t *testing.T, from, to *Store, n int) {
	t.Helper()
	items, err := from.Changes(to.ReplicationProgress(from.DatabaseID()), n)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) == 0 {
		return
	}
	for i := 1; i < len(items); i++ {
		if items[i].Etag <= items[i-1].Etag {
			t.Fatalf("changes out of feed order: %s at etag %d after %s at %d", items[i].ID, items[i].Etag, items[i-1].ID, items[i-1].Etag)
		}
	}
	var ops []Op
	for _, d := range items {
		ops = append(ops, Op{Kind: OpReplicate, ID: d.ID, Collection: d.Collection, Body: d.Body, ChangeVector: d.ChangeVector, LastModified: d.LastModified, Flags: d.Flags})
	}
	ops = append(ops, Op{Kind: OpSetProgress, Source: from.DatabaseID(), Etag: items[len(items)-1].Etag})
	if _, err := to.Write(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
}

func bodyOf(d *Document) []byte {
	if d == nil {
		return nil
	}
	return d.Body
}

// Replication progress is what the last commit recorded, per source, and
// the same after a reopen.
func TestReplicationProgressSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	for i, src := range []string{"srcA", "srcB", "srcA"} {
		if _, err := s.Write(ctx, []Op{{Kind: OpSetProgress, Source: src, Etag: uint64(10 * (i + 1))}}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]uint64{"srcA": 30, "srcB": 20}
	check := func(s *Store, when string) {
		t.Helper()
		got, err := s.ReplicationProgresses()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || got["srcA"] != 30 || got["srcB"] != 20 || s.ReplicationProgress("srcA") != 30 || s.ReplicationProgress("none") != 0 {
			t.Fatalf("%s: progress %v, want %v", when, got, want)
		}
		got["srcA"] = 1 // the caller's copy
		if s.ReplicationProgress("srcA") != 30 {
			t.Fatalf("%s: the answer shares the store's map", when)
		}
	}
	check(s, "open")
	// A lower etag never moves progress back.
	if _, err := s.Write(ctx, []Op{{Kind: OpSetProgress, Source: "srcA", Etag: 5}}); err != nil {
		t.Fatal(err)
	}
	check(s, "after a lower etag")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Dir: dir, NodeTag: "A"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "reopened")
}

// TestHoldsMatchesWhatReplicationWouldSkip: Holds is true exactly where an
// OpReplicate of the same version would be skipped: the version held or an
// older one; not for a newer or concurrent one, a missing item, or a
// purge's artificial tombstone. ChangesLeavingBodies leaves the bodies of
// large items it is asked to and reads the rest whole.
func TestHoldsMatchesWhatReplicationWouldSkip(t *testing.T) {
	ctx := context.Background()
	a, b := openTest(t, t.TempDir()), openPeer(t)
	big := `{"pad":"` + strings.Repeat("x", bodyKeyMin) + `"}`
	r1, err := a.Write(ctx, []Op{put("h/1", big), put("h/2", `{"v":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	ship(t, a, b)
	r2, err := a.Write(ctx, []Op{put("h/1", big+" ")})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Write(ctx, []Op{put("h/2", `{"v":"b"}`)}) // concurrent with a's h/2 once a writes it again
	if err != nil {
		t.Fatal(err)
	}
	r3, err := a.Write(ctx, []Op{put("h/2", `{"v":"a"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id, cv string
		want   bool
	}{
		{"h/1", r1[0].ChangeVector, true},  // held
		{"h/1", r2[0].ChangeVector, false}, // newer
		{"h/2", r1[1].ChangeVector, true},  // older than b's own write
		{"h/2", rb[0].ChangeVector, true},  // b's own
		{"h/2", r3[0].ChangeVector, false}, // concurrent
		{"h/3", r1[0].ChangeVector, false}, // missing
	} {
		if got, err := b.Holds(c.id, c.cv); err != nil || got != c.want {
			t.Errorf("Holds(%s, %s) = %v, %v; want %v", c.id, c.cv, got, err, c.want)
		}
	}
	if _, err := b.Holds("h/1", "not a change vector"); err == nil {
		t.Error("Holds accepted a malformed change vector")
	}
	// The same decisions as replication's: what Holds denies applies.
	for _, r := range ship(t, a, b) {
		if r.Kind == OpReplicate && r.Skipped {
			t.Errorf("%s skipped, though Holds said it was not held", r.ID)
		}
	}
	// A purge's artificial tombstone holds nothing.
	d, err := b.GetItem("h/1")
	if err != nil {
		t.Fatal(err)
	}
	all, err := changevector.Parse(d.ChangeVector)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, []Op{{Kind: OpPurge, ID: "h/1", CoveredBy: all.Version}}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Holds("h/1", d.ChangeVector); err != nil || got {
		t.Errorf("Holds over an artificial tombstone = %v, %v; want false", got, err)
	}
	// Leaving bodies: h/1's (large) is left, h/2's (small, inline) is not.
	items, err := a.ChangesLeavingBodies(0, 100, func(*Document) bool { return true })
	if err != nil || len(items) != 2 {
		t.Fatalf("changes: %d items, %v", len(items), err)
	}
	for _, it := range items {
		large := it.ID == "h/1"
		if it.BodyUnread() != large || (it.Body == nil) != large {
			t.Errorf("%s: body unread %v, body %q", it.ID, it.BodyUnread(), it.Body)
		}
	}
	items, err = a.ChangesLeavingBodies(0, 100, func(*Document) bool { return false })
	if err != nil || len(items) != 2 || items[0].BodyUnread() || items[1].BodyUnread() || string(items[0].Body) != big+" " && string(items[1].Body) != big+" " {
		t.Fatalf("changes reading every body: %+v, %v", items, err)
	}
}

// TestHiloConflictKeepsTheGreaterMax: two replicas that each raised a HiLo
// document (each may have handed out numbers up to its own Max) converge
// to the greater Max, even when it was written first; other documents of
// the same shape still converge to the later write.
func TestHiloConflictKeepsTheGreaterMax(t *testing.T) {
	ctx := context.Background()
	a, b := openTest(t, t.TempDir()), openPeer(t)
	hilo := func(id, body string) Op {
		return Op{Kind: OpPut, ID: id, Collection: HiloCollection, Body: []byte(body)}
	}
	if _, err := a.Write(ctx, []Op{hilo("Raven/Hilo/users", `{"Max":160}`), put("plain", `{"Max":160}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, []Op{hilo("Raven/Hilo/users", `{"Max":64}`), put("plain", `{"Max":64}`)}); err != nil {
		t.Fatal(err)
	}
	ship(t, a, b)
	ship(t, b, a)
	for _, s := range []*Store{a, b} {
		if d, err := s.Get("Raven/Hilo/users"); err != nil || string(d.Body) != `{"Max":160}` {
			t.Fatalf("HiLo document after the conflict: %s %v, want Max 160", d.Body, err)
		}
		if d, err := s.Get("plain"); err != nil || string(d.Body) != `{"Max":64}` {
			t.Fatalf("a plain document after the conflict: %s %v, want the later write", d.Body, err)
		}
	}
	// A HiLo document whose Max does not parse falls back to the later write.
	if _, err := a.Write(ctx, []Op{hilo("Raven/Hilo/odd", `{"Max":1000}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, []Op{hilo("Raven/Hilo/odd", `{"Max":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	ship(t, a, b)
	ship(t, b, a)
	for _, s := range []*Store{a, b} {
		if d, err := s.Get("Raven/Hilo/odd"); err != nil || string(d.Body) != `{"Max":"x"}` {
			t.Fatalf("odd HiLo document: %s %v", d.Body, err)
		}
	}
}
