package raftfsm

import (
	"errors"
	"testing"
)

func migrationFixture(t *testing.T) *FSM {
	f := threeNodes(t)
	mustApply(t, f, 4, &CreateDatabase{Name: "db", Shards: 3, ReplicationFactor: 2})
	return f
}

func TestMigrationLifecycle(t *testing.T) {
	f := migrationFixture(t)
	const b = 10 // shard 0 owns 0..349524
	m := mustApply(t, f, 5, &StartBucketMigration{Database: "db", Bucket: b, SourceShard: 0, DestinationShard: 2}).Value.(*BucketMigration)
	if m.Status != MigrationMoving || m.MigrationIndex != 5 {
		t.Fatalf("started %+v", m)
	}
	// One active migration per source shard; one migration per bucket.
	if r := f.ApplyCommand(6, &StartBucketMigration{Database: "db", Bucket: 11, SourceShard: 0, DestinationShard: 1}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("second migration from shard 0: %v", r.Err)
	}
	if r := f.ApplyCommand(6, &StartBucketMigration{Database: "db", Bucket: b, SourceShard: 0, DestinationShard: 1}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("same bucket twice: %v", r.Err)
	}
	// Steps check the index and status.
	if r := f.ApplyCommand(7, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 5, Node: "C"}); !errors.Is(r.Err, ErrStale) {
		t.Fatalf("confirm while Moving: %v", r.Err)
	}
	if r := f.ApplyCommand(7, &SourceMigrationSendCompleted{Database: "db", Bucket: b, MigrationIndex: 4}); !errors.Is(r.Err, ErrStale) {
		t.Fatalf("wrong index: %v", r.Err)
	}
	mustApply(t, f, 8, &SourceMigrationSendCompleted{Database: "db", Bucket: b, MigrationIndex: 5, LastSourceChangeVector: "A:3-x", Documents: 7, Bytes: 700})
	if r := f.ApplyCommand(9, &SourceMigrationSendCompleted{Database: "db", Bucket: b, MigrationIndex: 5}); !errors.Is(r.Err, ErrStale) {
		t.Fatalf("retried send-completed: %v", r.Err)
	}
	// Shard 2 is on C and A.
	mustApply(t, f, 10, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 5, Node: "C"})
	mustApply(t, f, 11, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 5, Node: "C"}) // retry: no-op
	rec, _ := f.Record("db")
	if rec.ShardOf(b) != 0 || rec.Sharding.BucketMigrations[b].Status != MigrationMoved {
		t.Fatal("ownership flipped before every destination replica confirmed")
	}
	if r := f.ApplyCommand(12, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 5, Node: "B"}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("confirm from a non-member: %v", r.Err)
	}
	mustApply(t, f, 13, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 5, Node: "A"})
	rec, _ = f.Record("db")
	m = rec.Sharding.BucketMigrations[b]
	if rec.ShardOf(b) != 2 || m.Status != MigrationOwnershipTransferred || m.ConfirmationIndex != 13 {
		t.Fatalf("after last confirm: owner %d, %+v", rec.ShardOf(b), m)
	}
	if err := rec.Sharding.BucketRanges.Validate(); err != nil {
		t.Fatal(err)
	}
	if rec.ShardOf(b-1) != 0 || rec.ShardOf(b+1) != 0 {
		t.Fatal("neighbours moved")
	}
	// The source slot is free again once ownership moved.
	mustApply(t, f, 14, &StartBucketMigration{Database: "db", Bucket: 11, SourceShard: 0, DestinationShard: 1})
	// Cleanup by both source replicas (shard 0: A, B) removes the entry.
	mustApply(t, f, 15, &SourceMigrationCleanup{Database: "db", Bucket: b, MigrationIndex: 5, Node: "A"})
	mustApply(t, f, 16, &SourceMigrationCleanup{Database: "db", Bucket: b, MigrationIndex: 5, Node: "B"})
	rec, _ = f.Record("db")
	if _, ok := rec.Sharding.BucketMigrations[b]; ok {
		t.Fatal("entry not removed after every source replica cleaned up")
	}
	if r := f.ApplyCommand(17, &SourceMigrationCleanup{Database: "db", Bucket: b, MigrationIndex: 5, Node: "B"}); !errors.Is(r.Err, ErrStale) {
		t.Fatalf("cleanup retry after removal: %v", r.Err)
	}
}

