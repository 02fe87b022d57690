package resharding

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// fakeCluster is a Cluster of one source replica: a fixed record, batches
// that take sendDelay to store, and the commands proposed.
type fakeCluster struct {
	rec       *raftfsm.DatabaseRecord
	sendDelay time.Duration
	// applyDelay is how long after its proposal a last pass shows in the
	// record (a follower applies what the leader committed a moment
	// later); watch tells of it.
	applyDelay time.Duration
	watch      chan uint64

	mu        sync.Mutex
	proposed  []raftfsm.Command
	sent      []int // each batch's size, as the sender counts it
	throttled []int // each ThrottleSend's bytes
	limit     int64 // SendLimit's answer
	announced []LastPass
	// onSend, if set, runs once, at the first batch sent.
	onSend   func()
	lastPass []string // each batch's LastPass
	// onSourceFence, if set, runs at each FenceSourceReplicas: what the
	// other source replicas' writes bring by replication meanwhile.
	onSourceFence func()
	timings       []LastPassTimings // each ObserveLastPass
	// lease is what LeaseSourceReplicas answers; leaseAsks records each
	// ask, and fenceLeases the leases each FenceSourceReplicas got.
	lease       []PeerLease
	leaseAsks   []leaseAsk
	fenceLeases [][]PeerLease
	// spanHeld, spanFlipBy (zero: in an hour) and spanErr are what
	// LeaseEmptySpans answers; spanAsks records the spans of each call,
	// with how many commands had been proposed before, and
	// proposeDeadlines the deadline of each proposal's context.
	spanHeld         []uint32
	spanFlipBy       time.Time
	spanErr          error
	spanAsks         []spanAsk
	proposeDeadlines []time.Time
	// stats is what RangeStats answers.
	stats []storage.BucketStats
	// released records the spans of each ReleaseEmptySpans call;
	// proposeErr, when set, fails every proposal of MoveEmptyBuckets.
	released   [][]raftfsm.BucketSpan
	proposeErr error
	// maxAwaiting is MaxAwaitingCleanup's answer (0: no bound).
	maxAwaiting int
	// leader is IsLeader's answer; leaderAsked counts the calls.
	leader      bool
	leaderAsked int
}

func (c *fakeCluster) ReleaseEmptySpans(_ context.Context, _ string, _ int, spans []raftfsm.BucketSpan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released = append(c.released, slices.Clone(spans))
}

// spanAsk is one LeaseEmptySpans call.
type spanAsk struct {
	spans    []raftfsm.BucketSpan
	proposed int
}

func (c *fakeCluster) LeaseEmptySpans(_ context.Context, _ string, _, _ int, spans []raftfsm.BucketSpan) (SpanLease, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spanAsks = append(c.spanAsks, spanAsk{spans: slices.Clone(spans), proposed: len(c.proposed)})
	by := c.spanFlipBy
	if by.IsZero() {
		by = time.Now().Add(time.Hour)
	}
	return SpanLease{Held: slices.Clone(c.spanHeld), FlipBy: by}, c.spanErr
}

// leaseAsk is one LeaseSourceReplicas call: its migration and record,
// and how many commands had been proposed before it.
type leaseAsk struct {
	index, recordEtag uint64
	proposed          int
}

func (c *fakeCluster) LeaseSourceReplicas(_ context.Context, _ string, _ int, _ uint32, index, recordEtag uint64) []PeerLease {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaseAsks = append(c.leaseAsks, leaseAsk{index: index, recordEtag: recordEtag, proposed: len(c.proposed)})
	return slices.Clone(c.lease)
}

