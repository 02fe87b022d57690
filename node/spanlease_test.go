package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// TestSpanLeaseRefusesWritesIntoEmptySpansUntilTheirFlip: a source
// replica that leased spans about to flip in bulk names those of their
// buckets that hold items, refuses routed writes into the others with a
// retryable BucketLeaving (and writes outside the spans not), and once its
// record shows the flip, the write guard decides: the new owner is named.
func TestSpanLeaseRefusesWritesIntoEmptySpansUntilTheirFlip(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	rec := n.recordOf("db")
	// Two ids of shard 0 in different buckets: one written before the
	// lease, one whose bucket stays empty; and one of shard 0 outside
	// the spans.
	var full, empty, outside string
	for i := 0; full == "" || empty == "" || outside == ""; i++ {
		id := fmt.Sprintf("users/%d", i)
		b := bucket.ForID(id)
		switch {
		case rec.ShardOf(b) != 0:
		case full == "":
			full = id
		case empty == "" && b != bucket.ForID(full):
			empty = id
		case outside == "" && b != bucket.ForID(full) && b != bucket.ForID(empty):
			outside = id
		}
	}
	c.must(201, "PUT", "/databases/db/docs?id="+full, `{"v":1}`)
	bf, be := bucket.ForID(full), bucket.ForID(empty)
	spans := []raftfsm.BucketSpan{{From: min(bf, be), To: min(bf, be)}, {From: max(bf, be), To: max(bf, be)}}
	ctx := context.Background()
	r, err := n.leaseSpans(ctx, spanLeaseRequest{DB: "db", Shard: 0, To: 1, Spans: spans})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Held, []uint32{bf}) {
		t.Fatalf("the lease names %v as holding items, want %d", r.Held, bf)
	}
	l, err := n.local("db", 0)
	if err != nil {
		t.Fatal(err)
	}
	l.routed = true
	put := func(id string) error {
		_, err := l.write(ctx, []storage.Op{{Kind: storage.OpPut, ID: id, Body: []byte(`{"v":2}`)}}, writeConcern{Replicas: 1, Timeout: time.Second}, 0)
		return err
	}
	var ae *apiError
	if err := put(empty); !errors.As(err, &ae) || ae.Type != "BucketLeaving" || !servesSoon(err) || !asksAgain(err) {
		t.Fatalf("a write into a leased empty bucket: %v, want a retryable BucketLeaving to be asked again of this member", err)
	}
	if err := put(outside); err != nil {
		t.Fatalf("a write outside the leased spans: %v", err)
	}
	// The bucket it named is left out of the flip, and out of the lease:
	// its writes do not wait for the lease's window.
	if err := put(full); err != nil {
		t.Fatalf("a write into the leased bucket that holds items: %v", err)
	}
	// The flip: from then on the write guard names the new owner.
	if err := n.propose(ctx, &raftfsm.MoveEmptyBuckets{Meta: raftfsm.Meta{At: time.Now().UTC()}, Database: "db", SourceShard: 0, DestinationShard: 1,
		Spans: []raftfsm.BucketSpan{{From: be, To: be}}, OperationID: "op"}); err != nil {
		t.Fatal(err)
	}
	if err := put(empty); !errors.As(err, &ae) || ae.Type != "BucketNotOwned" || ae.Owner == nil || ae.Owner.Shard != 1 {
		t.Fatalf("a write into the flipped bucket: %v, want BucketNotOwned naming shard 1", err)
	}
	c.must(201, "PUT", "/databases/db/docs?id="+empty, `{"v":3}`) // routed to its new owner
	if n.spanLeases.n.Load() != 0 {
		t.Fatalf("%d span leases left after their flip", n.spanLeases.n.Load())
	}
	// Bad leases change nothing.
	for _, bad := range [][]raftfsm.BucketSpan{nil, {{From: 5, To: 4}}, {{From: 1, To: 3}, {From: 3, To: 4}}, {{From: 0, To: bucket.Count}}} {
		if _, err := n.leaseSpans(ctx, spanLeaseRequest{DB: "db", Shard: 0, To: 1, Spans: bad}); !errors.As(err, &ae) || ae.Status != 400 {
			t.Fatalf("lease of spans %v: %v, want a 400", bad, err)
		}
	}
}

