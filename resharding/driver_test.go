package resharding

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// drawSpans draws up to n ascending, disjoint spans of at most maxLen+1
// buckets each, with gaps of up to 5 between them.
func drawSpans(t *rapid.T, n, maxLen int) []raftfsm.BucketSpan {
	var spans []raftfsm.BucketSpan
	at := uint32(0)
	for range rapid.IntRange(0, n).Draw(t, "n") {
		from := at + uint32(rapid.IntRange(0, 5).Draw(t, "gap"))
		to := from + uint32(rapid.IntRange(0, maxLen).Draw(t, "len"))
		spans = append(spans, raftfsm.BucketSpan{From: from, To: to})
		at = to + 1
	}
	return spans
}

// TestInSpans: the binary search agrees with a scan of every span.
func TestInSpans(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spans := drawSpans(t, 20, 5)
		b := uint32(rapid.IntRange(0, 250).Draw(t, "b"))
		want := false
		for _, sp := range spans {
			want = want || (b >= sp.From && b <= sp.To)
		}
		if got := InSpans(spans, b); got != want {
			t.Fatalf("InSpans(%v, %d) = %v", spans, b, got)
		}
	})
}

// TestSpansOverlap: the merge walk agrees with comparing every pair.
func TestSpansOverlap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := drawSpans(t, 12, 6), drawSpans(t, 12, 6)
		want := false
		for _, x := range a {
			for _, y := range b {
				want = want || (x.From <= y.To && y.From <= x.To)
			}
		}
		if got := SpansOverlap(a, b); got != want {
			t.Fatalf("SpansOverlap(%v, %v) = %v", a, b, got)
		}
	})
}

// TestWithoutBuckets: spans less held cover exactly the buckets of spans
// not in held, ascending, disjoint, none empty.
func TestWithoutBuckets(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spans := drawSpans(t, 10, 8)
		set := map[uint32]bool{}
		for range rapid.IntRange(0, 15).Draw(t, "held") {
			set[uint32(rapid.IntRange(0, 120).Draw(t, "b"))] = true
		}
		held := slices.Sorted(maps.Keys(set))
		got := WithoutBuckets(spans, held)
		for i, sp := range got {
			if sp.From > sp.To || (i > 0 && sp.From <= got[i-1].To) {
				t.Fatalf("WithoutBuckets(%v, %v) = %v: not ascending disjoint ranges", spans, held, got)
			}
		}
		for b := uint32(0); b <= 130; b++ {
			if want := InSpans(spans, b) && !set[b]; InSpans(got, b) != want {
				t.Fatalf("WithoutBuckets(%v, %v) = %v: bucket %d in it %v, want %v", spans, held, got, b, !want, want)
			}
		}
	})
}

