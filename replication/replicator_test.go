package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/storage"
)

// memTransport delivers batches straight to the peers' stores, and can cut
// a peer off.
type memTransport struct {
	mu     sync.Mutex
	stores map[string]*storage.Store
	down   map[string]bool
	old    bool // peers answer as nodes that know only batch format 1
	v3     bool // peers take batch format 3 (stubs)
	sent   []*Batch
	// beforeApply, when set, runs before a peer applies a batch.
	beforeApply func(peer string, b *Batch)
	// reps, when set, apply batches to their replicas (Replicator.Apply)
	reps map[string]*Replicator
}

func (m *memTransport) format() int {
	switch {
	case m.old:
		return 0
	case m.v3:
		return FormatBinaryV3
	}
	return FormatBinaryV2
}

func (m *memTransport) peer(tag string) (*storage.Store, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down[tag] {
		return nil, fmt.Errorf("node %s unreachable", tag)
	}
	return m.stores[tag], nil
}

func (m *memTransport) Progress(_ context.Context, peer string, req *ProgressRequest) (*ProgressReply, error) {
	s, err := m.peer(peer)
	if err != nil {
		return nil, err
	}
	return &ProgressReply{Etag: s.ReplicationProgress(req.Source), DatabaseID: s.DatabaseID(), BatchFormat: m.format()}, nil
}

func (m *memTransport) Send(ctx context.Context, peer string, b *Batch) (*ProgressReply, error) {
	s, err := m.peer(peer)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.sent = append(m.sent, b)
	m.mu.Unlock()
	m.mu.Lock()
	rep, before := m.reps[peer], m.beforeApply
	m.mu.Unlock()
	if before != nil {
		before(peer, b)
	}
	if rep != nil {
		r, err := rep.Apply(ctx, b)
		return &r, err
	}
	r, err := Apply(ctx, s, b)
	return &r, err
}

