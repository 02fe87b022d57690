package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/shardnode/shardnode/bucket"
)

// WorkloadReshardSparse moves a whole shard's range of a sparse database
// (most of its buckets empty) to another shard under a write load over
// every bucket: what adding capacity to a database looks like. The empty
// buckets change owner in bulk, a few thousand spans per raft command,
// over a record the move fragments as it goes; the ones with data move
// one at a time. It measures how long the move takes and what it does to
// the writes, against the same load on the same cluster just before.
const WorkloadReshardSparse = "reshard-sparse-range"

// sparseDocsPerBucket sets reshard-sparse-range's dataset: ReshardBuckets
// times this many documents with random ids, so about as many buckets
// with data as documents (2^20 buckets).
const sparseDocsPerBucket = 10

// reshardSparse is reshard-sparse-range.
func (r *run) reshardSparse(ctx context.Context) []Row {
	w := WorkloadReshardSparse
	fail := func(err error) []Row {
		r.logf("%-12s %v", w, err)
		return []Row{makeRow(w, sysShardnode, "ops/s", nil, err, ""), makeRow(w, sysNoMove, "ops/s", nil, err, "")}
	}
	clients := r.o.ReshardClients
	e, err := r.newReshardEnv(ctx, w, clients, reshardRF)
	if err != nil {
		return fail(err)
	}
	defer e.close()
	n := int(r.o.ReshardBuckets) * sparseDocsPerBucket
	seed := r.nextSeed()
	loadTime, err := e.load(ctx, n, 1000, r.o.Senders, func(i int, buf []byte) (string, []byte) {
		return "s/" + strconv.Itoa(i), appendRecord(buf, newRand(seed, i), int64(i), true)
	})
	if err != nil {
		return fail(fmt.Errorf("load: %w", err))
	}
	ranges := bucket.EvenSplit(reshardShards)
	from, to := ranges.Span(0)
	withData := map[uint32]bool{}
	for i := range n {
		if b := bucket.ForID("s/" + strconv.Itoa(i)); b <= to {
			withData[b] = true
		}
	}
	r.logf("%-12s loaded %d docs in %.1fs; shard 0's %d buckets hold %d with data", w, n, loadTime.Seconds(), to-from+1, len(withData))
	es, err := e.events(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer es.close()

	// The load alone, then the same load while shard 0's whole range
	// moves to shard 1. The writers insert new documents with random ids.
	// Alone they write outside the range, which would otherwise hold
	// more buckets with data when the move starts; during the move into
	// every bucket, the range's included (from > to: none is left out).
	alone := func() fgResult {
		stop := make(chan struct{})
		t := time.AfterFunc(time.Duration(r.o.ReshardForegroundSeconds*float64(time.Second)), func() { close(stop) })
		defer t.Stop()
		return e.foreground(ctx, clients, 0, r.nextSeed(), from, to, nil, 0, stop)
	}()
	if alone.err != nil && len(alone.writes) == 0 {
		return fail(fmt.Errorf("load without a move: %w", alone.err))
	}
	stop := make(chan struct{})
	fgDone := make(chan fgResult, 1)
	go func() { fgDone <- e.foreground(ctx, clients, 0, r.nextSeed(), 1, 0, nil, 0, stop) }()
	cpu0 := e.cpuTime()
	id, start, err := e.startMove(ctx, from, to, 1)
	if err != nil {
		close(stop)
		<-fgDone
		return fail(err)
	}
	op, end, err := e.waitMove(ctx, es, id)
	close(stop)
	moving := <-fgDone
	cpu := e.cpuTime() - cpu0
	if err != nil {
		return fail(err)
	}
	if err := e.waitClean(ctx); err != nil {
		return fail(err)
	}
	var st struct {
		BucketsMigrated int64
	}
	if err := getJSON(ctx, e.hc, e.dbURL()+"/resharding/"+id, &st); err != nil {
		return fail(err)
	}
	// During the move: the writes that started between its start and end.
	during := moving
	during.writes = slices.DeleteFunc(slices.Clone(moving.writes), func(wr fgWrite) bool { return wr.start.Before(start) || wr.start.After(end) })
	during.elapsed = end.Sub(start)
	took := end.Sub(start)
	lat := func(f fgResult) (p50, p99, maxv float64) {
		ds := make([]time.Duration, len(f.writes))
		for i, wr := range f.writes {
			ds[i] = wr.end.Sub(wr.start)
		}
		return durationsMs(ds)
	}
	mp50, mp99, mmax := lat(during)
	ap50, ap99, amax := lat(alone)
	rows := []Row{during.row(w, sysShardnode), alone.row(w, sysNoMove)}
	rows[0].Reshard = &ReshardFigures{Buckets: st.BucketsMigrated, EmptyBuckets: op.BucketsDone - st.BucketsMigrated,
		TotalSeconds: took.Seconds(), MsPerBucket: ms(took) / float64(max(st.BucketsMigrated, 1)),
		DocumentsMoved: op.DocumentsMoved, BytesMoved: op.BytesMoved, LoadSeconds: loadTime.Seconds(), CPUCores: cores(cpu, took)}
	// Where a bucket with data spends its time under the load: the empty
	// ones flip in bulk and have no steps of their own.
	rows[0].Reshard.breakdown(timings(es.migrationSteps(), id))
	rows[0].Note = fmt.Sprintf("shard 0's whole range (%d buckets, %d with data of %d ~1 KiB docs in all shards) moved to shard 1 under %d writers inserting into random buckets: %.1f s, %d buckets moved with data one at a time (%.1f ms each over the move), %d empty ones flipped in bulk, %d docs moved; writes during the move p50 %.1f / p99 %.1f / max %.0f ms, %d failed%s; %s; process CPU %.2f cores; %d-node %s, RF %d",
		to-from+1, len(withData), n, clients, took.Seconds(), st.BucketsMigrated, ms(took)/float64(max(st.BucketsMigrated, 1)), op.BucketsDone-st.BucketsMigrated, op.DocumentsMoved,
		mp50, mp99, mmax, during.errors, firstError(during), rows[0].Reshard.phaseNote(), cores(cpu, took), reshardNodes, e.kind(), reshardRF)
	rows[1].Note = fmt.Sprintf("the same writers on the same cluster just before, writing outside the range, no move: p50 %.1f / p99 %.1f / max %.0f ms, %d failed%s", ap50, ap99, amax, alone.errors, firstError(alone))
	r.logf("%-12s %.1f s, %d buckets with data, writes p99 %.1f ms max %.0f ms (no move: p99 %.1f max %.0f)", w, took.Seconds(), st.BucketsMigrated, mp99, mmax, ap99, amax)
	return rows
}

// firstError is " (first: ERR)" when f has an error, else empty.
func firstError(f fgResult) string {
	if f.err == nil {
		return ""
	}
	return fmt.Sprintf(" (first: %v)", f.err)
}
