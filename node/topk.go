package node

import "slices"

// topK keeps the k least values added, by cmp: a shard's first candidates,
// in at most 2k values however many documents it scans.
type topK[T any] struct {
	k     int
	cmp   func(a, b T) int
	items []T
	full  bool // a trim kept k values; items[k-1] is the largest of them
}

// add offers v.
func (t *topK[T]) add(v T) {
	if t.k <= 0 || (t.full && t.cmp(v, t.items[t.k-1]) >= 0) {
		return
	}
	t.items = append(t.items, v)
	if len(t.items) >= 2*t.k {
		t.trim()
	}
}

// trim sorts the values and keeps the k least.
func (t *topK[T]) trim() {
	slices.SortFunc(t.items, t.cmp)
	if len(t.items) >= t.k {
		t.items, t.full = t.items[:t.k], true
	}
}

// sorted returns the k least values added (fewer if fewer were), in order.
func (t *topK[T]) sorted() []T {
	t.trim()
	return t.items
}