func (c *fakeCluster) NodeTag() string { return "B" }
func (c *fakeCluster) Watch() (<-chan uint64, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watch == nil {
		c.watch = make(chan uint64, 1)
	}
	return c.watch, func() {}
}
func (c *fakeCluster) IsLeader() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaderAsked++
	return c.leader
}
func (c *fakeCluster) Up(string) bool                                 { return true }
func (c *fakeCluster) Behind(string, int) bool                        { return false }
func (c *fakeCluster) Stopping() bool                                 { return false }
func (c *fakeCluster) WaitAllApplied(context.Context, uint64) error   { return nil }
func (c *fakeCluster) NotePurge(string, int, uint64)                  {}
func (c *fakeCluster) FenceWrites(context.Context, string, int) error { return nil }
func (c *fakeCluster) FenceSourceReplicas(_ context.Context, _ string, _ int, _ uint32, _ int, _ uint64, leases []PeerLease) error {
	c.mu.Lock()
	c.fenceLeases = append(c.fenceLeases, leases)
	c.mu.Unlock()
	if c.onSourceFence != nil {
		c.onSourceFence()
	}
	return nil
}
func (c *fakeCluster) ObserveLastPass(t LastPassTimings) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timings = append(c.timings, t)
}
func (c *fakeCluster) Failpoint(context.Context, string) {}
func (c *fakeCluster) WaitReady(context.Context) error   { return nil }
func (c *fakeCluster) MigratorInterval() time.Duration   { return time.Hour }
func (c *fakeCluster) MaxAwaitingCleanup() int           { return c.maxAwaiting }
func (c *fakeCluster) RangeStats(context.Context, string, int, uint32, uint32) ([]storage.BucketStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.stats), nil
}

func (c *fakeCluster) ItemVersions(context.Context, string, int, []string) (map[string]string, error) {
	return nil, nil
}

func (c *fakeCluster) Propose(ctx context.Context, cmd raftfsm.Command) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.proposed = append(c.proposed, cmd)
	dl, _ := ctx.Deadline()
	c.proposeDeadlines = append(c.proposeDeadlines, dl)
	if _, ok := cmd.(*raftfsm.MoveEmptyBuckets); ok && c.proposeErr != nil {
		return c.proposeErr
	}
	if p, ok := cmd.(*raftfsm.SourceMigrationFinalPass); ok {
		time.AfterFunc(c.applyDelay, func() { c.applyFinalPass(p) })
	}
	return nil
}

// applyFinalPass records p in a new record, as a raft apply would.
func (c *fakeCluster) applyFinalPass(p *raftfsm.SourceMigrationFinalPass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := *c.rec
	migs := map[uint32]*raftfsm.BucketMigration{}
	for b, m := range c.rec.Sharding.BucketMigrations {
		cp := *m
		if b == p.Bucket && m.MigrationIndex == p.MigrationIndex {
			pass := p.Pass
			cp.FinalPass = &pass
		}
		migs[b] = &cp
	}
	rec.Sharding.BucketMigrations = migs
	c.rec = &rec
	if c.watch == nil {
		c.watch = make(chan uint64, 1)
	}
	select {
	case c.watch <- 1:
	default:
	}
}

func (c *fakeCluster) Record(string) *raftfsm.DatabaseRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec
}

func (c *fakeCluster) SendLimit() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limit
}

func (c *fakeCluster) ThrottleSend(_ context.Context, bytes int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.throttled = append(c.throttled, bytes)
	return nil
}

func (c *fakeCluster) AnnounceLastPass(_ context.Context, p LastPass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.announced = append(c.announced, p)
}