func TestReshardingOperationCounts(t *testing.T) {
	f := migrationFixture(t)
	if r := f.ApplyCommand(5, &StartResharding{Database: "db", OperationID: "op", FromBucket: 10, ToBucket: 5, ToShard: 1}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("from > to: %v", r.Err)
	}
	if r := f.ApplyCommand(5, &StartResharding{Database: "db", OperationID: "op", FromBucket: 0, ToBucket: 9, ToShard: 7}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("unknown shard: %v", r.Err)
	}
	op := mustApply(t, f, 6, &StartResharding{Database: "db", OperationID: "op", FromBucket: 349520, ToBucket: 349529, ToShard: 1}).Value.(*ReshardingOperation)
	if op.BucketsTotal != 5 { // 349525..349529 are already on shard 1
		t.Fatalf("total %d", op.BucketsTotal)
	}
	if r := f.ApplyCommand(7, &StartResharding{Database: "db", OperationID: "op2", FromBucket: 349529, ToBucket: 349600, ToShard: 2}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("overlap: %v", r.Err)
	}
	// Empty buckets 349520..349523 flip at once; 349524 moves with data.
	mustApply(t, f, 8, &MoveEmptyBuckets{Database: "db", SourceShard: 0, DestinationShard: 1, Spans: []BucketSpan{{From: 349520, To: 349523}}, OperationID: "op"})
	mustApply(t, f, 9, &StartBucketMigration{Database: "db", Bucket: 349524, SourceShard: 0, DestinationShard: 1, OperationID: "op"})
	mustApply(t, f, 10, &SourceMigrationSendCompleted{Database: "db", Bucket: 349524, MigrationIndex: 9, Documents: 3, Bytes: 30})
	mustApply(t, f, 11, &DestinationMigrationConfirm{Database: "db", Bucket: 349524, MigrationIndex: 9, Node: "B"})
	mustApply(t, f, 12, &DestinationMigrationConfirm{Database: "db", Bucket: 349524, MigrationIndex: 9, Node: "C"})
	rec, _ := f.Record("db")
	o := rec.Sharding.Resharding["op"]
	if o.BucketsDone != 5 || o.BucketsMigrated != 1 || o.DocumentsMoved != 3 || o.Status != OperationRunning {
		t.Fatalf("op before cleanup %+v", o)
	}
	mustApply(t, f, 13, &SourceMigrationCleanup{Database: "db", Bucket: 349524, MigrationIndex: 9, Node: "A"})
	mustApply(t, f, 14, &SourceMigrationCleanup{Database: "db", Bucket: 349524, MigrationIndex: 9, Node: "B"})
	rec, _ = f.Record("db")
	if o := rec.Sharding.Resharding["op"]; o.Status != OperationCompleted {
		t.Fatalf("op after cleanup %+v", o)
	}
	if err := rec.Sharding.BucketRanges.Validate(); err != nil || rec.ShardOf(349520) != 1 || rec.ShardOf(349519) != 0 {
		t.Fatalf("ranges %+v %v", rec.Sharding.BucketRanges, err)
	}
}

