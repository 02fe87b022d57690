package node

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// TestSourceFenceAnswersTheReplicasOwnWritesIntoTheBucket: a source
// replica told by a bucket's sender of its flip answers the etag of the
// newest write it took itself into that bucket (0 for a bucket it took
// none in), which the sender then waits to hold, and refuses routed writes
// into it from then on, as after the flip, for the fence's window and
// until its node has the sender's record.
func TestSourceFenceAnswersTheReplicasOwnWritesIntoTheBucket(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	c.must(201, "PUT", "/databases/db/docs?id=a$t1", `{"v":1}`)
	r := c.must(201, "PUT", "/databases/db/docs?id=b$t1", `{"v":1}`)
	cv, err := changevector.Parse(r.json(t)["ChangeVector"].(string))
	if err != nil {
		t.Fatal(err)
	}
	rec := n.recordOf("db")
	l, err := n.local("db", 0)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(id string) sourceFenceReply {
		t.Helper()
		data, _ := json.Marshal(sourceFenceRequest{DB: "db", Shard: 0, Bucket: bucket.ForID(id), To: 3, RecordEtag: rec.Etag + 7})
		out, err := n.serveSourceFence(context.Background(), data)
		if err != nil {
			t.Fatal(err)
		}
		return out.(sourceFenceReply)
	}
	got := ask("t1")
	if got.DatabaseID != l.s.DatabaseID() || got.OwnEtag != cv.Version.EtagOf(l.s.DatabaseID()) || got.OwnEtag == 0 {
		t.Errorf("bucket with writes: %+v, want %s at the last write's etag %d", got, l.s.DatabaseID(), cv.Version.EtagOf(l.s.DatabaseID()))
	}
	if got := ask("t2"); got.OwnEtag != 0 {
		t.Errorf("bucket without writes: own etag %d, want 0", got.OwnEtag)
	}

	// From the fence on, routed writes into the fenced buckets are refused
	// as the write guard refuses them after the flip, naming the new
	// owner by the sender's record; others, and direct writes, go in.
	write := func(routed bool, id string) error {
		l.routed = routed
		_, err := l.write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: id, Body: []byte(`{"v":2}`)}}, writeConcern{}, 0)
		return err
	}
	var ae *apiError
	if err := write(true, "c$t1"); !errors.As(err, &ae) || ae.Type != "BucketNotOwned" || ae.Owner == nil || *ae.Owner != (ownerHint{Shard: 3, RecordEtag: rec.Etag + 7}) {
		t.Errorf("routed write into a fenced bucket: %v (owner %+v), want BucketNotOwned naming shard 3 at etag %d", err, ae, rec.Etag+7)
	}
	if err := write(true, "c$t3"); err != nil {
		t.Errorf("routed write into another bucket: %v", err)
	}
	if err := write(false, "d$t1"); err != nil {
		t.Errorf("write to db$0 itself into the fenced bucket: %v", err)
	}
	// A mark whose record this node has reached is moot: the write
	// guard decides from then on.
	n.sourceFences.set(sourceFenceKey{"db", 0, bucket.ForID("t1")}, ownerHint{Shard: 3, RecordEtag: n.recordOf("db").Etag})
	if err := write(true, "f$t1"); err != nil {
		t.Errorf("routed write into a bucket fenced by a record this node has: %v", err)
	}
	n.sourceFences.set(sourceFenceKey{"db", 0, bucket.ForID("t1")}, ownerHint{Shard: 3, RecordEtag: rec.Etag + 7})
	n.sourceFences.mu.Lock()
	for k, v := range n.sourceFences.m {
		v.until = time.Now()
		n.sourceFences.m[k] = v
	}
	n.sourceFences.mu.Unlock()
	if err := write(true, "e$t1"); err != nil {
		t.Errorf("routed write once the fence's window ended: %v", err)
	}

	// One replica only: nothing to ask, the sender goes on at once.
	if err := (reshardCluster{n}).FenceSourceReplicas(context.Background(), "db", 0, bucket.ForID("t1"), 3, rec.Etag, nil); err != nil {
		t.Fatal(err)
	}
}

