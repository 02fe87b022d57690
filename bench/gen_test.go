package bench

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

func TestRecordIsOneKiBOfTenFields(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	rec := appendRecord(nil, r, 42, false)
	var m map[string]any
	if err := json.Unmarshal(rec, &m); err != nil {
		t.Fatalf("record is not JSON: %v\n%s", err, rec)
	}
	if len(m) != fieldCount+1 || m["Key"] != float64(42) {
		t.Fatalf("record has %d members, Key %v", len(m), m["Key"])
	}
	for f := range fieldCount {
		v, ok := m["field"+string(rune('0'+f))].(string)
		if !ok || len(v) != fieldLength {
			t.Fatalf("field%d: %q", f, v)
		}
	}
	withMeta := appendRecord(nil, rand.New(rand.NewPCG(1, 1)), 42, true)
	if recordBytes(withMeta, true) != len(rec) {
		t.Fatalf("payload of a record with metadata: %d, want %d", recordBytes(withMeta, true), len(rec))
	}
	if err := json.Unmarshal(withMeta, &m); err != nil {
		t.Fatalf("record with metadata is not JSON: %v", err)
	}
}

func TestScrambledZipfianStaysInRangeAndSkews(t *testing.T) {
	const items = 1000
	z := newScrambledZipfian(items)
	r := rand.New(rand.NewPCG(7, 7))
	counts := map[int64]int{}
	for range 100_000 {
		k := z.next(r)
		if k < 0 || k >= items {
			t.Fatalf("key %d out of [0, %d)", k, items)
		}
		counts[k]++
	}
	top := 0
	for _, c := range counts {
		top = max(top, c)
	}
	// Zipfian 0.99: the most popular key draws several percent of
	// requests; a uniform choice would give it about 0.1%.
	if top < 2000 {
		t.Fatalf("most popular key drawn %d times of 100000: not skewed", top)
	}
}

func TestSkewedLatestFavoursNewKeys(t *testing.T) {
	c := newInsertCounter(1000)
	l := newSkewedLatest(c, zetaFor(999))
	r := rand.New(rand.NewPCG(3, 3))
	recent := 0
	for range 10_000 {
		k := l.next(r)
		if k < 0 || k >= c.last() {
			t.Fatalf("key %d out of [0, %d)", k, c.last())
		}
		if k >= 990 {
			recent++
		}
	}
	if recent < 3000 {
		t.Fatalf("only %d of 10000 draws among the 10 newest keys", recent)
	}
	// Inserts grow the key space once acknowledged, in order.
	a, b := c.next(), c.next()
	c.ack(b)
	if c.last() != 1000 {
		t.Fatalf("last %d after acknowledging only the second insert", c.last())
	}
	c.ack(a)
	if c.last() != 1002 {
		t.Fatalf("last %d after acknowledging both inserts", c.last())
	}
	if k := l.next(r); k < 0 || k >= 1002 {
		t.Fatalf("key %d out of range after growth", k)
	}
}

func TestMedianAndPercentile(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median odd = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if p := percentile(d, 99); p != 99 {
		t.Errorf("p99 of 1..100 = %v", p)
	}
	if p := percentile(d, 50); p != 50 {
		t.Errorf("p50 of 1..100 = %v", p)
	}
	if p := percentile(nil, 99); p != 0 {
		t.Errorf("p99 of nothing = %v", p)
	}
}

func TestFNVHash64IsNonNegativeAndSpreads(t *testing.T) {
	seen := map[int64]bool{}
	for k := range int64(10_000) {
		h := fnvHash64(k)
		if h < 0 {
			t.Fatalf("fnvHash64(%d) = %d", k, h)
		}
		seen[h] = true
	}
	if len(seen) != 10_000 {
		t.Fatalf("%d distinct hashes of 10000 keys", len(seen))
	}
}

func TestOptionsRejectUnknownWorkload(t *testing.T) {
	o := Options{Workloads: []string{"ycsb", "bogus"}}.Defaults()
	if _, err := o.validate(); err == nil {
		t.Fatal("unknown workload accepted")
	}
	o = Options{Workloads: []string{"ycsb", "get"}}.Defaults()
	want, err := o.validate()
	if err != nil || len(want) != 7 || !want[WorkloadYCSBE] || want[WorkloadBulk] {
		t.Fatalf("ycsb,get selects %v (%v)", want, err)
	}
}

func TestOpsRatioUsesPerRoundRatios(t *testing.T) {
	sn := Row{OpsPerSec: 5, RoundOpsPerSec: []float64{4, 5, 11}}
	base := Row{OpsPerSec: 19, RoundOpsPerSec: []float64{9, 19, 20}}
	// Per-round ratios 0.44, 0.26, 0.55: the median is 0.44, where the
	// ratio of medians (5/19) would be 0.26.
	if r := opsRatio(sn, base); r < 0.44 || r > 0.45 {
		t.Fatalf("ratio %v, want 4/9", r)
	}
	if r := opsRatio(Row{OpsPerSec: 6}, Row{OpsPerSec: 3}); r != 2 {
		t.Fatalf("ratio of medians %v, want 2", r)
	}
}

// TestLongestIn: per span, the longest write in flight of each group —
// into the flipping bucket, the control writers, the noise-floor writers —
// ignoring writes outside the span and other buckets' moving writes.
func TestLongestIn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const movers = 2
	writes := []fgWrite{
		{start: at(0), end: at(5), bucket: 7, client: 0, moving: true},   // ends before the span
		{start: at(8), end: at(30), bucket: 7, client: 1, moving: true},  // flipping bucket, 22 ms
		{start: at(9), end: at(50), bucket: 8, client: 0, moving: true},  // another bucket: ignored
		{start: at(10), end: at(14), bucket: 1, client: 2},               // control, 4 ms
		{start: at(11), end: at(20), bucket: 1, client: 3},               // control, 9 ms
		{start: at(12), end: at(13), bucket: 1, client: 4},               // noise floor, 1 ms
		{start: at(40), end: at(90), bucket: 7, client: 1, moving: true}, // starts after the span
	}
	l := longestIn(writes, 7, movers, at(10), at(25))
	want := longest{d: [3]time.Duration{22 * time.Millisecond, 9 * time.Millisecond, time.Millisecond}, seen: [3]bool{true, true, true}}
	if l != want {
		t.Fatalf("longestIn = %+v, want %+v", l, want)
	}
	if l := longestIn(writes, 7, movers, at(60), at(70)); l.seen[1] || !l.seen[0] {
		t.Fatalf("a span with only the long moving write: %+v", l)
	}
}