// TestFinalPassIsRecordedOnceAfterTheFlip checks the sender's last pass:
// only after the flip, once, with what it needs, counted in the migration
// and its operation, and kept through a snapshot.
func TestFinalPassIsRecordedOnceAfterTheFlip(t *testing.T) {
	f := migrationFixture(t)
	const b = 349524
	mustApply(t, f, 5, &StartResharding{Database: "db", OperationID: "op", FromBucket: b, ToBucket: b, ToShard: 1})
	mustApply(t, f, 6, &StartBucketMigration{Database: "db", Bucket: b, SourceShard: 0, DestinationShard: 1, OperationID: "op"})
	pass := MigrationPass{ChangeVector: "A:9-x", SentThrough: map[string]uint64{"x": 9, "y": 4}, SentBy: "x", Node: "A"}
	final := &SourceMigrationFinalPass{Database: "db", Bucket: b, MigrationIndex: 6, Pass: pass, Documents: 2, Bytes: 20}
	if r := f.ApplyCommand(7, final); !errors.Is(r.Err, ErrStale) {
		t.Fatalf("final pass while Moving: %v", r.Err)
	}
	mustApply(t, f, 8, &SourceMigrationSendCompleted{Database: "db", Bucket: b, MigrationIndex: 6, LastSourceChangeVector: "A:5-x", Documents: 3, Bytes: 30})
	if r := f.ApplyCommand(9, final); !errors.Is(r.Err, ErrStale) {
		t.Fatalf("final pass while Moved: %v", r.Err)
	}
	mustApply(t, f, 10, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 6, Node: "B"})
	mustApply(t, f, 11, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 6, Node: "C"})
	for _, bad := range []*SourceMigrationFinalPass{
		{Database: "db", Bucket: b, MigrationIndex: 6, Pass: MigrationPass{ChangeVector: "A:9-x", SentBy: "x"}},
		{Database: "db", Bucket: b, MigrationIndex: 6, Pass: MigrationPass{ChangeVector: "A:9-x", Node: "A"}},
		{Database: "db", Bucket: b, MigrationIndex: 6, Pass: pass, Documents: -1},
	} {
		if r := f.ApplyCommand(12, bad); !errors.Is(r.Err, ErrInvalid) {
			t.Fatalf("final pass %+v: %v", bad, r.Err)
		}
	}
	mustApply(t, f, 13, final)
	pass.SentThrough["x"] = 99 // the record keeps its own copy
	if r := f.ApplyCommand(14, final); !errors.Is(r.Err, ErrStale) {
		t.Fatalf("second final pass: %v", r.Err)
	}
	rec, _ := f.Record("db")
	m := rec.Sharding.BucketMigrations[b]
	if m.FinalPass == nil || m.FinalPass.ChangeVector != "A:9-x" || m.FinalPass.SentThrough["x"] != 9 || m.FinalPass.Node != "A" ||
		m.Documents != 5 || m.Bytes != 50 || m.LastSourceChangeVector != "A:5-x" {
		t.Fatalf("migration after the final pass: %+v (pass %+v)", m, m.FinalPass)
	}
	if o := rec.Sharding.Resharding["op"]; o.DocumentsMoved != 5 || o.BytesMoved != 50 {
		t.Fatalf("operation counts %d docs, %d bytes; want 5, 50", o.DocumentsMoved, o.BytesMoved)
	}
	clone := rec.Clone()
	clone.Sharding.BucketMigrations[b].FinalPass.SentThrough["x"] = 1
	if rec.Sharding.BucketMigrations[b].FinalPass.SentThrough["x"] != 9 {
		t.Fatal("a clone shares the final pass")
	}
	if r, _ := snapshotRoundTrip(t, f).Record("db"); r.Sharding.BucketMigrations[b].FinalPass == nil {
		t.Fatal("the final pass did not survive a snapshot")
	}
}

func TestLeftoversMigrationTargetsTheOwner(t *testing.T) {
	f := migrationFixture(t)
	if r := f.ApplyCommand(5, &StartBucketMigration{Database: "db", Bucket: 3, SourceShard: 1, DestinationShard: 2, Leftovers: true}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("leftovers to a non-owner: %v", r.Err)
	}
	mustApply(t, f, 6, &StartBucketMigration{Database: "db", Bucket: 3, SourceShard: 1, DestinationShard: 0, Leftovers: true})
}

func TestAddShard(t *testing.T) {
	f := migrationFixture(t)
	n := mustApply(t, f, 5, &AddShard{Database: "db", Members: []string{"B", "C"}}).Value.(int)
	rec, _ := f.Record("db")
	if n != 3 || len(rec.Sharding.Shards) != 4 || rec.Sharding.BucketRanges.BucketsOf(3) != 0 {
		t.Fatalf("added %d: %+v", n, rec.Sharding)
	}
	if r := f.ApplyCommand(6, &AddShard{Database: "db", Members: []string{"Z"}}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("unknown member: %v", r.Err)
	}
}

