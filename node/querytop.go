package node

import (
	"github.com/shardnode/shardnode/rql"
	"github.com/shardnode/shardnode/storage"
)

// queryTop collects a shard's matches of a query. With keep above 0 it
// holds only the first keep in the query's order, so a shard sends a page's
// worth, not its every match, and holds little more than that while it
// scans; below 0 it holds none (a count); total still counts every match.
type queryTop struct {
	keep  int
	all   []queryHit     // keep == 0: every match, in scan order
	top   topK[queryHit] // keep > 0
	total int
}

func newQueryTop(q *rql.Query, keep int) *queryTop {
	return &queryTop{keep: keep, top: topK[queryHit]{k: keep, cmp: func(a, b queryHit) int { return queryOrder(q, a, b) }}}
}

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
	if t.keep < 0 {
		return
	}
	if t.keep == 0 {
		t.all = append(t.all, h)
		return
	}
	t.top.add(h)
}

// docs returns the kept matches, in the query's order when keep > 0.
func (t *queryTop) docs() []*storage.Document {
	hits := t.all
	if t.keep > 0 {
		hits = t.top.sorted()
	}
	out := make([]*storage.Document, len(hits))
	for i, h := range hits {
		out[i] = h.doc
	}
	return out
}
