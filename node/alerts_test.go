package node

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/resharding"
)

// TestStuckAlertNamesTheNodesItWaitsFor: a stuck migration's alert, and
// its view's WaitingFor, name the nodes its step waits for: the sender in
// Moving, the destination members that have not confirmed in Moved, the
// source members not cleaned up in OwnershipTransferred.
func TestStuckAlertNamesTheNodesItWaitsFor(t *testing.T) {
	n := testNode(t, t.TempDir())
	me := n.cfg.Node.Tag
	// "Y" and "Z" were never heard from: not up.
	shards := map[int]*raftfsm.ShardTopology{
		0: {Members: []string{"Y", me}},
		1: {Members: []string{"Y", "Z", me}},
		2: {Members: []string{"Y", "Z"}},
	}
	long := time.Now().Add(-2 * time.Minute)
	op := &raftfsm.ReshardingOperation{ID: "op", Status: raftfsm.OperationRunning}
	migs := []*raftfsm.BucketMigration{
		{Bucket: 1, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoving, StatusSince: long, OperationID: "op"},
		{Bucket: 2, SourceShard: 2, DestinationShard: 1, Status: raftfsm.MigrationMoving, StatusSince: long, OperationID: "op"},
		{Bucket: 3, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoved, StatusSince: long, OperationID: "op",
			ConfirmedDestinations: []string{"Y"}},
		{Bucket: 4, SourceShard: 1, DestinationShard: 0, Status: raftfsm.MigrationOwnershipTransferred, StatusSince: long, OperationID: "op",
			ConfirmedSourceCleanup: []string{me}},
		{Bucket: 5, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoved, StatusSince: time.Now(), OperationID: "op"},
	}
	v := n.viewOperationOf(context.Background(), "db", shards, op, migs)
	want := []string{
		"bucket 1 stuck in Moving for …, waiting for node " + me + " to send",
		"bucket 2 stuck in Moving for …, waiting for nodes Y, Z to send (none is up)",
		"bucket 3 stuck in Moved for …, waiting for nodes Z, " + me + " to confirm",
		"bucket 4 stuck in OwnershipTransferred for …, waiting for nodes Y, Z to clean up",
	}
	var got []string
	for _, a := range v.Alerts {
		// The duration is whatever elapsed: mask it.
		if i, j := strings.Index(a, " for "), strings.Index(a, ", waiting"); i >= 0 && j > i {
			a = a[:i+5] + "…" + a[j:]
		}
		got = append(got, a)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("alerts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if w := v.Current[2].WaitingFor; strings.Join(w, ",") != "Z,"+me {
		t.Fatalf("bucket 3 waits for %v", w)
	}
	if w := v.Current[4].WaitingFor; strings.Join(w, ",") != "Y,Z,"+me || v.Current[4].Stuck {
		t.Fatalf("bucket 5, not stuck: waits for %v, stuck %v", w, v.Current[4].Stuck)
	}
}

// TestStuckBucketsWaitingAlikeShareAnAlert: buckets stuck in one status
// waiting for the same nodes for the same thing share one alert, which
// counts them, gives the shortest and longest time in the status, and
// names the first few; a bucket stuck otherwise keeps its own.
func TestStuckBucketsWaitingAlikeShareAnAlert(t *testing.T) {
	n := testNode(t, t.TempDir())
	me := n.cfg.Node.Tag
	shards := map[int]*raftfsm.ShardTopology{0: {Members: []string{"Y", me}}, 1: {Members: []string{me}}}
	op := &raftfsm.ReshardingOperation{ID: "op", Status: raftfsm.OperationRunning}
	var migs []*raftfsm.BucketMigration
	for i := range 8 {
		m := &raftfsm.BucketMigration{Bucket: uint32(100 - i), SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationOwnershipTransferred,
			StatusSince: time.Now().Add(-time.Duration(2+i) * time.Minute), OperationID: "op", ConfirmedSourceCleanup: []string{me}}
		migs = append(migs, m)
	}
	// Node Y cleaned bucket 50 up, this node did not: another wait.
	migs = append(migs, &raftfsm.BucketMigration{Bucket: 50, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationOwnershipTransferred,
		StatusSince: time.Now().Add(-3 * time.Minute), OperationID: "op", ConfirmedSourceCleanup: []string{"Y"}})
	v := n.viewOperationOf(context.Background(), "db", shards, op, migs)
	if len(v.Alerts) != 2 {
		t.Fatalf("alerts %q, want two", v.Alerts)
	}
	group := v.Alerts[0]
	for _, part := range []string{"8 buckets stuck in OwnershipTransferred for 2m", " to 9m", ", waiting for node Y to clean up (buckets 93, 94, 95, 96, 97 and 3 more)"} {
		if !strings.Contains(group, part) {
			t.Errorf("alert %q lacks %q", group, part)
		}
	}
	if want := "bucket 50 stuck in OwnershipTransferred for 3m"; !strings.HasPrefix(v.Alerts[1], want) || !strings.HasSuffix(v.Alerts[1], ", waiting for node "+me+" to clean up") {
		t.Errorf("alert %q, want %q…, waiting for node %s to clean up", v.Alerts[1], want, me)
	}
	if len(v.Current) != 9 {
		t.Errorf("%d current buckets, want every one of the 9", len(v.Current))
	}
}

// TestMovingBucketIsStuckOnlyWithoutProgress: how long a sender has made
// no progress, which decides whether a bucket long in Moving is stuck, is
// counted from its last stored batch, or from its start before the first.
func TestMovingBucketIsStuckOnlyWithoutProgress(t *testing.T) {
	now := time.Now()
	started := now.Add(-10 * time.Minute)
	for _, tc := range []struct {
		name       string
		lastStored time.Time
		stuck      bool
	}{
		{"a batch stored a second ago", now.Add(-time.Second), false},
		{"the last batch stored two minutes ago", now.Add(-2 * time.Minute), true},
		{"no batch stored since the start", time.Time{}, true},
	} {
		quiet := sendQuietFor(resharding.SendProgress{Started: started, LastStored: tc.lastStored, Bytes: 1}, now)
		if got := quiet > resharding.StuckAfter; got != tc.stuck {
			t.Errorf("%s: quiet for %v, stuck %v, want %v", tc.name, quiet, got, tc.stuck)
		}
	}
	if quiet := sendQuietFor(resharding.SendProgress{Started: now.Add(-time.Second)}, now); quiet > resharding.StuckAfter {
		t.Errorf("a sender that just started is quiet for %v", quiet)
	}
}

// TestStuckMigrationsGauge: shardnode_migrations_stuck counts the
// migrations the resharding status flags Stuck (the same view: whether a
// long Moving step progresses is TestMovingBucketIsStuckOnlyWithoutProgress's
// part), not every migration in flight.
func TestStuckMigrationsGauge(t *testing.T) {
	n := testNode(t, t.TempDir())
	me := n.cfg.Node.Tag
	long := time.Now().Add(-2 * time.Minute)
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", Sharding: raftfsm.Sharding{
		Shards: map[int]*raftfsm.ShardTopology{0: {Members: []string{me}}, 1: {Members: []string{"Y"}}},
		BucketMigrations: map[uint32]*raftfsm.BucketMigration{
			// Long in Moved, destination Y never confirmed: stuck.
			1: {Bucket: 1, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoved, StatusSince: long},
			// Moved a moment ago: not stuck.
			2: {Bucket: 2, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoved, StatusSince: time.Now()},
			// Long in Moving with a sender (this node) that does not
			// answer for it: stuck.
			3: {Bucket: 3, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoving, StatusSince: long},
		},
	}}
	ch := make(chan prometheus.Metric, 64)
	nodeCollector{n}.collectResharding(ch, rec)
	close(ch)
	got := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		name := m.Desc().String()
		if d.Gauge != nil && (strings.Contains(name, `"shardnode_migrations_stuck"`) || strings.Contains(name, `"shardnode_migration_status_age_seconds"`)) {
			got[strings.Split(strings.Split(name, `fqName: "`)[1], `"`)[0]] = d.Gauge.GetValue()
		}
	}
	if got["shardnode_migrations_stuck"] != 2 {
		t.Errorf("stuck gauge %v, want 2 (%v)", got["shardnode_migrations_stuck"], got)
	}
	if age := got["shardnode_migration_status_age_seconds"]; age < 119 {
		t.Errorf("status age %v s, want about 120", age)
	}
}