func open(t *testing.T, tag string) *storage.Store {
	s, err := storage.Open(storage.Options{Dir: t.TempDir(), NodeTag: tag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReplicatorConvergesAndResumes: three replicas push to each other;
// they converge; a peer cut off catches up when it returns, from its
// durable progress; WaitReplicas counts replicas holding a write.
func TestReplicatorConvergesAndResumes(t *testing.T) {
	ctx := context.Background()
	tr := &memTransport{stores: map[string]*storage.Store{}, down: map[string]bool{}}
	tags := []string{"A", "B", "C"}
	reps := map[string]*Replicator{}
	for _, tag := range tags {
		tr.stores[tag] = open(t, tag)
	}
	for _, tag := range tags {
		r := New(tr.stores[tag], "db", 0, tr, nil)
		var peers []string
		for _, o := range tags {
			if o != tag {
				peers = append(peers, o)
			}
		}
		r.SetPeers(peers)
		reps[tag] = r
		t.Cleanup(r.Close)
	}
	res, err := tr.stores["A"].Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "x", Body: []byte(`{"v":1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := reps["A"].WaitReplicas(wctx, written(t, res), 3); err != nil || n != 3 {
		t.Fatalf("WaitReplicas: %d %v", n, err)
	}
	// Cut C off; write on A and B; C holds nothing new.
	tr.mu.Lock()
	tr.down["C"] = true
	tr.mu.Unlock()
	for i := 0; i < 50; i++ {
		src := tr.stores[tags[i%2]]
		if _, err := src.Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: fmt.Sprintf("k%d", i), Body: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	last := tr.stores["A"].LastEtag()
	if n, err := reps["A"].WaitReplicas(short, []Written{{Etag: last}}, 3); err == nil || n != 2 {
		t.Fatalf("WaitReplicas with C down: %d %v", n, err)
	}
	// C returns: it catches up from its durable progress.
	tr.mu.Lock()
	tr.down["C"] = false
	tr.mu.Unlock()
	waitFor(t, "C to catch up", func() bool { return tr.stores["C"].Stats().DocumentsCount == 51 })
	for _, tag := range tags {
		waitFor(t, tag+" to converge", func() bool { return tr.stores[tag].Stats().DocumentsCount == 51 })
	}
	a, _ := tr.stores["A"].Get("k7")
	c, _ := tr.stores["C"].Get("k7")
	if a == nil || c == nil || a.ChangeVector != c.ChangeVector {
		t.Fatalf("k7 differs: %+v vs %+v", a, c)
	}
	// Progress is durable at the receiver: C comes to know how far it holds
	// A's feed (C may have converged through B first; A's link catches up
	// after its retry back-off).
	waitFor(t, "C's progress from A to reach A's feed", func() bool {
		return tr.stores["C"].ReplicationProgress(tr.stores["A"].DatabaseID()) >= tr.stores["A"].LastEtag()-1
	})
}

// TestPausedReplicatorSendsNothing: a paused link holds back; resuming
// delivers.
func TestPausedReplicatorSendsNothing(t *testing.T) {
	ctx := context.Background()
	tr := &memTransport{stores: map[string]*storage.Store{"A": open(t, "A"), "B": open(t, "B")}, down: map[string]bool{}}
	r := New(tr.stores["A"], "db", 0, tr, nil)
	defer r.Close()
	r.SetPaused(true)
	r.SetPeers([]string{"B"})
	if _, err := tr.stores["A"].Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "x", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // nothing may arrive while paused
	if n := tr.stores["B"].Stats().DocumentsCount; n != 0 {
		t.Fatalf("paused link delivered %d documents", n)
	}
	r.SetPaused(false)
	waitFor(t, "delivery after resume", func() bool { return tr.stores["B"].Stats().DocumentsCount == 1 })
	if st := r.Status(); len(st) != 1 || st[0].Peer != "B" || st[0].AckedEtag == 0 {
		t.Fatalf("status %+v", st)
	}
}

// smallTransport is a memTransport whose messages hold at most limit bytes;
// it records the largest batch it was sent.
type smallTransport struct {
	*memTransport
	limit   int
	mu      sync.Mutex
	largest int
	items   int
}

func (s *smallTransport) MaxBatchBytes() int { return s.limit }

func (s *smallTransport) Send(ctx context.Context, peer string, b *Batch) (*ProgressReply, error) {
	n := 0
	for _, it := range b.Items {
		n += len(it.Body)
	}
	s.mu.Lock()
	if len(b.Items) > 1 && n > s.largest {
		s.largest = n
	}
	s.items += len(b.Items)
	s.mu.Unlock()
	return s.memTransport.Send(ctx, peer, b)
}

// TestBatchesFitTheTransport: with a transport that carries less than the
// default batch, every batch of several items fits it, and an item larger
// than the limit still goes, alone.
func TestBatchesFitTheTransport(t *testing.T) {
	a, b := open(t, "A"), open(t, "B")
	tr := &smallTransport{memTransport: &memTransport{stores: map[string]*storage.Store{"A": a, "B": b}, down: map[string]bool{}}, limit: 25 << 10}
	ctx := context.Background()
	body := func(n int) []byte { return []byte(`{"x":"` + strings.Repeat("y", n) + `"}`) }
	for i := 0; i < 20; i++ {
		if _, err := a.Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: fmt.Sprintf("d%d", i), Body: body(10 << 10)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "big", Body: body(40 << 10)}}); err != nil {
		t.Fatal(err)
	}
	r := New(a, "db", 0, tr, nil)
	defer r.Close()
	r.SetPeers([]string{"B"})
	waitFor(t, "B to hold every document", func() bool { return b.Stats().DocumentsCount == 21 })
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.largest > tr.limit {
		t.Fatalf("a batch of several items carried %d bytes of bodies, over the transport's %d", tr.largest, tr.limit)
	}
	if tr.items != 21 {
		t.Fatalf("%d items sent, want 21 (each once)", tr.items)
	}
}

// countingTransport counts the items each sender sends, by sender tag.
type countingTransport struct {
	*memTransport
	mu   sync.Mutex
	sent map[string]int // "from->to" → items
}

func (c *countingTransport) from(src string) Transport { return &countingFrom{c, src} }

type countingFrom struct {
	c   *countingTransport
	src string
}

func (f *countingFrom) Progress(ctx context.Context, peer string, req *ProgressRequest) (*ProgressReply, error) {
	return f.c.memTransport.Progress(ctx, peer, req)
}

func (f *countingFrom) Send(ctx context.Context, peer string, b *Batch) (*ProgressReply, error) {
	f.c.mu.Lock()
	f.c.sent[f.src+"->"+peer] += len(b.Items)
	f.c.mu.Unlock()
	return f.c.memTransport.Send(ctx, peer, b)
}

// TestNoEcho: an item a replica received by replication, unchanged, is not
// sent back to the replica it came from; one it changed afterwards is.
func TestNoEcho(t *testing.T) {
	a, b := open(t, "A"), open(t, "B")
	ct := &countingTransport{memTransport: &memTransport{stores: map[string]*storage.Store{"A": a, "B": b}, down: map[string]bool{}}, sent: map[string]int{}}
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		if _, err := a.Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: fmt.Sprintf("d%d", i), Body: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	ra, rb := New(a, "db", 0, ct.from("A"), nil), New(b, "db", 0, ct.from("B"), nil)
	defer ra.Close()
	defer rb.Close()
	ra.SetPeers([]string{"B"})
	rb.SetPeers([]string{"A"})
	waitFor(t, "B to hold A's documents", func() bool { return b.Stats().DocumentsCount == 30 })
	// B's link to A moves past A's items without sending them.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if n, err := rb.WaitReplicas(wctx, []Written{{Etag: b.LastEtag()}}, 2); err != nil || n != 2 {
		t.Fatalf("B's feed acknowledged by A: %d %v", n, err)
	}
	// B changes one: that one goes to A.
	if _, err := b.Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "d3", Body: []byte(`{"v":2}`)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A to get B's change", func() bool {
		d, _ := a.Get("d3")
		return d != nil && string(d.Body) == `{"v":2}`
	})
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.sent["A->B"] != 30 || ct.sent["B->A"] != 1 {
		t.Fatalf("items sent %v, want A->B 30 and B->A 1 (no echo)", ct.sent)
	}
}

// TestRecreatedPeerGetsEverything: a peer replica replaced by an empty one
// while its link kept working (no failed send, so the sender never asked
// again how far it was) receives the whole feed, not just what came after,
// and WaitReplicas stops counting it for what it lost.
func TestRecreatedPeerGetsEverything(t *testing.T) {
	ctx := context.Background()
	tr := &memTransport{stores: map[string]*storage.Store{"A": open(t, "A"), "B": open(t, "B")}, down: map[string]bool{}}
	a := New(tr.stores["A"], "db", 0, tr, nil)
	a.SetPeers([]string{"B"})
	t.Cleanup(a.Close)
	write := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := tr.stores["A"].Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: fmt.Sprintf("k%d", i), Body: []byte(`{}`)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 50)
	waitFor(t, "B to hold A's first 50", func() bool { return tr.stores["B"].Stats().DocumentsCount == 50 })
	tr.mu.Lock()
	tr.stores["B"] = open(t, "B") // recreated empty, same node
	tr.mu.Unlock()
	write(50, 60)
	waitFor(t, "the new B to hold all 60", func() bool { return tr.stores["B"].Stats().DocumentsCount == 60 })
	for i := 0; i < 60; i++ {
		if _, err := tr.stores["B"].Get(fmt.Sprintf("k%d", i)); err != nil {
			t.Fatalf("k%d on the new B: %v", i, err)
		}
	}
}

// TestBatchWithHoleIsNotApplied: a batch whose items follow more than the
// receiver holds from that source changes nothing and answers what it
// holds.
func TestBatchWithHoleIsNotApplied(t *testing.T) {
	ctx := context.Background()
	s := open(t, "B")
	b := &Batch{DB: "db", Source: "sourcedatabaseid0000000", SourceTag: "A", After: 10, LastEtag: 12,
		Items: []Item{{ID: "k11", ChangeVector: "A:11-sourcedatabaseid0000000", LastModified: time.Now(), Body: []byte(`{}`)}}}
	got, err := Apply(ctx, s, b)
	if err != nil || got.Etag != 0 {
		t.Fatalf("Apply: %d %v, want 0", got.Etag, err)
	}
	if n := s.Stats().DocumentsCount; n != 0 || s.ReplicationProgress(b.Source) != 0 {
		t.Fatalf("a batch with a hole wrote %d documents, progress %d", n, s.ReplicationProgress(b.Source))
	}
	b.After = 0
	if got, err := Apply(ctx, s, b); err != nil || got.Etag != 12 {
		t.Fatalf("Apply from 0: %d %v", got.Etag, err)
	}
}

// TestOlderPeersGetFormat1: a peer that does not advertise batch format 2
// (a node of an earlier version) gets batches without After, in format 1,
// which it decodes.
func TestOlderPeersGetFormat1(t *testing.T) {
	ctx := context.Background()
	tr := &memTransport{stores: map[string]*storage.Store{"A": open(t, "A"), "B": open(t, "B")}, down: map[string]bool{}, old: true}
	a := New(tr.stores["A"], "db", 0, tr, nil)
	a.SetPeers([]string{"B"})
	t.Cleanup(a.Close)
	for i := 0; i < 3; i++ { // one batch each: the later ones follow a progress above 0
		if _, err := tr.stores["A"].Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: fmt.Sprintf("k%d", i), Body: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "B to hold A's writes", func() bool { return tr.stores["B"].Stats().DocumentsCount == int64(i+1) })
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.sent) < 3 {
		t.Fatalf("%d batches sent, want 3", len(tr.sent))
	}
	for _, b := range tr.sent {
		data, err := b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if b.After != 0 || data[0] != FormatBinaryV1 {
			t.Fatalf("batch to an older peer: After %d, format %d", b.After, data[0])
		}
	}
}

// TestWaitWritesWaitsForEveryPeerNotSkipped: WaitWrites returns the peers
// that lack the latest write recorded by Wrote, a paused link included
// (unlike Drain), and none once each holds it or is skipped.
func TestWaitWritesWaitsForEveryPeerNotSkipped(t *testing.T) {
	ctx := context.Background()
	tr := &memTransport{stores: map[string]*storage.Store{"A": open(t, "A"), "B": open(t, "B"), "C": open(t, "C")}, down: map[string]bool{}}
	r := New(tr.stores["A"], "db", 0, tr, nil)
	defer r.Close()
	none := func(string) bool { return false }
	if behind := r.WaitWrites(ctx, none); behind != nil {
		t.Fatalf("no write recorded yet, peers behind: %v", behind)
	}
	r.SetPaused(true)
	r.SetPeers([]string{"B", "C"})
	res, err := tr.stores["A"].Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "x", Body: []byte(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	r.Wrote(res[0].Etag)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if behind := r.WaitWrites(short, none); fmt.Sprint(behind) != "[B C]" {
		t.Fatalf("paused links: behind %v, want [B C]", behind)
	}
	if behind := r.WaitWrites(ctx, func(p string) bool { return p != "A" }); behind != nil {
		t.Fatalf("every peer skipped: behind %v", behind)
	}
	r.SetPaused(false)
	if behind := r.WaitWrites(ctx, none); behind != nil {
		t.Fatalf("after the links resumed: behind %v", behind)
	}
	for _, p := range []string{"B", "C"} {
		if tr.stores[p].Stats().DocumentsCount != 1 {
			t.Errorf("%s does not hold the write WaitWrites waited for", p)
		}
	}
}

// TestConcurrentWritesOnlyTheWinnerCountsReplicas: two replicas each take
// writes of the same document while cut off from each other (A two, B
// one), and each waits for both replicas to hold its writes. When the link returns, the
// later write wins on both; the replica that kept the earlier one only as
// a conflict loser does not count as holding it: that wait ends with
// ErrSuperseded, and only the winner's wait succeeds. Before, both
// succeeded, and a client was told its write was on two replicas while
// every replica held the other one.
func TestConcurrentWritesOnlyTheWinnerCountsReplicas(t *testing.T) {
	ctx := context.Background()
	tr := &memTransport{stores: map[string]*storage.Store{"A": open(t, "A"), "B": open(t, "B")}, down: map[string]bool{"A": true, "B": true}}
	reps := map[string]*Replicator{}
	for tag, peer := range map[string]string{"A": "B", "B": "A"} {
		r := New(tr.stores[tag], "db", 0, tr, nil)
		r.SetPeers([]string{peer})
		reps[tag] = r
		t.Cleanup(r.Close)
	}
	tr.mu.Lock()
	tr.reps = reps
	tr.mu.Unlock()
	write := func(tag, v string) []Written {
		res, err := tr.stores[tag].Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "x", Body: []byte(`{"v":"` + v + `"}`)}})
		if err != nil {
			t.Fatal(err)
		}
		return written(t, res)
	}
	early := write("A", "a")
	// A writes the document again: the first write's version is only in
	// the second's history, and the second's loss takes both away.
	again := write("A", "a2")
	time.Sleep(2 * time.Millisecond) // distinct modification times: B's is later
	late := write("B", "b")
	type result struct {
		n   int
		err error
	}
	wait := func(tag string, w []Written) chan result {
		ch := make(chan result, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			n, err := reps[tag].WaitReplicas(wctx, w, 2)
			ch <- result{n, err}
		}()
		return ch
	}
	chA, chA2, chB := wait("A", early), wait("A", again), wait("B", late)
	tr.mu.Lock()
	tr.down = map[string]bool{}
	tr.mu.Unlock()
	if r := <-chA; !errors.Is(r.err, ErrSuperseded) {
		t.Errorf("the first earlier write's wait: %d %v, want ErrSuperseded", r.n, r.err)
	}
	if r := <-chA2; !errors.Is(r.err, ErrSuperseded) {
		t.Errorf("the second earlier write's wait: %d %v, want ErrSuperseded", r.n, r.err)
	}
	if r := <-chB; r.err != nil || r.n != 2 {
		t.Errorf("the later write's wait: %d %v, want 2 replicas", r.n, r.err)
	}
	for tag, s := range tr.stores {
		waitFor(t, tag+" to hold the later write", func() bool {
			d, err := s.Get("x")
			return err == nil && d != nil && string(d.Body) == `{"v":"b"}`
		})
	}
}

// written describes a write's results for WaitReplicas.
func written(t *testing.T, res []storage.Result) []Written {
	t.Helper()
	var out []Written
	for _, r := range res {
		cv, err := changevector.Parse(r.ChangeVector)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Written{Etag: r.Etag, ID: r.ID, Version: cv.Version})
	}
	return out
}
