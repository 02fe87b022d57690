package bench

import (
	"math"
	"math/rand/v2"
)

// The request distributions of YCSB (core/generator/*.java), ported so
// that the key choice matches YCSB's for the same parameters. Each client
// holds its own generators, with its own random source: nothing is shared
// but the insert counter.

// zipfianConstant is YCSB's default zipfian constant.
const zipfianConstant = 0.99

// YCSB's ScrambledZipfianGenerator draws from a zipfian over 10^10 items,
// whose zeta it hard-codes, then hashes the draw into the key space.
const (
	scrambledItemCount = 10_000_000_000
	scrambledZetan     = 26.46902820178302
)

// fnvHash64 is YCSB's Utils.fnvhash64: FNV-1a over the value's 8 bytes,
// little end first, made non-negative.
func fnvHash64(v int64) int64 {
	const (
		offset = 0xCBF29CE484222325
		prime  = 1099511628211
	)
	h := uint64(offset)
	for range 8 {
		h ^= uint64(v & 0xff)
		h *= prime
		v >>= 8
	}
	r := int64(h)
	if r < 0 && r != math.MinInt64 {
		r = -r
	}
	return r
}

// zeta returns sum_{i=st+1..n} 1/i^theta plus initialSum: the incremental
// form YCSB uses when the item count grows.
func zeta(st, n int64, theta, initialSum float64) float64 {
	sum := initialSum
	for i := st; i < n; i++ {
		sum += 1 / math.Pow(float64(i+1), theta)
	}
	return sum
}

// zipfian is YCSB's ZipfianGenerator: popular items are the low numbers
// base, base+1, ... (Gray et al., "Quickly generating billion-record
// synthetic databases").
type zipfian struct {
	base         int64
	items        int64
	theta        float64
	zeta2theta   float64
	alpha        float64
	zetan        float64
	eta          float64
	countForZeta int64
}

// newZipfian returns a zipfian over [min, max]; zetan is its precomputed
// zeta, or 0 to compute it.
func newZipfian(min, max int64, theta, zetan float64) *zipfian {
	z := &zipfian{base: min, items: max - min + 1, theta: theta}
	z.zeta2theta = zeta(0, 2, theta, 0)
	z.alpha = 1 / (1 - theta)
	if zetan == 0 {
		zetan = zeta(0, z.items, theta, 0)
	}
	z.zetan = zetan
	z.countForZeta = z.items
	z.eta = (1 - math.Pow(2/float64(z.items), 1-theta)) / (1 - z.zeta2theta/z.zetan)
	return z
}

// next draws from the first itemCount items, growing zeta incrementally
// when itemCount grew since the last draw (YCSB's nextLong(itemcount)).
func (z *zipfian) next(r *rand.Rand, itemCount int64) int64 {
	if itemCount != z.countForZeta {
		if itemCount > z.countForZeta {
			z.zetan = zeta(z.countForZeta, itemCount, z.theta, z.zetan)
		} else {
			z.zetan = zeta(0, itemCount, z.theta, 0)
		}
		z.countForZeta = itemCount
		z.eta = (1 - math.Pow(2/float64(itemCount), 1-z.theta)) / (1 - z.zeta2theta/z.zetan)
	}
	u := r.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return z.base
	}
	if uz < 1+math.Pow(0.5, z.theta) {
		return z.base + 1
	}
	return z.base + int64(float64(itemCount)*math.Pow(z.eta*u-z.eta+1, z.alpha))
}

// keyChooser picks the key number of the next read, update or scan.
type keyChooser interface {
	next(r *rand.Rand) int64
}

// scrambledZipfian is YCSB's ScrambledZipfianGenerator over [0, items):
// zipfian popularity, with the popular items spread over the key space.
type scrambledZipfian struct {
	items int64
	gen   *zipfian
}

func newScrambledZipfian(items int64) *scrambledZipfian {
	return &scrambledZipfian{items: items, gen: newZipfian(0, scrambledItemCount-1, zipfianConstant, scrambledZetan)}
}

func (s *scrambledZipfian) next(r *rand.Rand) int64 {
	v := s.gen.next(r, scrambledItemCount)
	return fnvHash64(v) % s.items
}

// skewedLatest is YCSB's SkewedLatestGenerator: the most recently inserted
// keys are the most popular (workload D).
type skewedLatest struct {
	basis *insertCounter
	gen   *zipfian
}

// newSkewedLatest needs zetan, the zeta of basis.last()-1 items (see
// zetaFor).
func newSkewedLatest(basis *insertCounter, zetan float64) *skewedLatest {
	lastKey := basis.last() - 1
	return &skewedLatest{basis: basis, gen: newZipfian(0, lastKey-1, zipfianConstant, zetan)}
}

func (s *skewedLatest) next(r *rand.Rand) int64 {
	lastKey := s.basis.last() - 1
	return lastKey - s.gen.next(r, lastKey)
}

// uniform picks uniformly over [0, items).
type uniform struct{ items int64 }

func (u uniform) next(r *rand.Rand) int64 { return r.Int64N(u.items) }

// zetaFor precomputes the zeta of n items once, so every client's
// skewedLatest need not.
func zetaFor(n int64) float64 { return zeta(0, n, zipfianConstant, 0) }
