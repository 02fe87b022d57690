package node

import (
	"container/heap"
	"slices"

	"github.com/shardnode/shardnode/rql"
	"github.com/shardnode/shardnode/storage"
)

// queryTop collects a shard's matches of a query. With keep above 0 it
// holds only the first keep in the query's order, so a shard sends a page's
// worth, not its every match, and holds no more than that while it scans;
// total still counts every match.
type queryTop struct {
	q     *rql.Query
	keep  int
	hits  []queryHit // a max-heap by queryOrder when keep > 0
	total int
}

func newQueryTop(q *rql.Query, keep int) *queryTop { return &queryTop{q: q, keep: keep} }

// queryOrder is the order of a query's results: its order by, then the id,
// as the router merges them.
func queryOrder(q *rql.Query, a, b queryHit) int {
	if c := q.Compare(a.m, b.m); c != 0 {
		return c
	}
	switch {
	case a.doc.ID < b.doc.ID:
		return -1
	case a.doc.ID > b.doc.ID:
		return 1
	}
	return 0
}

func (t *queryTop) add(h queryHit) {
	t.total++
	if t.keep <= 0 {
		t.hits = append(t.hits, h)
		return
	}
	if len(t.hits) < t.keep {
		heap.Push((*topHeap)(t), h)
		return
	}
	if queryOrder(t.q, h, t.hits[0]) < 0 { // before the last kept one
		t.hits[0] = h
		heap.Fix((*topHeap)(t), 0)
	}
}

// docs returns the kept matches, in the query's order when keep > 0.
func (t *queryTop) docs() []*storage.Document {
	if t.keep > 0 {
		slices.SortFunc(t.hits, func(a, b queryHit) int { return queryOrder(t.q, a, b) })
	}
	out := make([]*storage.Document, len(t.hits))
	for i, h := range t.hits {
		out[i] = h.doc
	}
	return out
}

// topHeap is queryTop's heap: the last kept match in the query's order on
// top.
type topHeap queryTop

func (h *topHeap) Len() int           { return len(h.hits) }
func (h *topHeap) Less(i, j int) bool { return queryOrder(h.q, h.hits[i], h.hits[j]) > 0 }
func (h *topHeap) Swap(i, j int)      { h.hits[i], h.hits[j] = h.hits[j], h.hits[i] }
func (h *topHeap) Push(x any)         { h.hits = append(h.hits, x.(queryHit)) }
func (h *topHeap) Pop() any {
	x := h.hits[len(h.hits)-1]
	h.hits = h.hits[:len(h.hits)-1]
	return x
}
