package node

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/shardnode/shardnode/rql"
	"github.com/shardnode/shardnode/storage"
)

// queryRequest is POST /queries' body (RavenDB's IndexQuery shape).
type queryRequest struct {
	Query           string         `json:"Query"`
	QueryParameters map[string]any `json:"QueryParameters"`
}

// queryHit is one matching document.
type queryHit struct {
	doc   *storage.Document
	m     map[string]any
	shard int
}

func (n *Node) handleQuery(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	var req queryRequest
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		if qs := r.URL.Query()["query"]; len(qs) > 1 {
			writeError(w, badRequest("give one query, not %d", len(qs)))
			return
		}
		req.Query = r.URL.Query().Get("query")
	} else {
		body, err := readBody(r, 1<<20)
		if err != nil {
			writeError(w, err)
			return
		}
		if err := keysOnce(body, false); err != nil {
			writeError(w, err)
			return
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.UseNumber()
		if err := dec.Decode(&req); err != nil {
			writeError(w, jsonBodyError(err))
			return
		}
	}
	q, err := rql.Parse(req.Query, req.QueryParameters)
	if err != nil {
		var pe *rql.ParseError
		if errors.As(err, &pe) {
			writeJSON(w, http.StatusBadRequest, map[string]any{"Error": pe.Error(), "Type": "InvalidQuery", "Position": pe.Pos})
			return
		}
		writeError(w, badRequest("%v", err))
		return
	}
	// Each shard sends only the first offset+limit of its matches: no
	// page's document lies beyond them in any shard.
	keep := 0
	switch {
	case q.Limit == 0:
		keep = -1 // a count: no shard sends a document
	case q.Limit > 0:
		keep = min(q.Offset+q.Limit, maxQueryKeep)
	}
	var perShard [][]queryHit
	var total int
	for attempt := 0; ; attempt++ {
		perShard, total, err = n.queryShards(r.Context(), t, req, keep)
		if err == nil || !isStaleRecord(err) || attempt >= maxRerouteAttempts {
			break
		}
		// A shard purged a bucket that this router's record still gives
		// it: run the whole query again on the newer record.
		if err = n.waitNewerRecord(r.Context(), t.rec, rerouteWait(attempt)); err != nil {
			break
		}
		if rec := n.recordOf(t.rec.DatabaseName); rec != nil {
			t.rec = rec
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	var hits []queryHit
	for _, h := range perShard {
		hits = append(hits, h...)
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if c := q.Compare(hits[i].m, hits[j].m); c != 0 {
			return c < 0
		}
		return hits[i].doc.ID < hits[j].doc.ID
	})
	if q.Offset > 0 {
		hits = hits[min(q.Offset, len(hits)):]
	}
	if q.Limit >= 0 && q.Limit < len(hits) {
		hits = hits[:q.Limit]
	}
	out := make([]byte, 0, 256*len(hits)+64)
	out = append(out, `{"Results":[`...)
	for i, h := range hits {
		if i > 0 {
			out = append(out, ',')
		}
		out = renderDoc(out, h.doc, h.doc.Bucket, h.shard)
	}
	out = append(out, `],"TotalResults":`...)
	out = appendInt(out, total)
	if len(q.Include) == 0 {
		out = append(out, `,"SkippedResults":0,"Includes":{}}`...)
	} else {
		bodies, own := make([]map[string]any, len(hits)), make([]string, len(hits))
		for i, h := range hits {
			bodies[i], own[i] = h.m, h.doc.ID
		}
		ids := referencedIDs(bodies, own, q.Include, maxIncludedFound)
		if out, err = n.appendIncludes(r.Context(), append(out, `,"SkippedResults":0,`...), t, ids); err != nil {
			writeError(w, err)
			return
		}
	}
	writeRaw(w, http.StatusOK, out)
}

// maxQueryKeep bounds how many matches a shard is asked for when a query
// has a limit; beyond it (a huge offset) a shard sends every match, as
// for a query without one.
const maxQueryKeep = 1 << 30

// queryShards asks every shard of t, in parallel, for its matches (the
// first keep of them when keep > 0, none when it is below 0), and adds up
// how many match in all.
func (n *Node) queryShards(ctx context.Context, t target, req queryRequest, keep int) ([][]queryHit, int, error) {
	shards := targetShards(t)
	perShard := make([][]queryHit, len(shards))
	totals := make([]int, len(shards))
	err := forShards(shards, func(i, shard int) error {
		var err error
		perShard[i], totals[i], err = n.queryShard(ctx, t, shard, req, keep)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	total := 0
	for _, c := range totals {
		total += c
	}
	return perShard, total, nil
}

// queryScanAllowance is what a query's attempt on a remote replica gets on
// top of a point read's 3 s: a query scans every document of the shard
// (there are no indexes yet), which on a replica of millions of documents
// takes seconds, and the point-read deadline failed such a query on every
// member in turn. A member known to be down is tried last, so the longer
// wait is spent only on one that hangs.
const queryScanAllowance = 27 * time.Second

// queryShard asks one replica of shard for matches, then decodes them for
// ordering. Through the database (not "{db}${n}"), a shard answers only
// for the buckets it owns, so a document that exists on two shards while
// its bucket moves is counted once.
func (n *Node) queryShard(ctx context.Context, t target, shard int, req queryRequest, keep int) ([]queryHit, int, error) {
	var ans queryAnswer
	err := n.onShardWithin(ctx, t, shard, true, queryScanAllowance, func(ctx context.Context, rep shardReplica) error {
		var err error
		args := queryArgs{Query: req.Query, Params: req.QueryParameters, Keep: keep}
		if t.shard < 0 {
			args.Owners, args.RecordEtag = t.rec.Sharding.BucketRanges, t.rec.Etag
		}
		ans, err = rep.query(ctx, args)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	hits := make([]queryHit, 0, len(ans.Docs))
	for _, d := range ans.Docs {
		m, err := docMap(d)
		if err != nil {
			return nil, 0, err
		}
		hits = append(hits, queryHit{doc: d, m: m, shard: shard})
	}
	return hits, ans.Total, nil
}

func appendInt(b []byte, v int) []byte {
	out, _ := json.Marshal(v)
	return append(b, out...)
}