// TestSourceLeaseSparesTheFlipsRoundTrip: a bucket's sender leases its
// source shard's other replica before the flip: from then on that replica
// refuses the bucket's routed writes as leaving (retryable: the sender
// takes them) and answers how far its own writes go. At the flip, a lease
// that still holds long enough spares the fence's round trip (the peer is
// not fenced again); one about to end does not.
func TestSourceLeaseSparesTheFlipsRoundTrip(t *testing.T) {
	a := testNode(t, t.TempDir())
	b := joinedNode(t, a, "B", func(cfg *config.Config) {
		cfg.NATS.URL = a.bus.clientURL() // one bus: the lease and the fence travel on it
	})
	c := client{t, a.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1, "ReplicationFactor": 2}`)
	// Both replicas serve: a routed write into a replica still catching up
	// with its peer is refused as ShardCatchingUp, and one into a replica
	// that handed its writes over to the peer that caught up (for up to
	// 5 s) as ShardHandingOver, before the lease is looked at (seen once
	// in CI, session 36).
	waitFor(t, 15*time.Second, "both replicas open and serving, each node up for the other, no hand-over in force", func() bool {
		_, errA := a.local("db", 0)
		_, errB := b.local("db", 0)
		return errA == nil && errB == nil && a.health.up("B") && b.health.up("A") &&
			!a.catchUps.isBehind("db", 0) && !b.catchUps.isBehind("db", 0) &&
			a.handingOver("db", 0) == nil && b.handingOver("db", 0) == nil
	})
	lb, _ := b.local("db", 0)
	// A write B took itself into the bucket: the lease's answer covers it.
	res, err := lb.s.Write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: "a$t1", Body: []byte(`{"v":1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bk := bucket.ForID("t1")
	rec := a.recordOf("db")
	// No migration here: asked by a record B does not have yet, which
	// would show it, the lease holds.
	leases := reshardCluster{a}.LeaseSourceReplicas(ctx, "db", 0, bk, 9, rec.Etag+100)
	if len(leases) != 1 || leases[0].Node != "B" || leases[0].DatabaseID != lb.s.DatabaseID() || leases[0].OwnEtag != res[0].Etag {
		t.Fatalf("leases %+v, want B's replica %s at its write's etag %d", leases, lb.s.DatabaseID(), res[0].Etag)
	}
	if left := time.Until(leases[0].Until); left < sourceLeaseWindow-time.Second || left > sourceLeaseWindow {
		t.Fatalf("lease holds %v more, want about %v", left, sourceLeaseWindow)
	}
	lb.routed = true
	_, err = lb.write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "b$t1", Body: []byte(`{"v":2}`)}}, writeConcern{}, 0)
	var ae *apiError
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Type != "BucketLeaving" || !retryable(err) || !servesSoon(err) || asksAgain(err) || !strings.Contains(ae.Msg, "node A") {
		t.Fatalf("routed write into the leased bucket on B: %v, want a retryable 503 BucketLeaving naming A, passed on to it", err)
	}
	if _, err := lb.write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "b$t2", Body: []byte(`{"v":2}`)}}, writeConcern{}, 0); err != nil {
		t.Fatalf("routed write into another bucket on B: %v", err)
	}

	fenced := func() bool {
		b.sourceFences.mu.Lock()
		defer b.sourceFences.mu.Unlock()
		_, ok := b.sourceFences.m[sourceFenceKey{"db", 0, bk}]
		return ok
	}
	// The lease holds for seconds: the flip's fence asks B nothing, and
	// waits for B's write (replicated to A by now, or soon).
	if err := (reshardCluster{a}).FenceSourceReplicas(ctx, "db", 0, bk, 3, rec.Etag+1, leases); err != nil {
		t.Fatal(err)
	}
	if fenced() {
		t.Fatal("B was fenced at the flip although its lease held")
	}
	la, _ := a.local("db", 0)
	if got := la.s.ReplicationProgress(lb.s.DatabaseID()); got < res[0].Etag {
		t.Fatalf("the fence returned with A holding B's writes through %d, want at least its leased etag %d", got, res[0].Etag)
	}
	// A lease about to end is not trusted: B is fenced as before.
	short := slices.Clone(leases)
	short[0].Until = time.Now().Add(sourceLeaseMargin - 100*time.Millisecond)
	if err := (reshardCluster{a}).FenceSourceReplicas(ctx, "db", 0, bk, 3, rec.Etag+1, short); err != nil {
		t.Fatal(err)
	}
	if !fenced() {
		t.Fatal("B was not fenced at the flip although its lease was about to end")
	}
}

// TestSourceLeaseEndsWithItsMigration: a lease ends once the replica's
// record, at least the sender's, shows its migration flipped, gone, or
// replaced by another; not before (a record behind the sender's may not
// show the migration yet).
func TestSourceLeaseEndsWithItsMigration(t *testing.T) {
	const b = 7
	l := sourceLease{sender: "A", index: 5, recordEtag: 10}
	rec := func(etag uint64, m *raftfsm.BucketMigration) *raftfsm.DatabaseRecord {
		r := &raftfsm.DatabaseRecord{Etag: etag}
		if m != nil {
			r.Sharding.BucketMigrations = map[uint32]*raftfsm.BucketMigration{b: m}
		}
		return r
	}
	for _, tc := range []struct {
		what  string
		rec   *raftfsm.DatabaseRecord
		ended bool
	}{
		{"database gone", nil, true},
		{"record behind the sender's, no migration yet", rec(9, nil), false},
		{"record behind the sender's, flipped", rec(9, &raftfsm.BucketMigration{MigrationIndex: 5, Status: raftfsm.MigrationOwnershipTransferred}), false},
		{"Moving", rec(10, &raftfsm.BucketMigration{MigrationIndex: 5, Status: raftfsm.MigrationMoving}), false},
		{"Moved", rec(12, &raftfsm.BucketMigration{MigrationIndex: 5, Status: raftfsm.MigrationMoved}), false},
		{"flipped", rec(12, &raftfsm.BucketMigration{MigrationIndex: 5, Status: raftfsm.MigrationOwnershipTransferred}), true},
		{"migration gone", rec(12, nil), true},
		{"another migration", rec(12, &raftfsm.BucketMigration{MigrationIndex: 6, Status: raftfsm.MigrationMoved}), true},
	} {
		if got := leaseEnded(tc.rec, b, l); got != tc.ended {
			t.Errorf("%s: ended %v, want %v", tc.what, got, tc.ended)
		}
	}
}