// TestCancelResharding: a cancelled operation starts nothing more, its
// migration in flight still completes, and a second cancel is a conflict.
func TestCancelResharding(t *testing.T) {
	f := migrationFixture(t)
	mustApply(t, f, 5, &StartResharding{Database: "db", OperationID: "op", FromBucket: 0, ToBucket: 20, ToShard: 1})
	mustApply(t, f, 6, &StartBucketMigration{Database: "db", Bucket: 3, SourceShard: 0, DestinationShard: 1, OperationID: "op"})
	if r := f.ApplyCommand(7, &CancelResharding{Database: "db", OperationID: "nope"}); !errors.Is(r.Err, ErrOperationNotFound) {
		t.Fatalf("cancel of an unknown operation: %v", r.Err)
	}
	op := mustApply(t, f, 8, &CancelResharding{Meta: Meta{At: t0}, Database: "db", OperationID: "op"}).Value.(*ReshardingOperation)
	if op.Status != OperationCancelled || !op.EndedAt.Equal(t0) {
		t.Fatalf("cancelled %+v", op)
	}
	if r := f.ApplyCommand(9, &CancelResharding{Database: "db", OperationID: "op"}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("second cancel: %v", r.Err)
	}
	if r := f.ApplyCommand(10, &StartBucketMigration{Database: "db", Bucket: 4, SourceShard: 2, DestinationShard: 1, OperationID: "op"}); !errors.Is(r.Err, ErrStale) {
		t.Fatalf("migration for a cancelled operation: %v", r.Err)
	}
	if r := f.ApplyCommand(10, &MoveEmptyBuckets{Database: "db", SourceShard: 0, DestinationShard: 1, OperationID: "op", Spans: []BucketSpan{{From: 10, To: 12}}}); !errors.Is(r.Err, ErrStale) {
		t.Fatalf("empty buckets for a cancelled operation: %v", r.Err)
	}
	// The migration in flight goes on to the end.
	mustApply(t, f, 11, &SourceMigrationSendCompleted{Database: "db", Bucket: 3, MigrationIndex: 6, LastSourceChangeVector: "A:1-x"})
	mustApply(t, f, 12, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "B"})
	mustApply(t, f, 13, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "C"})
	rec, _ := f.Record("db")
	if rec.ShardOf(3) != 1 || rec.Sharding.Resharding["op"].Status != OperationCancelled || rec.Sharding.Resharding["op"].BucketsDone != 1 {
		t.Fatalf("after the last migration: owner %d, op %+v", rec.ShardOf(3), rec.Sharding.Resharding["op"])
	}
}

