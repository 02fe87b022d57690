package bench

import (
	"context"
	"fmt"
	"time"
)

// WorkloadReshardTwoSources moves small buckets off two source shards at
// once, in two operations running together, beside the same cluster
// moving as many buckets per source off one shard alone: whether
// operations on different source shards add up, as a shard added to a
// database takes buckets from each of the others.
const WorkloadReshardTwoSources = "reshard-two-sources"

// sysOneSource labels reshard-two-sources' baseline: one operation, one
// source shard, on the same cluster just before.
const sysOneSource = "one-source"

// moveSet is one measured move of small buckets: operations started
// together, each over the span of one set of non-empty buckets.
type moveSet struct {
	fig        *ReshardFigures
	s          sample
	migrations int // the migrations the operations ran, timed or not
}

// reshardTwoSources is reshard-two-sources. Shard 0 holds 2k non-empty
// buckets and shard 1 k (k = half of --reshard-buckets), ten small
// documents each. The lower k of shard 0 move to shard 2 first, alone;
// then the upper k of shard 0 and shard 1's k move to shard 2 at once, in
// two operations. Each phase's throughput counts non-empty buckets.
func (r *run) reshardTwoSources(ctx context.Context) []Row {
	w := WorkloadReshardTwoSources
	fail := func(err error) []Row {
		r.logf("%-12s %v", w, err)
		return []Row{makeRow(w, sysShardnode, "buckets/s", nil, err, ""), makeRow(w, sysOneSource, "buckets/s", nil, err, "")}
	}
	k := max(1, int(r.o.ReshardBuckets)/2)
	e, err := r.newReshardEnv(ctx, w, 16, reshardRF)
	if err != nil {
		return fail(err)
	}
	defer e.close()
	tenants0, buckets0, err := e.pickTenants(ctx, "a/", 2*k, 0)
	if err != nil {
		return fail(err)
	}
	tenants1, buckets1, err := e.pickTenants(ctx, "b/", k, 1)
	if err != nil {
		return fail(err)
	}
	tenants := append(tenants0, tenants1...)
	seed := r.nextSeed()
	loadTime, err := e.load(ctx, len(tenants)*reshardDocsPerBkt, 1000, r.o.Senders, func(i int, buf []byte) (string, []byte) {
		return smallDoc(seed, tenants, i, buf)
	})
	if err != nil {
		return fail(fmt.Errorf("load: %w", err))
	}
	r.logf("%-12s loaded %d buckets × %d docs in %.1fs", w, len(tenants), reshardDocsPerBkt, loadTime.Seconds())
	es, err := e.events(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer es.close()
	one, err := e.moveSets(ctx, es, buckets0[:k])
	if err != nil {
		return fail(fmt.Errorf("one source: %w", err))
	}
	two, err := e.moveSets(ctx, es, buckets0[k:], buckets1)
	if err != nil {
		return fail(fmt.Errorf("two sources: %w", err))
	}
	for _, m := range []*moveSet{one, two} {
		if m.migrations != int(m.fig.Buckets) || m.fig.Timed == 0 {
			return fail(fmt.Errorf("%d migrations (%d timed on the event stream) for %d non-empty buckets", m.migrations, m.fig.Timed, m.fig.Buckets))
		}
		m.fig.LoadSeconds = loadTime.Seconds()
	}
	if err := e.checkPlacement(ctx, buckets0, buckets1); err != nil {
		return fail(err)
	}
	rows := []Row{two.row(w, sysShardnode), one.row(w, sysOneSource)}
	rows[0].Note = fmt.Sprintf("%d non-empty buckets of %d ~1 KiB docs moved to shard 2 in two operations at once, %d off shard 0 and %d off shard 1: %.1f s, %.1f ms per non-empty bucket, per bucket p50 %.1f / p99 %.1f ms (%s); process CPU %.2f cores; %d-node %s, RF %d",
		2*k, reshardDocsPerBkt, k, k, two.fig.TotalSeconds, two.fig.MsPerBucket, two.fig.BucketP50Ms, two.fig.BucketP99Ms, two.fig.phaseNote(), two.fig.CPUCores, reshardNodes, e.kind(), reshardRF)
	rows[1].Note = fmt.Sprintf("the same cluster just before, one operation off shard 0 alone: %d non-empty buckets, %.1f s, %.1f ms per non-empty bucket, per bucket p50 %.1f / p99 %.1f ms (%s); process CPU %.2f cores; sn/base = two sources' buckets/s over one source's (2 if they add up)",
		k, one.fig.TotalSeconds, one.fig.MsPerBucket, one.fig.BucketP50Ms, one.fig.BucketP99Ms, one.fig.phaseNote(), one.fig.CPUCores)
	r.logf("%-12s one source %.1f ms/bucket, two sources %.1f ms/bucket", w, one.fig.MsPerBucket, two.fig.MsPerBucket)
	return rows
}

// moveSets starts one operation per set of non-empty buckets (each over
// the set's span, to shard 2), waits until every one completed and its
// cleanups are done, and measures them together: from the first POST to
// the last operation's end. Its caller judges the migrations it counts.
func (e *reshardEnv) moveSets(ctx context.Context, es *eventStream, sets ...[]uint32) (*moveSet, error) {
	cpu0 := e.cpuTime()
	var ids []string
	var start time.Time
	for i, set := range sets {
		from, to := spanOf(set)
		id, t, err := e.startMove(ctx, from, to, reshardShards-1)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			start = t
		}
		ids = append(ids, id)
	}
	m := &moveSet{fig: &ReshardFigures{}}
	var ops []operationState
	var end time.Time
	for _, id := range ids {
		op, t, err := e.waitMove(ctx, es, id)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
		if t.After(end) {
			end = t
		}
	}
	total := end.Sub(start)
	cpu := e.cpuTime() - cpu0
	if err := e.waitClean(ctx); err != nil {
		return nil, err
	}
	steps := es.migrationSteps()
	var all [][]migrationTiming
	n := 0
	var per []time.Duration
	var bytes int64
	for i, id := range ids {
		n += len(sets[i])
		bytes += ops[i].BytesMoved
		m.fig.DocumentsMoved += ops[i].DocumentsMoved
		m.fig.EmptyBuckets += ops[i].BucketsTotal - int64(len(sets[i]))
		ts := timings(steps, id)
		m.migrations += len(ts)
		all = append(all, ts)
		for _, t := range ts {
			if d, ok := t.transfer(); ok {
				per = append(per, d)
			} else {
				m.fig.Coalesced++
			}
		}
	}
	m.fig.breakdown(all...)
	m.fig.Buckets, m.fig.BytesMoved = int64(n), bytes
	m.fig.TotalSeconds, m.fig.MsPerBucket = total.Seconds(), ms(total)/float64(n)
	m.fig.CPUCores = cores(cpu, total)
	m.fig.Timed = len(per)
	m.s.addRound(roundResult{ops: int64(len(per)), units: int64(n), bytes: bytes, elapsed: total, lat: per})
	m.fig.BucketP50Ms, m.fig.BucketP99Ms, m.fig.BucketMaxMs = durationsMs(per)
	return m, nil
}

