package replication

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/shardnode/shardnode/storage"
)

// movedOps are the ops of a bucket migration bringing n documents of
// 1 KiB (bodies kept apart under their doc keys) written on a source
// replica: what the sender sends every replica of the destination.
func movedOps(t *testing.T, n int, prefix string) []storage.Op {
	t.Helper()
	src := open(t, "S")
	body := []byte(`{"pad":"` + strings.Repeat("p", 1024) + `"}`)
	var ops []storage.Op
	for i := 0; i < n; i++ {
		res, err := src.Write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: fmt.Sprintf("%s%d$t", prefix, i), Collection: "Moved", Body: body}})
		if err != nil {
			t.Fatal(err)
		}
		d, err := src.Get(res[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, storage.Op{Kind: storage.OpMigrate, ID: d.ID, Collection: d.Collection, Body: d.Body, ChangeVector: d.ChangeVector,
			LastModified: d.LastModified, Flags: d.Flags, MigrationIndex: 7, DatabaseID: "DBIDDBIDDBIDDBIDDBIDDB"})
	}
	return ops
}

// pair opens replicas A and B and a transport between them; v3 says
// whether B takes stubs.
func pair(t *testing.T, v3 bool) (a, b *storage.Store, tr *memTransport) {
	a, b = open(t, "A"), open(t, "B")
	return a, b, &memTransport{stores: map[string]*storage.Store{"A": a, "B": b}, down: map[string]bool{}, v3: v3}
}

// acked is what the single peer of r acknowledged; its link's counts
// are updated before it.
func acked(r *Replicator) uint64 {
	st := r.Status()
	if len(st) != 1 {
		return 0
	}
	return st[0].AckedEtag
}