// TestSpanLeaseReleasedWhenItsFlipDoesNotCommit: a lease on spans whose
// bulk flip failed ends when the driver says so (opSpanRelease), even
// when the driver names the spans less buckets other replicas found
// written, and the spans' writes go through at once instead of waiting
// out the lease's window; a lease of another database is left alone, and
// bad spans are a 400 that releases nothing.
func TestSpanLeaseReleasedWhenItsFlipDoesNotCommit(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	c.must(201, "PUT", "/admin/databases/db2", `{"Shards": 2}`)
	rec := n.recordOf("db")
	var id string
	for i := 0; id == ""; i++ {
		if cand := fmt.Sprintf("users/%d", i); rec.ShardOf(bucket.ForID(cand)) == 0 {
			id = cand
		}
	}
	b := bucket.ForID(id)
	ctx := context.Background()
	lease := func(db string, spans []raftfsm.BucketSpan) {
		t.Helper()
		if _, err := n.leaseSpans(ctx, spanLeaseRequest{DB: db, Shard: 0, To: 1, Spans: spans}); err != nil {
			t.Fatal(err)
		}
	}
	lease("db", []raftfsm.BucketSpan{{From: b, To: b + 3}})
	lease("db2", []raftfsm.BucketSpan{{From: b, To: b}})
	l, err := n.local("db", 0)
	if err != nil {
		t.Fatal(err)
	}
	l.routed = true
	put := func() error {
		_, err := l.write(ctx, []storage.Op{{Kind: storage.OpPut, ID: id, Body: []byte(`{"v":1}`)}}, writeConcern{Replicas: 1, Timeout: time.Second}, 0)
		return err
	}
	var ae *apiError
	if err := put(); !errors.As(err, &ae) || ae.Type != "BucketLeaving" {
		t.Fatalf("a write into the leased span: %v, want BucketLeaving", err)
	}
	release := func(spans []raftfsm.BucketSpan) (int, error) {
		data, _ := json.Marshal(spanLeaseRequest{DB: "db", Shard: 0, Spans: spans})
		r, err := n.serveSpanRelease(ctx, data)
		if err != nil {
			return 0, err
		}
		return r.(struct{ Released int }).Released, nil
	}
	if _, err := release([]raftfsm.BucketSpan{{From: 9, To: 3}}); !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("release of a bad span: %v, want a 400", err)
	}
	if got, err := release([]raftfsm.BucketSpan{{From: b + 4, To: b + 10}}); err != nil || got != 0 {
		t.Fatalf("release of spans beside the lease's: %d leases, %v; want none", got, err)
	}
	if got, err := release([]raftfsm.BucketSpan{{From: b + 2, To: b + 3}, {From: b + 5, To: b + 9}}); err != nil || got != 1 {
		t.Fatalf("release of spans that share a bucket with the lease's: %d leases, %v; want 1", got, err)
	}
	if err := put(); err != nil {
		t.Fatalf("a write into the span after its lease was released: %v", err)
	}
	if got := n.spanLeases.n.Load(); got != 1 {
		t.Fatalf("%d span leases left, want db2's", got)
	}
}

// TestLeaseEmptySpansFailsWhenAReplicaGivesNoAnswer: a replica that does
// not answer its lease in time (here: a write that passed its write guard
// is still committing) makes LeaseEmptySpans an error, so the driver does
// not flip spans into which that replica may still take writes; once it
// answers, the lease names the buckets it holds items in and a FlipBy
// that leaves the margin before the earliest lease's window ends.
func TestLeaseEmptySpansFailsWhenAReplicaGivesNoAnswer(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	rec := n.recordOf("db")
	var id string
	for i := 0; id == ""; i++ {
		if cand := fmt.Sprintf("users/%d", i); rec.ShardOf(bucket.ForID(cand)) == 0 {
			id = cand
		}
	}
	c.must(201, "PUT", "/databases/db/docs?id="+id, `{"v":1}`)
	b := bucket.ForID(id)
	spans := []raftfsm.BucketSpan{{From: b, To: b + 2}}
	ctx := context.Background()
	fence := n.replicas.fence("db", 0)
	g := fence.enter()
	if _, err := (reshardCluster{n}).LeaseEmptySpans(ctx, "db", 0, 1, spans); err == nil {
		fence.exit(g)
		t.Fatal("a lease the replica could not answer within its bound: no error")
	}
	fence.exit(g)
	asked := time.Now()
	lease, err := (reshardCluster{n}).LeaseEmptySpans(ctx, "db", 0, 1, spans)
	if err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	if !slices.Equal(lease.Held, []uint32{b}) {
		t.Fatalf("lease names %v as holding items, want %d", lease.Held, b)
	}
	// Counted from the ask, which the replica's window follows.
	if d := spanLeaseWindow - sourceLeaseMargin; lease.FlipBy.Before(asked.Add(d)) || lease.FlipBy.After(answered.Add(d)) {
		t.Fatalf("lease's FlipBy is %v after the ask, want %v", lease.FlipBy.Sub(asked), d)
	}
}