// phaseNote says the per-phase medians.
func (f *ReshardFigures) phaseNote() string {
	return fmt.Sprintf("medians Moving→Moved %.1f ms, Moved→OwnershipTransferred %.1f ms, flip→next Moving %.1f ms", f.SendP50Ms, f.ConfirmP50Ms, f.GapP50Ms)
}

func (m *moveSet) row(workload, system string) Row {
	row := makeRow(workload, system, "buckets/s", &m.s, nil, "")
	row.Reshard = m.fig
	return row
}

// checkPlacement checks, on every node, that moved buckets (the first,
// middle and last of each set) hold their documents on shard 2 and none
// on another shard: a phase that reported success moved what it was asked
// to.
func (e *reshardEnv) checkPlacement(ctx context.Context, sets ...[]uint32) error {
	dest := reshardShards - 1
	for _, u := range e.c.urls {
		for _, set := range sets {
			for _, b := range []uint32{set[0], set[len(set)/2], set[len(set)-1]} {
				var got struct {
					DocumentsCount int
					ByShard        []struct{ Shard, DocumentsCount, NotOwnedDocumentsCount int }
				}
				if err := getJSON(ctx, e.hc, fmt.Sprintf("%s/databases/%s/buckets/%d", u, e.db, b), &got); err != nil {
					return fmt.Errorf("bucket %d at %s: %w", b, u, err)
				}
				if got.DocumentsCount != reshardDocsPerBkt {
					return fmt.Errorf("bucket %d at %s: its owner holds %d documents, not %d", b, u, got.DocumentsCount, reshardDocsPerBkt)
				}
				for _, sh := range got.ByShard {
					if (sh.Shard == dest) != (sh.DocumentsCount == reshardDocsPerBkt) || sh.NotOwnedDocumentsCount != 0 {
						return fmt.Errorf("bucket %d at %s, moved to shard %d: shard %d holds %d documents (%d not owned)", b, u, dest, sh.Shard, sh.DocumentsCount, sh.NotOwnedDocumentsCount)
					}
				}
			}
		}
	}
	return nil
}