// TestRefillLeasesEmptySpansBeforeTheirFlip: the empty buckets of an
// operation's range are leased on the source before the command that
// flips them is proposed, and a bucket the source's replicas say took
// writes since its statistics were read is left out of the flip and
// queued to move one at a time.
func TestRefillLeasesEmptySpansBeforeTheirFlip(t *testing.T) {
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid", Etag: 40}
	rec.Sharding.BucketRanges = bucket.Ranges{{BucketRangeStart: 0, ShardNumber: 0}, {BucketRangeStart: 1000, ShardNumber: 1}}
	op := &raftfsm.ReshardingOperation{ID: "op", FromBucket: 10, ToBucket: 20, ToShard: 1, Status: raftfsm.OperationRunning}
	c := &fakeCluster{rec: rec, spanHeld: []uint32{15, 500}} // 500: outside the spans asked
	d := &Driver{c: c, logger: slog.New(slog.DiscardHandler), queued: map[queueKey][]uint32{}, racers: map[queueKey][]raftfsm.BucketSpan{}}
	q, err := d.refill(context.Background(), "db", rec, op, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(q, []uint32{15}) {
		t.Fatalf("queued %v, want the bucket that took writes, 15", q)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.spanAsks) != 1 || c.spanAsks[0].proposed != 0 || !slices.Equal(c.spanAsks[0].spans, []raftfsm.BucketSpan{{From: 10, To: 20}}) {
		t.Fatalf("leases asked %+v, want 10-20 once, before any proposal", c.spanAsks)
	}
	if len(c.proposed) != 1 {
		t.Fatalf("proposed %d commands, want one flip", len(c.proposed))
	}
	mv, ok := c.proposed[0].(*raftfsm.MoveEmptyBuckets)
	if !ok || !slices.Equal(mv.Spans, []raftfsm.BucketSpan{{From: 10, To: 14}, {From: 16, To: 20}}) || mv.DestinationShard != 1 {
		t.Fatalf("proposed %+v, want the spans 10-14 and 16-20 flipped to shard 1", c.proposed[0])
	}
}

// TestRefillFlipsOnlyWhatTheLeasesCover: the flip of leased empty spans
// is proposed with a deadline at the leases' FlipBy (committed later, a
// replica's lease could end while its node still takes writes into them
// without knowing of the flip), and a lease some replica did not give
// flips nothing: the refill ends it on the others, queues the buckets
// with data, and fails only when it has nothing else to do, to be retried.
func TestRefillFlipsOnlyWhatTheLeasesCover(t *testing.T) {
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid", Etag: 40}
	rec.Sharding.BucketRanges = bucket.Ranges{{BucketRangeStart: 0, ShardNumber: 0}, {BucketRangeStart: 1000, ShardNumber: 1}}
	op := &raftfsm.ReshardingOperation{ID: "op", FromBucket: 10, ToBucket: 20, ToShard: 1, Status: raftfsm.OperationRunning}
	by := time.Now().Add(2 * time.Second).Round(0)
	c := &fakeCluster{rec: rec, spanFlipBy: by}
	d := &Driver{c: c, logger: slog.New(slog.DiscardHandler), queued: map[queueKey][]uint32{}, racers: map[queueKey][]raftfsm.BucketSpan{}}
	if _, err := d.refill(context.Background(), "db", rec, op, 0); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	if len(c.proposeDeadlines) != 1 || !c.proposeDeadlines[0].Equal(by) {
		t.Fatalf("flip proposed with deadlines %v, want the leases' FlipBy %v", c.proposeDeadlines, by)
	}
	c.mu.Unlock()

	for _, full := range []bool{false, true} {
		c := &fakeCluster{rec: rec, spanErr: errors.New("member C: context deadline exceeded")}
		if full {
			c.stats = []storage.BucketStats{{Bucket: 12, DocumentsCount: 3}}
		}
		d := &Driver{c: c, logger: slog.New(slog.DiscardHandler), queued: map[queueKey][]uint32{}, racers: map[queueKey][]raftfsm.BucketSpan{}}
		q, err := d.refill(context.Background(), "db", rec, op, 0)
		if full && (err != nil || !slices.Equal(q, []uint32{12})) {
			t.Fatalf("refill with a bucket with data and a lease not given: %v, %v; want 12 queued and no error", q, err)
		}
		if !full && err == nil {
			t.Fatalf("refill with nothing but empty buckets and a lease not given: no error, want one to retry by")
		}
		c.mu.Lock()
		if len(c.proposed) != 0 {
			t.Fatalf("proposed %v with a lease not given, want nothing", c.proposed)
		}
		if len(c.released) != 1 {
			t.Fatalf("released %v, want the spans asked for", c.released)
		}
		c.mu.Unlock()
	}
}

// TestUnflippedEmptyBucketsAreTriedAgainSoon: empty buckets left unflipped
// because a source replica gave no lease (a node just killed) are leased
// and flipped again at the first step after reflipEvery, between buckets
// with data, not once every bucket with data has moved (minutes).
func TestUnflippedEmptyBucketsAreTriedAgainSoon(t *testing.T) {
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid", Etag: 40}
	rec.Sharding.BucketRanges = bucket.Ranges{{BucketRangeStart: 0, ShardNumber: 0}, {BucketRangeStart: 1000, ShardNumber: 1}}
	op := &raftfsm.ReshardingOperation{ID: "op", FromBucket: 10, ToBucket: 20, ToShard: 1, Status: raftfsm.OperationRunning}
	c := &fakeCluster{rec: rec, spanErr: errors.New("member C: context deadline exceeded"),
		stats: []storage.BucketStats{{Bucket: 12, DocumentsCount: 3}, {Bucket: 17, DocumentsCount: 1}}}
	d := &Driver{c: c, logger: slog.New(slog.DiscardHandler), queued: map[queueKey][]uint32{}, racers: map[queueKey][]raftfsm.BucketSpan{}}
	flips := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := 0
		for _, cmd := range c.proposed {
			if _, ok := cmd.(*raftfsm.MoveEmptyBuckets); ok {
				n++
			}
		}
		return n
	}
	ctx := context.Background()
	if err := d.advance(ctx, "db", rec, op, 0); err != nil {
		t.Fatal(err)
	}
	if flips() != 0 {
		t.Fatal("empty buckets flipped without every replica's lease")
	}
	// The replica answers now; before reflipEvery the queue goes on.
	c.mu.Lock()
	c.spanErr = nil
	c.mu.Unlock()
	if err := d.advance(ctx, "db", rec, op, 0); err != nil {
		t.Fatal(err)
	}
	if flips() != 0 {
		t.Fatal("empty buckets tried again before reflipEvery")
	}
	d.reflip[queueKey{"op", 0}] = time.Now().Add(-reflipEvery)
	if err := d.advance(ctx, "db", rec, op, 0); err != nil {
		t.Fatal(err)
	}
	if flips() != 1 {
		t.Fatalf("%d flips after reflipEvery, want the empty buckets flipped once", flips())
	}
	if _, ok := d.reflip[queueKey{"op", 0}]; ok {
		t.Fatal("a flip that went through is still marked to be tried again")
	}
}