// TestOperationBackOverACancelledOnesBucketInFlight: an operation started
// after a cancel, back over the range, is not Completed while a bucket of
// the cancelled one is still on its way to another shard: it counts that
// bucket and completes only once it brought it back.
func TestOperationBackOverACancelledOnesBucketInFlight(t *testing.T) {
	f := migrationFixture(t)
	mustApply(t, f, 5, &StartResharding{Database: "db", OperationID: "there", FromBucket: 0, ToBucket: 20, ToShard: 1, AwaitsRange: true})
	mustApply(t, f, 6, &StartBucketMigration{Database: "db", Bucket: 3, SourceShard: 0, DestinationShard: 1, OperationID: "there"})
	mustApply(t, f, 7, &CancelResharding{Database: "db", OperationID: "there"})
	back := mustApply(t, f, 8, &StartResharding{Database: "db", OperationID: "back", FromBucket: 0, ToBucket: 20, ToShard: 0, AwaitsRange: true}).Value.(*ReshardingOperation)
	if back.Status != OperationRunning || back.BucketsTotal != 1 {
		t.Fatalf("operation back while bucket 3 leaves shard 0: %+v", back)
	}
	mustApply(t, f, 9, &SourceMigrationSendCompleted{Database: "db", Bucket: 3, MigrationIndex: 6, LastSourceChangeVector: "A:1-x"})
	mustApply(t, f, 10, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "B"})
	mustApply(t, f, 11, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "C"})
	mustApply(t, f, 12, &SourceMigrationCleanup{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "A"})
	mustApply(t, f, 13, &SourceMigrationCleanup{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "B"})
	rec, _ := f.Record("db")
	if op := rec.Sharding.Resharding["back"]; rec.ShardOf(3) != 1 || op.Status != OperationRunning {
		t.Fatalf("bucket 3 on shard %d, operation back %+v", rec.ShardOf(3), op)
	}
	mustApply(t, f, 14, &StartBucketMigration{Database: "db", Bucket: 3, SourceShard: 1, DestinationShard: 0, OperationID: "back"})
	mustApply(t, f, 15, &SourceMigrationSendCompleted{Database: "db", Bucket: 3, MigrationIndex: 14, LastSourceChangeVector: "B:1-y"})
	mustApply(t, f, 16, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 14, Node: "A"})
	mustApply(t, f, 17, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 14, Node: "B"})
	mustApply(t, f, 18, &SourceMigrationCleanup{Database: "db", Bucket: 3, MigrationIndex: 14, Node: "B"})
	mustApply(t, f, 19, &SourceMigrationCleanup{Database: "db", Bucket: 3, MigrationIndex: 14, Node: "C"})
	rec, _ = f.Record("db")
	if op := rec.Sharding.Resharding["back"]; rec.ShardOf(3) != 0 || op.Status != OperationCompleted || op.BucketsDone != op.BucketsTotal {
		t.Fatalf("bucket 3 on shard %d, operation back %+v", rec.ShardOf(3), op)
	}

	// A StartResharding logged before AwaitsRange replays as it first
	// applied: completed at once.
	g := migrationFixture(t)
	mustApply(t, g, 5, &StartResharding{Database: "db", OperationID: "there", FromBucket: 0, ToBucket: 20, ToShard: 1})
	mustApply(t, g, 6, &StartBucketMigration{Database: "db", Bucket: 3, SourceShard: 0, DestinationShard: 1, OperationID: "there"})
	mustApply(t, g, 7, &CancelResharding{Database: "db", OperationID: "there"})
	if op := mustApply(t, g, 8, &StartResharding{Database: "db", OperationID: "back", FromBucket: 0, ToBucket: 20, ToShard: 0}).Value.(*ReshardingOperation); op.Status != OperationCompleted {
		t.Fatalf("an operation logged without AwaitsRange: %+v", op)
	}
}

