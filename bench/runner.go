package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// opFunc runs one operation and returns the payload bytes it moved (0 if
// the workload does not count bytes).
type opFunc func(ctx context.Context) (int, error)

// roundResult is one round of one workload on one system.
type roundResult struct {
	ops     int64 // operations timed (one latency each)
	units   int64 // what the throughput counts, when not ops (documents of a bulk round)
	bytes   int64
	elapsed time.Duration
	lat     []time.Duration
}

// count is what the round's throughput counts.
func (r roundResult) count() int64 {
	if r.units > 0 {
		return r.units
	}
	return r.ops
}

func (r roundResult) opsPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.count()) / r.elapsed.Seconds()
}

func (r roundResult) bytesPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.bytes) / r.elapsed.Seconds()
}

// runClosedLoop runs total operations with clients concurrent workers, each
// issuing its next operation as soon as the previous one returns (a closed
// loop, as YCSB's client threads do). newOp builds worker i's operation
// (its own random source and connection, if any). The first error stops
// the round and is returned.
func runClosedLoop(ctx context.Context, clients int, total int64, newOp func(i int) (opFunc, error)) (roundResult, error) {
	ops := make([]opFunc, clients)
	for i := range ops {
		op, err := newOp(i)
		if err != nil {
			return roundResult{}, fmt.Errorf("prepare client %d: %w", i, err)
		}
		ops[i] = op
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var remaining atomic.Int64
	remaining.Store(total)
	var bytes atomic.Int64
	lats := make([]latencies, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for i, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make(latencies, 0, total/int64(clients)+16)
			var n int64
			for remaining.Add(-1) >= 0 && ctx.Err() == nil {
				t0 := time.Now()
				b, err := op(ctx)
				lat = append(lat, time.Since(t0))
				if err != nil {
					cancel(err)
					break
				}
				n += int64(b)
			}
			bytes.Add(n)
			lats[i] = lat
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return roundResult{}, err
	}
	res := roundResult{elapsed: elapsed, bytes: bytes.Load()}
	for _, l := range lats {
		res.lat = append(res.lat, l...)
	}
	res.ops = int64(len(res.lat))
	return res, nil
}
