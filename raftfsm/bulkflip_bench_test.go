package raftfsm

import (
	"testing"

	"github.com/shardnode/shardnode/bucket"
)

// fragmented returns an FSM whose database "db" has shard 0's buckets
// 0..n*stride split by a bucket of shard 2 every stride buckets: what a
// move leaves behind when it flips the empty buckets in bulk and moves
// the ones with data one at a time. spans are shard 0's pieces between.
func fragmented(tb testing.TB, n, stride int) (*FSM, []BucketSpan) {
	f := New()
	for i, tag := range []string{"A", "B", "C"} {
		f.ApplyCommand(uint64(i+1), &AddNode{Meta: Meta{At: t0}, Node: NodeInfo{Tag: tag, HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:2"}})
	}
	if r := f.ApplyCommand(4, &CreateDatabase{Meta: Meta{At: t0}, Name: "db", Shards: 3, ReplicationFactor: 1}); r.Err != nil {
		tb.Fatal(r.Err)
	}
	rec := f.state.Databases["db"]
	var rs bucket.Ranges
	var spans []BucketSpan
	for i := range n {
		at := uint32(i * stride)
		rs = append(rs, bucket.Range{BucketRangeStart: at, ShardNumber: 0}, bucket.Range{BucketRangeStart: at + uint32(stride) - 1, ShardNumber: 2})
		spans = append(spans, BucketSpan{From: at, To: at + uint32(stride) - 2})
	}
	end := uint32(n * stride)
	rs = append(rs, bucket.Range{BucketRangeStart: end, ShardNumber: 0})
	for _, e := range rec.Sharding.BucketRanges[1:] {
		if e.BucketRangeStart > end {
			rs = append(rs, e)
		}
	}
	if err := rs.Validate(); err != nil {
		tb.Fatal(err)
	}
	rec.Sharding.BucketRanges = rs
	return f, spans
}

// BenchmarkApplyMoveEmptyBuckets applies one bulk flip of MaxLeaseSpans
// spans to a record of ~16k range entries, as a large move makes.
func BenchmarkApplyMoveEmptyBuckets(b *testing.B) {
	const spans = 4096
	for b.Loop() {
		b.StopTimer()
		f, sp := fragmented(b, 8192, 40)
		if r := f.ApplyCommand(5, &StartResharding{Meta: Meta{At: t0}, Database: "db", OperationID: "op", FromBucket: 0, ToBucket: 349524, ToShard: 1}); r.Err != nil {
			b.Fatal(r.Err)
		}
		c := &MoveEmptyBuckets{Meta: Meta{At: t0}, Database: "db", SourceShard: 0, DestinationShard: 1, OperationID: "op", Spans: sp[:spans]}
		b.StartTimer()
		if r := f.ApplyCommand(6, c); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}