// TestOperationViewBoundsItsBuckets: an operation's view lists at most
// maxCurrentShown buckets in flight, those moving now first, and counts
// the rest by status; its alerts still cover every bucket.
func TestOperationViewBoundsItsBuckets(t *testing.T) {
	n := testNode(t, t.TempDir())
	me := n.cfg.Node.Tag
	shards := map[int]*raftfsm.ShardTopology{0: {Members: []string{"Y", me}}, 1: {Members: []string{me}}}
	op := &raftfsm.ReshardingOperation{ID: "op", Status: raftfsm.OperationRunning}
	long := time.Now().Add(-2 * time.Minute)
	var migs []*raftfsm.BucketMigration
	for b := range uint32(1000) {
		migs = append(migs, &raftfsm.BucketMigration{Bucket: b, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationOwnershipTransferred,
			StatusSince: long, OperationID: "op", ConfirmedSourceCleanup: []string{me}, LastSourceChangeVector: "A:123-abcdefghijklmnopqrstuv"})
	}
	migs = append(migs, &raftfsm.BucketMigration{Bucket: 5000, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoving,
		StatusSince: time.Now(), OperationID: "op"})
	v := n.viewOperationOf(context.Background(), "db", shards, op, migs)
	if len(v.Current) != maxCurrentShown {
		t.Fatalf("%d buckets shown, want %d", len(v.Current), maxCurrentShown)
	}
	if v.Current[0].Bucket != 5000 || v.Current[1].Bucket != 0 {
		t.Errorf("shown first: buckets %d, %d; want the moving one (5000), then 0", v.Current[0].Bucket, v.Current[1].Bucket)
	}
	if got := v.MoreBuckets[raftfsm.MigrationOwnershipTransferred]; got != 901 || len(v.MoreBuckets) != 1 {
		t.Errorf("more buckets %v, want 901 OwnershipTransferred", v.MoreBuckets)
	}
	if len(v.Alerts) != 1 || !strings.HasPrefix(v.Alerts[0], "1000 buckets stuck in OwnershipTransferred") {
		t.Errorf("alerts %q, want one for the 1000 buckets", v.Alerts)
	}
	bounded, _ := json.Marshal(v)
	all := operationView{ReshardingOperation: op}
	for _, m := range migs {
		all.Current = append(all.Current, n.viewMigration(context.Background(), "db", shards, m))
	}
	full, _ := json.Marshal(all)
	t.Logf("an operation's view with 1001 buckets in flight: %d bytes (every bucket listed: %d)", len(bounded), len(full))

	// Up to the bound, every bucket is listed, in bucket order.
	v = n.viewOperationOf(context.Background(), "db", shards, op, migs[:maxCurrentShown])
	if len(v.Current) != maxCurrentShown || v.MoreBuckets != nil || v.Current[0].Bucket != 0 {
		t.Errorf("%d buckets shown (first %d), more %v; want all %d, none more", len(v.Current), v.Current[0].Bucket, v.MoreBuckets, maxCurrentShown)
	}
}