func writeOps(t *testing.T, s *storage.Store, ops []storage.Op) {
	t.Helper()
	if _, err := s.Write(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
}

// sentItems counts, by id prefix, the items the transport carried as stubs
// and whole.
func sentItems(tr *memTransport, prefix string) (stubs, whole int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, b := range tr.sent {
		for _, it := range b.Items {
			switch {
			case !strings.HasPrefix(it.ID, prefix):
			case it.Stub:
				stubs++
				if it.Body != nil {
					panic("stub with a body")
				}
			default:
				whole++
			}
		}
	}
	return stubs, whole
}

// TestMovedItemsGoAsStubs: items a migration brought to both replicas of
// the destination go from one to the other by their versions only, and
// change nothing there; a client write among them goes whole. A peer of
// an earlier version (batch format 2) gets every item whole.
func TestMovedItemsGoAsStubs(t *testing.T) {
	for _, v3 := range []bool{true, false} {
		t.Run(fmt.Sprintf("v3=%v", v3), func(t *testing.T) {
			a, b, tr := pair(t, v3)
			ops := movedOps(t, 20, "m")
			writeOps(t, a, ops)
			writeOps(t, b, ops)
			writeOps(t, a, []storage.Op{{Kind: storage.OpPut, ID: "c1", Body: []byte(`{"v":1}`)}})
			bEtag := b.LastEtag()
			r := New(a, "db", 0, tr, nil)
			defer r.Close()
			r.SetPeers([]string{"B"})
			waitFor(t, "B to hold A's feed", func() bool { return acked(r) == a.LastEtag() })
			stubs, whole := sentItems(tr, "m")
			if v3 && (stubs != 20 || whole != 0) {
				t.Fatalf("moved items sent as %d stubs and %d whole, want 20 stubs", stubs, whole)
			}
			if !v3 && (stubs != 0 || whole != 20) {
				t.Fatalf("to an older peer, moved items sent as %d stubs and %d whole, want all whole", stubs, whole)
			}
			if _, whole := sentItems(tr, "c1"); whole != 1 {
				t.Fatalf("client write sent whole %d times", whole)
			}
			st := r.Status()
			if wantStubs := map[bool]uint64{true: 20, false: 0}[v3]; len(st) != 1 || st[0].ItemsSent != 21 || st[0].StubsSent != wantStubs || st[0].StubsMissing != 0 {
				t.Fatalf("link status %+v, want 21 items sent, %d as stubs", st, wantStubs)
			}
			// B stored only the client write: the stubs' items were held.
			if got := b.LastEtag(); got != bEtag+1 {
				t.Fatalf("B's etag %d, want %d: the moved items were stored again", got, bEtag+1)
			}
			if d, err := b.Get("c1"); err != nil || string(d.Body) != `{"v":1}` {
				t.Fatalf("c1 on B: %v %v", d, err)
			}
		})
	}
}

// TestStubsThePeerLacksAreSentWhole: a peer that was not sent the
// migration (down during it, or recreated) answers Missing once it has
// waited StubWait, and gets the items whole; once the sender has caught up,
// the next migration's items go as stubs again.
func TestStubsThePeerLacksAreSentWhole(t *testing.T) {
	a, b, tr := pair(t, true)
	ops := movedOps(t, 20, "m")
	writeOps(t, a, ops)
	r := New(a, "db", 0, tr, nil)
	defer r.Close()
	r.SetPeers([]string{"B"})
	waitFor(t, "B to hold A's feed", func() bool { return acked(r) == a.LastEtag() })
	for _, op := range ops {
		want, _ := a.Get(op.ID)
		got, err := b.Get(op.ID)
		if err != nil || string(got.Body) != string(want.Body) || got.ChangeVector != want.ChangeVector {
			t.Fatalf("%s on B: %v %v, want %+v", op.ID, got, err, want)
		}
	}
	if stubs, whole := sentItems(tr, "m"); stubs != 20 || whole != 20 {
		t.Fatalf("moved items sent as %d stubs and %d whole, want 20 of each (stubs, Missing, whole)", stubs, whole)
	}
	if st := r.Status(); len(st) != 1 || st[0].ItemsSent != 20 || st[0].StubsSent != 0 || st[0].StubsMissing != 1 {
		t.Fatalf("link status %+v, want 20 items sent whole after one Missing", st)
	}
	// Caught up: a migration both hold goes as stubs again.
	next := movedOps(t, 5, "n")
	writeOps(t, b, next)
	writeOps(t, a, next)
	waitFor(t, "B to hold A's feed", func() bool { return b.ReplicationProgress(a.DatabaseID()) == a.LastEtag() })
	if stubs, whole := sentItems(tr, "n"); stubs != 5 || whole != 0 {
		t.Fatalf("the next migration's items sent as %d stubs and %d whole, want 5 stubs", stubs, whole)
	}
}

// TestStubsWaitForThePeersOwnCopy: stubs that reach a peer before the
// migration's own batch does wait for it there, and nothing is sent
// whole.
func TestStubsWaitForThePeersOwnCopy(t *testing.T) {
	a, b, tr := pair(t, true)
	ops := movedOps(t, 20, "m")
	writeOps(t, a, ops)
	var once sync.Once
	done := make(chan error, 1)
	tr.beforeApply = func(_ string, batch *Batch) {
		once.Do(func() {
			if len(batch.Items) == 0 || !batch.Items[0].Stub {
				done <- fmt.Errorf("first batch %+v has no stub", batch.Items)
				return
			}
			go func() { // the migration's batch reaches B while the stubs wait
				_, err := b.Write(context.Background(), ops)
				done <- err
			}()
		})
	}
	r := New(a, "db", 0, tr, nil)
	defer r.Close()
	r.SetPeers([]string{"B"})
	waitFor(t, "B to hold A's feed", func() bool { return b.ReplicationProgress(a.DatabaseID()) == a.LastEtag() })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if stubs, whole := sentItems(tr, "m"); stubs != 20 || whole != 0 {
		t.Fatalf("moved items sent as %d stubs and %d whole, want 20 stubs", stubs, whole)
	}
}
