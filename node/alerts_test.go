package node

import (
	"context"
	"strings"
	"testing"
	"time"

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