func (c *fakeCluster) SendBatch(ctx context.Context, b *Batch) error {
	size := 0
	for _, it := range b.Items {
		size += len(it.Body) + len(it.ID) + len(it.ChangeVector) + 64
	}
	c.mu.Lock()
	c.sent = append(c.sent, size)
	c.lastPass = append(c.lastPass, b.LastPass)
	hook := c.onSend
	c.onSend = nil
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	select {
	case <-time.After(c.sendDelay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// afterFlip returns a migration of tenants/7's bucket from shard 0 to
// shard 1 whose ownership flip is done, and a record that holds it.
func afterFlip() (raftfsm.BucketMigration, *raftfsm.DatabaseRecord) {
	b := bucket.ForID("tenants/7")
	m := raftfsm.BucketMigration{Bucket: b, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationOwnershipTransferred, MigrationIndex: 7}
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid"}
	rec.Sharding.BucketMigrations = map[uint32]*raftfsm.BucketMigration{b: &m}
	return m, rec
}

// runSend runs the send of m by an agent of shard 0 over st and c, to its
// end (at most 30 s).
func runSend(t *testing.T, c *fakeCluster, st *storage.Store, m raftfsm.BucketMigration) {
	t.Helper()
	a := &Agent{c: c, db: "db", shard: 0, s: st, logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.send(ctx, m); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// TestReplacingSenderCountsOnlyItsLastPass: a sender that takes over
// after the flip (the first one died before recording its last pass)
// sends the whole bucket again, but its recorded pass counts only what
// it sent after that snapshot: here nothing, however long the snapshot's
// batches take to store.
func TestReplacingSenderCountsOnlyItsLastPass(t *testing.T) {
	st, err := storage.Open(storage.Options{Dir: t.TempDir(), NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const docs = 3 * batchItems
	var ops []storage.Op
	for i := 0; i < docs; i++ {
		ops = append(ops, storage.Op{Kind: storage.OpPut, ID: fmt.Sprintf("orders/%d$tenants/7", i), Collection: "Orders", Body: []byte(`{"n":1}`)})
	}
	if _, err := st.Write(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	b := bucket.ForID("tenants/7")
	m := raftfsm.BucketMigration{Bucket: b, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationOwnershipTransferred,
		MigrationIndex: 7, Documents: docs, SentByNode: "A"}
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid"}
	rec.Sharding.BucketMigrations = map[uint32]*raftfsm.BucketMigration{b: &m}
	c := &fakeCluster{rec: rec, sendDelay: 200 * time.Millisecond}
	a := &Agent{c: c, db: "db", shard: 0, s: st, logger: slog.New(slog.DiscardHandler)}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.send(ctx, m); err != nil {
		t.Fatalf("send: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.proposed) != 1 {
		t.Fatalf("proposed %d commands, want one final pass: %+v", len(c.proposed), c.proposed)
	}
	p, ok := c.proposed[0].(*raftfsm.SourceMigrationFinalPass)
	if !ok {
		t.Fatalf("proposed %T, want a final pass", c.proposed[0])
	}
	if p.Documents != 0 {
		t.Fatalf("the replacing sender's last pass counts %d documents, want 0 (its snapshot re-sent the %d the migration counted)", p.Documents, docs)
	}
	// The destination hears of the same pass directly, ahead of the
	// record, so that its replicas can take the bucket's writes sooner.
	want := LastPass{DB: "db", Shard: 1, Bucket: b, MigrationIndex: 7, ChangeVector: p.Pass.ChangeVector}
	if len(c.announced) != 1 || c.announced[0] != want {
		t.Fatalf("announced %+v, want %+v", c.announced, want)
	}
	// The pass sent nothing new: no batch claims to end it (the notice
	// above does).
	for i, lp := range c.lastPass {
		if lp != "" {
			t.Fatalf("batch %d of %d claims to end a last pass that sent nothing (%q)", i+1, len(c.lastPass), lp)
		}
	}
	if p.Pass.ChangeVector == "" {
		t.Fatal("the last pass covers no version")
	}
	// Writes into the bucket wait for this snapshot and the last pass:
	// the node's move bandwidth must not hold them back.
	if len(c.throttled) != 0 {
		t.Fatalf("a sender after the flip waited for the move bandwidth %d times, want never", len(c.throttled))
	}
}

// TestSenderEndsOnceItsLastPassIsInTheRecord: a sender on a follower
// hears its last pass applied by the leader before its own node applies
// it. The send task must not end before: this replica's cleanup starts as
// it ends, and one that found no pass recorded took the pass for one that
// sent nothing new, purging only what the source had at Moved.
func TestSenderEndsOnceItsLastPassIsInTheRecord(t *testing.T) {
	st, err := storage.Open(storage.Options{Dir: t.TempDir(), NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: "orders/1$tenants/7", Collection: "Orders", Body: []byte(`{"n":1}`)}}); err != nil {
		t.Fatal(err)
	}
	m, rec := afterFlip()
	const applyDelay = 300 * time.Millisecond
	c := &fakeCluster{rec: rec, applyDelay: applyDelay}
	start := time.Now()
	runSend(t, c, st, m)
	took := time.Since(start)
	c.mu.Lock()
	pass := c.rec.Sharding.BucketMigrations[m.Bucket].FinalPass
	c.mu.Unlock()
	if pass == nil || took < applyDelay {
		t.Fatalf("send ended after %v, before its last pass was in the record (%v)", took, pass)
	}
}

// ordersStore opens a source replica's store (closed with the test) and
// returns it with a function that writes one order into it.
func ordersStore(t *testing.T) (*storage.Store, func(id string)) {
	t.Helper()
	st, err := storage.Open(storage.Options{Dir: t.TempDir(), NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, func(id string) {
		if _, err := st.Write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: id, Collection: "Orders", Body: []byte(`{"n":1}`)}}); err != nil {
			t.Error(err)
		}
	}
}

// TestLastPassEndsWithItsVersion: when the last pass after the flip sends
// anything, its last batch carries the version the pass records, so a
// destination replica that stores it may take the bucket's writes at
// once; no earlier batch claims it.
func TestLastPassEndsWithItsVersion(t *testing.T) {
	st, put := ordersStore(t)
	put("orders/1$tenants/7")
	m, rec := afterFlip()
	// A write that passed the guard before the flip commits while the
	// snapshot is on its way: the last pass sends it.
	c := &fakeCluster{rec: rec, onSend: func() { put("orders/2$tenants/7") }}
	runSend(t, c, st, m)
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proposed[len(c.proposed)-1].(*raftfsm.SourceMigrationFinalPass)
	if p.Documents != 1 {
		t.Fatalf("the last pass counts %d documents, want the 1 written during the snapshot", p.Documents)
	}
	n := len(c.lastPass)
	if n < 2 || c.lastPass[n-1] != p.Pass.ChangeVector {
		t.Fatalf("batches' last passes %q, want the last one to carry %q", c.lastPass, p.Pass.ChangeVector)
	}
	for i, lp := range c.lastPass[:n-1] {
		if lp != "" {
			t.Fatalf("batch %d of %d claims to end the last pass (%q)", i+1, n, lp)
		}
	}
}

// TestLastPassHoldsWhatTheOtherSourceReplicasTook: after the flip, the
// sender fences the source shard's other replicas before its last pass,
// and the pass carries a write one of them took (it arrives here by
// replication during the fence) and counts it.
func TestLastPassHoldsWhatTheOtherSourceReplicasTook(t *testing.T) {
	st, put := ordersStore(t)
	put("orders/1$tenants/7")
	m, rec := afterFlip()
	fenced := 0
	c := &fakeCluster{rec: rec}
	c.onSourceFence = func() {
		fenced++
		put("orders/9$tenants/7") // stands for a peer's write replicated here
	}
	runSend(t, c, st, m)
	c.mu.Lock()
	defer c.mu.Unlock()
	if fenced != 1 {
		t.Fatalf("the other source replicas were fenced %d times, want once", fenced)
	}
	p := c.proposed[len(c.proposed)-1].(*raftfsm.SourceMigrationFinalPass)
	if p.Documents != 1 {
		t.Fatalf("the last pass counts %d documents, want the 1 a peer took", p.Documents)
	}
	v, err := changevector.ParseVector(p.Pass.ChangeVector)
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.Get("orders/9$tenants/7")
	if err != nil {
		t.Fatal(err)
	}
	cv, err := changevector.Parse(d.ChangeVector)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Covers(cv.Version) {
		t.Fatalf("the last pass covers %s, not the peer's write %s", v, cv.Version)
	}
}

// TestLastPassReportsItsSteps: a sender reports its last pass's steps
// once the pass is stored, each as long as it took: here the other source
// replicas' fence, which a flip's pass waits for.
func TestLastPassReportsItsSteps(t *testing.T) {
	st, put := ordersStore(t)
	put("orders/1$tenants/7")
	m, rec := afterFlip()
	const peerWait = 30 * time.Millisecond
	c := &fakeCluster{rec: rec, sendDelay: 5 * time.Millisecond}
	c.onSourceFence = func() {
		time.Sleep(peerWait) // stands for the peers' answer on its way
		put("orders/9$tenants/7")
	}
	runSend(t, c, st, m)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timings) != 1 {
		t.Fatalf("%d last passes reported, want 1", len(c.timings))
	}
	got := c.timings[0]
	if got.DB != "db" || got.Bucket != m.Bucket {
		t.Fatalf("reported %s bucket %d, want db bucket %d", got.DB, got.Bucket, m.Bucket)
	}
	if got.FencePeers < peerWait || got.FenceWrites > got.FencePeers {
		t.Fatalf("fences took writes %v, peers %v: want the peers' at least %v, and the longer", got.FenceWrites, got.FencePeers, peerWait)
	}
	if got.Send < c.sendDelay || got.Total < got.FencePeers+got.Send {
		t.Fatalf("send %v (a batch takes %v), total %v: want the pass's batch in send, and total at least fences and send", got.Send, c.sendDelay, got.Total)
	}
}

// TestMovingBucketsBatchesWaitForTheMoveBandwidth: while the bucket is
// Moving, every batch, of the snapshot and of the tail, first waits for
// the node's move bandwidth for its size.
func TestMovingBucketsBatchesWaitForTheMoveBandwidth(t *testing.T) {
	st, err := storage.Open(storage.Options{Dir: t.TempDir(), NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ops []storage.Op
	for i := 0; i < 3*batchItems+10; i++ {
		ops = append(ops, storage.Op{Kind: storage.OpPut, ID: fmt.Sprintf("orders/%d$tenants/7", i), Collection: "Orders", Body: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	if _, err := st.Write(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	b := bucket.ForID("tenants/7")
	m := raftfsm.BucketMigration{Bucket: b, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoving, MigrationIndex: 7}
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid"}
	rec.Sharding.BucketMigrations = map[uint32]*raftfsm.BucketMigration{b: &m}
	c := &fakeCluster{rec: rec}
	a := &Agent{c: c, db: "db", shard: 0, s: st, logger: slog.New(slog.DiscardHandler)}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.send(ctx, m) }()
	c.await(t, "the bucket reported sent", func() bool { return len(c.proposed) > 0 })
	// What it sent shows, for this migration only.
	if p, ok := a.SendProgress(b, 7); !ok || p.Documents != 3*batchItems+10 || p.Bytes == 0 || p.LastStored.Before(p.Started) {
		t.Errorf("SendProgress = %+v, %v; want the %d documents sent", p, ok, 3*batchItems+10)
	}
	if _, ok := a.SendProgress(b, 8); ok {
		t.Error("SendProgress answers for another migration of the bucket")
	}
	// A later write goes in a tail pass, while the bucket is still Moving.
	if _, err := st.Write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: "late$tenants/7", Collection: "Orders", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	c.await(t, "the tail's batch", func() bool { return len(c.sent) == 5 })
	// The flip: writes into the bucket now wait for the last pass, which
	// must not wait for the bandwidth.
	flipped := m
	flipped.Status = raftfsm.MigrationOwnershipTransferred
	after := *rec
	after.Sharding.BucketMigrations = map[uint32]*raftfsm.BucketMigration{b: &flipped}
	c.mu.Lock()
	c.rec = &after
	c.mu.Unlock()
	if _, err := st.Write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: "later$tenants/7", Collection: "Orders", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("send: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sender made no last pass")
	}
	if _, ok := a.SendProgress(b, 7); ok {
		t.Error("SendProgress answers after the sender ended")
	}
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.proposed) != 2 {
		t.Fatalf("proposed %v, want the bucket sent, then its last pass", c.proposed)
	}
	if _, ok := c.proposed[1].(*raftfsm.SourceMigrationFinalPass); !ok {
		t.Fatalf("proposed %T, want the last pass", c.proposed[1])
	}
	if len(c.sent) != 6 {
		t.Fatalf("%d batches sent, want the snapshot's four, the tail's and the last pass", len(c.sent))
	}
	// Batches go out concurrently: compare the sizes in order.
	moving := slices.Clone(c.sent[:5])
	slices.Sort(moving)
	slices.Sort(c.throttled)
	if !slices.Equal(c.throttled, moving) {
		t.Fatalf("batches of %v bytes sent while Moving and %d after the flip, %v waited for: each of the first must wait for its size, the last pass never", moving, c.sent[5], c.throttled)
	}
}

// await polls cond, under c's lock, until it holds (at most 30 s).
func (c *fakeCluster) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// setRecord makes rec the record and tells the watchers, as a raft apply
// would.
func (c *fakeCluster) setRecord(rec *raftfsm.DatabaseRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec = rec
	if c.watch == nil {
		c.watch = make(chan uint64, 1)
	}
	select {
	case c.watch <- 1:
	default:
	}
}

// TestSenderLeasesThePeersBeforeTheFlip: the sender of a bucket that
// takes writes during its move asks the source shard's other replicas for
// their lease on it as it records the send completed, asks again while
// the bucket stays Moved, and at the flip hands what they promised to the
// fence, which then needs no round trip to them. It asks no more once its
// pass is made. The sender of an idle bucket asks for none.
func TestSenderLeasesThePeersBeforeTheFlip(t *testing.T) {
	t.Run("busy", func(t *testing.T) { testSenderLease(t, true) })
	t.Run("idle", func(t *testing.T) { testSenderLease(t, false) })
}

func testSenderLease(t *testing.T, busy bool) {
	st, put := ordersStore(t)
	put("orders/1$tenants/7")
	b := bucket.ForID("tenants/7")
	withStatus := func(etag uint64, status raftfsm.MigrationStatus) *raftfsm.DatabaseRecord {
		m := raftfsm.BucketMigration{Bucket: b, SourceShard: 0, DestinationShard: 1, Status: status, MigrationIndex: 7}
		rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid", Etag: etag}
		rec.Sharding.BucketMigrations = map[uint32]*raftfsm.BucketMigration{b: &m}
		return rec
	}
	moving := withStatus(40, raftfsm.MigrationMoving)
	lease := []PeerLease{{Node: "A", DatabaseID: "peer", OwnEtag: 3, Until: time.Now().Add(time.Minute)}}
	c := &fakeCluster{rec: moving, lease: lease}
	if busy {
		c.onSend = func() { put("orders/2$tenants/7") } // a write during the move
	}
	a := &Agent{c: c, db: "db", shard: 0, s: st, logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.send(ctx, *moving.Sharding.BucketMigrations[b]) }()
	// ended waits for the sender's end, after its last pass.
	ended := func() {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("send: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("the sender made no last pass")
		}
	}
	if !busy {
		c.await(t, "the send completed", func() bool { return len(c.proposed) == 1 })
		c.setRecord(withStatus(41, raftfsm.MigrationMoved))
		c.setRecord(withStatus(42, raftfsm.MigrationOwnershipTransferred))
		ended()
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.leaseAsks) != 0 || len(c.fenceLeases) != 1 || len(c.fenceLeases[0]) != 0 {
			t.Fatalf("idle bucket: %d leases asked, the flip's fences got %+v; want none asked, one fence with none", len(c.leaseAsks), c.fenceLeases)
		}
		return
	}
	c.await(t, "the send completed and a lease asked", func() bool { return len(c.proposed) == 1 && len(c.leaseAsks) == 1 })
	if _, ok := c.proposed[0].(*raftfsm.SourceMigrationSendCompleted); !ok {
		t.Fatalf("proposed %T, want the send completed", c.proposed[0])
	}
	if got := c.leaseAsks[0]; got.index != 7 || got.recordEtag != 40 {
		t.Fatalf("lease asked for migration %d by record %d, want 7 by 40", got.index, got.recordEtag)
	}
	// Moved: the lease is renewed, by the record the sender sees.
	c.setRecord(withStatus(41, raftfsm.MigrationMoved))
	c.await(t, "the lease renewed while Moved", func() bool {
		return len(c.leaseAsks) >= 2 && c.leaseAsks[len(c.leaseAsks)-1].recordEtag == 41
	})
	c.setRecord(withStatus(42, raftfsm.MigrationOwnershipTransferred))
	ended()
	c.mu.Lock()
	asks := len(c.leaseAsks)
	if len(c.fenceLeases) != 1 || !slices.Equal(c.fenceLeases[0], lease) {
		t.Fatalf("the flip's fence got leases %+v, want the peers' %+v", c.fenceLeases, lease)
	}
	if _, ok := c.proposed[len(c.proposed)-1].(*raftfsm.SourceMigrationFinalPass); !ok {
		t.Fatalf("proposed %T last, want the last pass", c.proposed[len(c.proposed)-1])
	}
	c.mu.Unlock()
	time.Sleep(2 * leaseRenewEvery) // what must not happen: a renewal after the end
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.leaseAsks) != asks {
		t.Fatalf("%d leases asked after the sender ended", len(c.leaseAsks)-asks)
	}
}

// TestPacedBatchesAreASecondsWorth: with a move bandwidth set, a Moving
// bucket's batches hold about a second's worth of bytes (one document
// more at most), so a paced move stores a batch every second or so
// instead of one 4 MiB batch every few minutes, which its view flagged
// stuck; without one they are as large as before.
func TestPacedBatchesAreASecondsWorth(t *testing.T) {
	st, err := storage.Open(storage.Options{Dir: t.TempDir(), NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	body := []byte(`{"s":"` + strings.Repeat("x", 4000) + `"}`)
	var ops []storage.Op
	for i := 0; i < 40; i++ {
		ops = append(ops, storage.Op{Kind: storage.OpPut, ID: fmt.Sprintf("orders/%d$tenants/9", i), Collection: "Orders", Body: body})
	}
	if _, err := st.Write(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	b := bucket.ForID("tenants/9")
	for _, limit := range []int64{0, 32 << 10, 1} {
		m := raftfsm.BucketMigration{Bucket: b, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoving, MigrationIndex: 7}
		rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid"}
		rec.Sharding.BucketMigrations = map[uint32]*raftfsm.BucketMigration{b: &m}
		c := &fakeCluster{rec: rec, limit: limit}
		a := &Agent{c: c, db: "db", shard: 0, s: st, logger: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.send(ctx, m) }()
		c.await(t, "the bucket reported sent", func() bool { return len(c.proposed) > 0 })
		cancel()
		<-done
		c.mu.Lock()
		sent := slices.Clone(c.sent)
		c.mu.Unlock()
		total := 0
		for _, n := range sent {
			total += n
		}
		bound := batchBytesFor(limit)
		// Batches go out concurrently: the short last one may come first.
		slices.Sort(sent)
		slices.Reverse(sent)
		if limit == 0 && len(sent) != 1 {
			t.Errorf("no limit: batches of %v bytes, want one", sent)
		}
		for i, n := range sent {
			// Each batch closes at its bound, the last one on what is left.
			if n >= bound+len(body)+200 || (i < len(sent)-1 && n < bound) {
				t.Errorf("limit %d B/s: batches of %v bytes (%d in all), want batches of %d bytes and up to one document more", limit, sent, total, bound)
				break
			}
		}
	}
}