// TestRefillReleasesTheLeaseOfAFlipNotCommitted: when the command that
// flips leased empty spans fails (no leader, a timeout) or is refused (a
// bucket began migrating), the driver ends the source's leases on them at
// once, so their writes do not wait out the lease's window; a flip that
// commits releases nothing. An error other than a conflict still fails
// the refill, to be retried.
func TestRefillReleasesTheLeaseOfAFlipNotCommitted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		wantErr bool
	}{{"committed", nil, false}, {"refused", raftfsm.ErrConflict, false}, {"failed", errors.New("no leader"), true}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid", Etag: 40}
			rec.Sharding.BucketRanges = bucket.Ranges{{BucketRangeStart: 0, ShardNumber: 0}, {BucketRangeStart: 1000, ShardNumber: 1}}
			op := &raftfsm.ReshardingOperation{ID: "op", FromBucket: 10, ToBucket: 20, ToShard: 1, Status: raftfsm.OperationRunning}
			c := &fakeCluster{rec: rec, spanHeld: []uint32{15}, proposeErr: tc.err}
			d := &Driver{c: c, logger: slog.New(slog.DiscardHandler), queued: map[queueKey][]uint32{}, racers: map[queueKey][]raftfsm.BucketSpan{}}
			_, err := d.refill(context.Background(), "db", rec, op, 0)
			if (err != nil) != tc.wantErr {
				t.Fatalf("refill: %v, want an error %v", err, tc.wantErr)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			want := [][]raftfsm.BucketSpan{{{From: 10, To: 14}, {From: 16, To: 20}}}
			if tc.err == nil {
				want = nil
			}
			if !slices.EqualFunc(c.released, want, slices.Equal) {
				t.Fatalf("released %v, want %v", c.released, want)
			}
		})
	}
}

