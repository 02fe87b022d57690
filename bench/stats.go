package bench

import (
	"slices"
	"time"
)

// latencies collects per-operation latencies of one worker; workers merge
// theirs at the end, so recording never contends.
type latencies []time.Duration

// sample is the merged outcome of one workload on one system over every
// round.
type sample struct {
	opsPerSec []float64       // one per round
	bytesSec  []float64       // one per round; 0 when not measured
	lat       []time.Duration // every operation of every round
	ops       int64           // operations over every round
	errors    int64
}

// addRound folds one round into the sample.
func (s *sample) addRound(r roundResult) {
	s.opsPerSec = append(s.opsPerSec, r.opsPerSec())
	s.bytesSec = append(s.bytesSec, r.bytesPerSec())
	s.lat = append(s.lat, r.lat...)
	s.ops += r.count()
}

// median returns the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile returns the q-th percentile (0 < q <= 100) of the sorted
// durations by the nearest-rank method (0 for none).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(q/100*float64(len(sorted))+0.999999999) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
