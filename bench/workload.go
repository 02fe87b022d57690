package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
)

// mix is the operation mix of a closed-loop workload; proportions sum to 1.
type mix struct {
	read, update, insert, scan, rmw float64
}

// Request distributions.
const (
	distZipfian = "zipfian"
	distLatest  = "latest"
	distUniform = "uniform"
)

// spec is one closed-loop workload: YCSB A–F, put and get.
type spec struct {
	name    string
	mix     mix
	dist    string
	dataset string // which dataset it runs on
	scans   bool   // the dataset serves range scans (YCSB E)
	note    string
}

// Dataset names.
const (
	dsYCSB  = "ycsb"
	dsYCSBE = "ycsb-e"
	dsPut   = "put"
)

// specs lists the closed-loop workloads.
func specs() map[string]spec {
	return map[string]spec{
		WorkloadPut: {name: WorkloadPut, mix: mix{insert: 1}, dataset: dsPut,
			note: "durable single-document PUT of new 1 KiB documents"},
		WorkloadGet: {name: WorkloadGet, mix: mix{read: 1}, dist: distUniform, dataset: dsYCSB,
			note: "point GET, uniform over the loaded records"},
		WorkloadYCSBA: {name: WorkloadYCSBA, mix: mix{read: .5, update: .5}, dist: distZipfian, dataset: dsYCSB,
			note: "50% read, 50% update, zipfian"},
		WorkloadYCSBB: {name: WorkloadYCSBB, mix: mix{read: .95, update: .05}, dist: distZipfian, dataset: dsYCSB,
			note: "95% read, 5% update, zipfian"},
		WorkloadYCSBC: {name: WorkloadYCSBC, mix: mix{read: 1}, dist: distZipfian, dataset: dsYCSB,
			note: "100% read, zipfian"},
		WorkloadYCSBD: {name: WorkloadYCSBD, mix: mix{read: .95, insert: .05}, dist: distLatest, dataset: dsYCSB,
			note: "95% read, 5% insert, latest"},
		WorkloadYCSBE: {name: WorkloadYCSBE, mix: mix{scan: .95, insert: .05}, dist: distZipfian, dataset: dsYCSBE, scans: true,
			note: "95% scan (1-100 records), 5% insert, zipfian"},
		WorkloadYCSBF: {name: WorkloadYCSBF, mix: mix{read: .5, rmw: .5}, dist: distZipfian, dataset: dsYCSB,
			note: "50% read, 50% read-modify-write, zipfian"},
	}
}

// maxScanLength is YCSB E's maximum scan length (uniform 1..100).
const maxScanLength = 100

// dsState is one dataset of one system, with its key space.
type dsState struct {
	ds      dataset
	counter *insertCounter
	loaded  int64
}

// chooser builds one client's key chooser for sp on st. zetan is the
// precomputed zeta for the latest distribution; extra is how many inserts
// the round may add (YCSB's expectednewkeys).
func chooser(sp spec, st *dsState, zetan float64, extra int64) keyChooser {
	switch sp.dist {
	case distLatest:
		return newSkewedLatest(st.counter, zetan)
	case distUniform:
		return uniform{items: st.loaded}
	default:
		return newScrambledZipfian(st.counter.last() + extra)
	}
}

// newSpecOp returns client cl's operation for workload sp.
func newSpecOp(sp spec, st *dsState, cl client, r *rand.Rand, kc keyChooser) opFunc {
	rec := make([]byte, 0, 1280)
	nextKey := func() int64 {
		for {
			// Skip keys not inserted yet, as YCSB does.
			if k := kc.next(r); k < st.counter.last() {
				return k
			}
		}
	}
	m := sp.mix
	return func(ctx context.Context) (int, error) {
		p := r.Float64()
		switch {
		case p < m.read:
			return 0, cl.read(ctx, nextKey())
		case p < m.read+m.update:
			// The API has no partial update: the whole record is replaced
			// (YCSB's writeallfields=true) on every system.
			k := nextKey()
			rec = appendRecord(rec[:0], r, k, false)
			return len(rec), cl.write(ctx, k, rec)
		case p < m.read+m.update+m.insert:
			k := st.counter.next()
			rec = appendRecord(rec[:0], r, k, false)
			if err := cl.write(ctx, k, rec); err != nil {
				return 0, err
			}
			st.counter.ack(k)
			return len(rec), nil
		case p < m.read+m.update+m.insert+m.scan:
			return 0, cl.scan(ctx, nextKey(), 1+r.IntN(maxScanLength))
		default:
			k := nextKey()
			if err := cl.read(ctx, k); err != nil {
				return 0, err
			}
			rec = appendRecord(rec[:0], r, k, false)
			return len(rec), cl.write(ctx, k, rec)
		}
	}
}

// runSpecRound runs one round of sp with ops operations on st.
func runSpecRound(ctx context.Context, sp spec, st *dsState, clients int, ops int64, seed uint64) (roundResult, error) {
	var zetan float64
	if sp.dist == distLatest {
		zetan = zetaFor(st.counter.last() - 1)
	}
	extra := int64(float64(ops)*sp.mix.insert*2) + 1
	var cls []client
	defer func() {
		for _, c := range cls {
			c.close()
		}
	}()
	return runClosedLoop(ctx, clients, ops, func(i int) (opFunc, error) {
		cl, err := st.ds.client(ctx, i)
		if err != nil {
			return nil, err
		}
		cls = append(cls, cl)
		return newSpecOp(sp, st, cl, newRand(seed, i), chooser(sp, st, zetan, extra)), nil
	})
}

// runBulk writes keys [from, to) in batches of batch with senders
// concurrent senders; each batch is one operation.
func runBulk(ctx context.Context, ds dataset, from, to int64, batch, senders int, seed uint64) (roundResult, error) {
	batches := (to - from + int64(batch) - 1) / int64(batch)
	var next atomic.Int64
	var cls []client
	defer func() {
		for _, c := range cls {
			c.close()
		}
	}()
	return runClosedLoop(ctx, senders, batches, func(i int) (opFunc, error) {
		cl, err := ds.client(ctx, i)
		if err != nil {
			return nil, err
		}
		cls = append(cls, cl)
		r := newRand(seed, i)
		keys := make([]int64, 0, batch)
		recs := make([][]byte, batch)
		return func(ctx context.Context) (int, error) {
			b := next.Add(1) - 1
			lo := from + b*int64(batch)
			hi := min(lo+int64(batch), to)
			keys = keys[:0]
			n := 0
			for k := lo; k < hi; k++ {
				j := len(keys)
				keys = append(keys, k)
				recs[j] = appendRecord(recs[j][:0], r, k, false)
				n += len(recs[j])
			}
			if err := cl.writeBatch(ctx, keys, recs[:len(keys)]); err != nil {
				return 0, fmt.Errorf("batch of keys %d..%d: %w", lo, hi-1, err)
			}
			return n, nil
		}, nil
	})
}