// TestDriverHoldsNewBucketsWhileTooManyAwaitCleanup: with as many moved
// buckets waiting for their source cleanup as MaxAwaitingCleanup allows
// (a source node down: each stays in the record until it is back or
// removed), the driver starts no new bucket of a running operation; below
// the bound, or with no bound, it goes on with the next one.
func TestDriverHoldsNewBucketsWhileTooManyAwaitCleanup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int
		starts bool
	}{{"at the bound", 2, false}, {"below it", 3, true}, {"no bound", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid", Etag: 40}
			op := &raftfsm.ReshardingOperation{ID: "op", FromBucket: 10, ToBucket: 20, ToShard: 1, Status: raftfsm.OperationRunning}
			rec.Sharding.Resharding = map[string]*raftfsm.ReshardingOperation{"op": op}
			// Buckets 10 and 11 flipped (the range starts at 12 on shard 0
			// for the driver) and wait for a source member's cleanup.
			rec.Sharding.BucketRanges = bucket.Ranges{{BucketRangeStart: 0, ShardNumber: 0}, {BucketRangeStart: 10, ShardNumber: 1}, {BucketRangeStart: 12, ShardNumber: 0}, {BucketRangeStart: 1000, ShardNumber: 1}}
			rec.Sharding.BucketMigrations = map[uint32]*raftfsm.BucketMigration{
				10: {Bucket: 10, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationOwnershipTransferred, MigrationIndex: 5, OperationID: "op"},
				11: {Bucket: 11, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationOwnershipTransferred, MigrationIndex: 7, OperationID: "op"},
			}
			c := &fakeCluster{rec: rec, maxAwaiting: tc.limit,
				stats: []storage.BucketStats{{Bucket: 12, DocumentsCount: 3}, {Bucket: 17, DocumentsCount: 1}}}
			d := &Driver{c: c, logger: slog.New(slog.DiscardHandler), queued: map[queueKey][]uint32{}, racers: map[queueKey][]raftfsm.BucketSpan{}, running: map[opKey]bool{}}
			if err := d.step(context.Background(), "db"); err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			var started []uint32
			for _, cmd := range c.proposed {
				if s, ok := cmd.(*raftfsm.StartBucketMigration); ok {
					started = append(started, s.Bucket)
				}
			}
			if tc.starts && !slices.Equal(started, []uint32{12}) {
				t.Fatalf("started %v (proposed %d commands), want bucket 12 next", started, len(c.proposed))
			}
			if !tc.starts && len(c.proposed) != 0 {
				t.Fatalf("proposed %d commands (started %v) with 2 buckets awaiting cleanup at a bound of 2, want none", len(c.proposed), started)
			}
			if got := d.held["db"]; got == tc.starts {
				t.Fatalf("held %v, want %v", got, !tc.starts)
			}
		})
	}
}

// TestDriverStepsWhenItsNodeBecomesLeader: a node that becomes the raft
// leader while no command is being applied (the old leader died after an
// operation's empty buckets flipped, before a bucket with data started)
// goes on with the operation when told (Kick), not at the next unrelated
// change of the record (a QA run: a range move stood still for 4.5
// minutes after a kill -9 of the leader, until a database was created).
func TestDriverStepsWhenItsNodeBecomesLeader(t *testing.T) {
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid", Etag: 40}
	rec.Sharding.BucketRanges = bucket.Ranges{{BucketRangeStart: 0, ShardNumber: 0}, {BucketRangeStart: 1000, ShardNumber: 1}}
	op := &raftfsm.ReshardingOperation{ID: "op", FromBucket: 10, ToBucket: 20, ToShard: 1, Status: raftfsm.OperationRunning}
	rec.Sharding.Resharding = map[string]*raftfsm.ReshardingOperation{"op": op}
	c := &fakeCluster{rec: rec, stats: []storage.BucketStats{{Bucket: 12, DocumentsCount: 3}}}
	d := NewDriver(c, func() []string { return []string{"db"} }, nil)
	defer d.Close()
	started := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, cmd := range c.proposed {
			if _, ok := cmd.(*raftfsm.StartBucketMigration); ok {
				return true
			}
		}
		return false
	}
	asked := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.leaderAsked > 0
	}
	waitUntil(t, 5*time.Second, "the driver's first look, as a follower", asked)
	c.mu.Lock()
	c.leader = true
	c.mu.Unlock()
	d.Kick()
	waitUntil(t, 5*time.Second, "the new leader's driver to start a bucket after Kick", started)
}

// waitUntil fails t unless cond holds within d, looking every millisecond.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, d)
		}
		time.Sleep(time.Millisecond)
	}
}