// TestSettledTotalOverACancelledOperation: an operation started with
// SettledTotal over a cancelled operation's range counts each bucket it
// will move once, so it ends Completed with BucketsDone == BucketsTotal:
// a bucket that already flipped off the target is not counted twice, and
// one still on its way onto the target is not counted at all. The same
// commands without SettledTotal replay with the older counts.
func TestSettledTotalOverACancelledOperation(t *testing.T) {
	for _, settled := range []bool{true, false} {
		// A bucket of the cancelled operation flipped away from the
		// target, its source not yet cleaned up: it comes back, once.
		f := migrationFixture(t)
		mustApply(t, f, 5, &StartResharding{Database: "db", OperationID: "there", FromBucket: 0, ToBucket: 20, ToShard: 1, AwaitsRange: true})
		mustApply(t, f, 6, &StartBucketMigration{Database: "db", Bucket: 3, SourceShard: 0, DestinationShard: 1, OperationID: "there"})
		mustApply(t, f, 7, &CancelResharding{Database: "db", OperationID: "there"})
		mustApply(t, f, 8, &SourceMigrationSendCompleted{Database: "db", Bucket: 3, MigrationIndex: 6, LastSourceChangeVector: "A:1-x"})
		mustApply(t, f, 9, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "B"})
		mustApply(t, f, 10, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "C"})
		back := mustApply(t, f, 11, &StartResharding{Database: "db", OperationID: "back", FromBucket: 0, ToBucket: 20, ToShard: 0, AwaitsRange: true, SettledTotal: settled}).Value.(*ReshardingOperation)
		if want := map[bool]int64{true: 1, false: 2}[settled]; back.BucketsTotal != want {
			t.Fatalf("SettledTotal %v: operation back over a flipped bucket counts %d, want %d", settled, back.BucketsTotal, want)
		}
		if !settled {
			continue
		}
		mustApply(t, f, 12, &SourceMigrationCleanup{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "A"})
		mustApply(t, f, 13, &SourceMigrationCleanup{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "B"})
		mustApply(t, f, 14, &StartBucketMigration{Database: "db", Bucket: 3, SourceShard: 1, DestinationShard: 0, OperationID: "back"})
		mustApply(t, f, 15, &SourceMigrationSendCompleted{Database: "db", Bucket: 3, MigrationIndex: 14, LastSourceChangeVector: "B:1-y"})
		mustApply(t, f, 16, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 14, Node: "A"})
		mustApply(t, f, 17, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 14, Node: "B"})
		mustApply(t, f, 18, &SourceMigrationCleanup{Database: "db", Bucket: 3, MigrationIndex: 14, Node: "B"})
		mustApply(t, f, 19, &SourceMigrationCleanup{Database: "db", Bucket: 3, MigrationIndex: 14, Node: "C"})
		rec, _ := f.Record("db")
		if op := rec.Sharding.Resharding["back"]; op.Status != OperationCompleted || op.BucketsDone != op.BucketsTotal {
			t.Fatalf("operation back after it moved bucket 3: %+v", op)
		}
	}
	for _, settled := range []bool{true, false} {
		// Cancel, then resume in the same direction while the cancelled
		// operation still moves a bucket onto the target: that bucket
		// is the cancelled operation's, not the new one's.
		f := migrationFixture(t)
		mustApply(t, f, 5, &StartResharding{Database: "db", OperationID: "there", FromBucket: 0, ToBucket: 20, ToShard: 1, AwaitsRange: true})
		mustApply(t, f, 6, &StartBucketMigration{Database: "db", Bucket: 3, SourceShard: 0, DestinationShard: 1, OperationID: "there"})
		mustApply(t, f, 7, &CancelResharding{Database: "db", OperationID: "there"})
		again := mustApply(t, f, 8, &StartResharding{Database: "db", OperationID: "again", FromBucket: 0, ToBucket: 20, ToShard: 1, AwaitsRange: true, SettledTotal: settled}).Value.(*ReshardingOperation)
		if want := map[bool]int64{true: 20, false: 21}[settled]; again.BucketsTotal != want {
			t.Fatalf("SettledTotal %v: resumed operation counts %d, want %d", settled, again.BucketsTotal, want)
		}
		if !settled {
			continue
		}
		mustApply(t, f, 9, &MoveEmptyBuckets{Database: "db", SourceShard: 0, DestinationShard: 1, OperationID: "again", Spans: []BucketSpan{{From: 0, To: 2}, {From: 4, To: 20}}})
		mustApply(t, f, 10, &SourceMigrationSendCompleted{Database: "db", Bucket: 3, MigrationIndex: 6, LastSourceChangeVector: "A:1-x"})
		mustApply(t, f, 11, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "B"})
		mustApply(t, f, 12, &DestinationMigrationConfirm{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "C"})
		mustApply(t, f, 13, &SourceMigrationCleanup{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "A"})
		mustApply(t, f, 14, &SourceMigrationCleanup{Database: "db", Bucket: 3, MigrationIndex: 6, Node: "B"})
		rec, _ := f.Record("db")
		if op := rec.Sharding.Resharding["again"]; rec.ShardOf(3) != 1 || op.Status != OperationCompleted || op.BucketsDone != op.BucketsTotal {
			t.Fatalf("bucket 3 on shard %d, resumed operation %+v", rec.ShardOf(3), op)
		}
		if op := rec.Sharding.Resharding["there"]; op.BucketsDone != 1 {
			t.Fatalf("cancelled operation %+v", op)
		}
	}
}
