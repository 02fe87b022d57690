package node

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/storage"
)

// GET /databases/{db}/docs without an id lists documents, as RavenDB does
// for its clients' LoadStartingWith and GetDocumentsCommand(start,
// pageSize): by id prefix in id order, or the most recently modified
// first. Ids are keyed by bucket, not by id, so each shard scans the ids
// of all its documents (not their bodies) and sends the routing node its
// first start+pageSize candidates; the routing node merges them, cuts the
// page and reads those documents as a GET by id does.

// Bounds of a listing.
const (
	// maxListPageSize bounds pageSize and is its default: RavenDB's default
	// is every document, which a node holding a page in memory cannot give.
	maxListPageSize = 1024
	// maxListWindow bounds start+pageSize: every shard sends the routing
	// node that many candidate ids in one bus message.
	maxListWindow = 10000
	// maxListPattern bounds matches and exclude, in bytes.
	maxListPattern = 1024
)

// opShardList is the node-to-node op that runs a listing on one replica.
const opShardList = "shard.list"

// listParams is a checked listing request.
type listParams struct {
	args         listArgs // what every shard is asked; Limit is start+pageSize
	start        int
	pageSize     int
	metadataOnly bool
}

// listArgs is a listing as one shard runs it.
type listArgs struct {
	// ByID lists the ids that start with Prefix, in id order, filtered by
	// Matches, Exclude and StartAfter; without it the most recently
	// modified documents come first.
	ByID       bool   `json:"ById,omitempty"`
	Prefix     string `json:"Prefix,omitempty"`
	Matches    string `json:"Matches,omitempty"`
	Exclude    string `json:"Exclude,omitempty"`
	StartAfter string `json:"StartAfter,omitempty"`
	// Limit is how many candidates the shard sends: its first Limit in
	// the listing's order.
	Limit int `json:"Limit"`
	// Owners, when set, keeps only documents in buckets these ranges give
	// to the shard, as a query does: every shard filters by the same view,
	// so a document on two shards while its bucket moves is listed once.
	Owners bucket.Ranges `json:"Owners,omitempty"`
	// RecordEtag is the etag of the record Owners came from.
	RecordEtag uint64 `json:"RecordEtag,omitempty"`
}

// listKey is one candidate of a listing: what the routing node orders by.
type listKey struct {
	ID string `json:"Id"`
	// LastModified (Unix nanoseconds) orders the recent listing; a
	// listing by id leaves it 0.
	LastModified int64  `json:"LastModified,omitempty"`
	lower        string // ID lower-cased, set wherever keys are ordered
}

// cmpListKeys orders candidates as a listing returns them: the most
// recently modified first (a listing by id has no times), then by
// lower-cased id, then by id.
func cmpListKeys(a, b listKey) int {
	if c := cmp.Compare(b.LastModified, a.LastModified); c != 0 {
		return c
	}
	if c := strings.Compare(a.lower, b.lower); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// listRequest asks another node for a listing of its replica.
type listRequest struct {
	DB    string   `json:"Db"`
	Shard int      `json:"Shard"`
	Args  listArgs `json:"Args"`
}

// handleListDocs answers GET /docs without an id (see above).
func (n *Node) handleListDocs(w http.ResponseWriter, r *http.Request, t target) {
	p, err := parseListParams(r.URL.Query())
	if err != nil {
		writeError(w, err)
		return
	}
	docs, shards, err := n.listDocs(r.Context(), t, p)
	if err != nil {
		writeError(w, err)
		return
	}
	writeRaw(w, http.StatusOK, renderListing(docs, shards, p.metadataOnly))
}

// parseListParams checks a listing's query parameters; each error names
// its parameter.
func parseListParams(q url.Values) (listParams, error) {
	var p listParams
	var err error
	if p.start, err = intParam(q, "start", 0, maxListWindow); err != nil {
		return p, err
	}
	if p.pageSize, err = intParam(q, "pageSize", maxListPageSize, maxListPageSize); err != nil {
		return p, err
	}
	if p.start+p.pageSize > maxListWindow {
		return p, badRequest("start %d + pageSize %d: at most %d together (every shard sends that many candidates); page further with startsWith and startAfter",
			p.start, p.pageSize, maxListWindow)
	}
	p.args.Limit = p.start + p.pageSize
	if q.Has("etag") {
		return p, badRequest("etag: listing the documents changed after an etag is not supported (etags are per replica here)")
	}
	if v := q.Get("metadataOnly"); v != "" {
		if p.metadataOnly, err = boolParam("metadataOnly", v); err != nil {
			return p, err
		}
	}
	if !q.Has("startsWith") {
		for _, name := range []string{"matches", "exclude", "startAfter"} {
			if q.Get(name) != "" {
				return p, badRequest("%s: applies only to a listing by prefix; give startsWith too", name)
			}
		}
		return p, nil
	}
	p.args.ByID = true
	p.args.Prefix, p.args.StartAfter = q.Get("startsWith"), q.Get("startAfter")
	p.args.Matches, p.args.Exclude = q.Get("matches"), q.Get("exclude")
	return p, p.args.checkText()
}

// intParam reads the whole number parameter name in [0, hi], def when it
// is absent or empty.
func intParam(q url.Values, name string, def, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 || i > hi {
		return 0, badRequest("%s %q: must be a whole number from 0 to %d", name, v, hi)
	}
	return i, nil
}

// checkText checks the text parameters of a listing by prefix. startsWith
// and startAfter have an id's limit, measured as an id's (in the shortest
// spelling, see bucket.CheckIDLength), so that any spelling of a stored
// id, such as the @id a page ends with, is accepted as one.
func (a *listArgs) checkText() error {
	for _, f := range []struct {
		name, v string
		max     int // 0: an id's limit
	}{
		{"startsWith", a.Prefix, 0},
		{"startAfter", a.StartAfter, 0},
		{"matches", a.Matches, maxListPattern},
		{"exclude", a.Exclude, maxListPattern},
	} {
		if f.max == 0 {
			if err := bucket.CheckIDLength(f.v); err != nil {
				return badRequest("%s: %v (an id's limit)", f.name, err)
			}
		} else if len(f.v) > f.max {
			return badRequest("%s: %d bytes; at most %d", f.name, len(f.v), f.max)
		}
		if !utf8.ValidString(f.v) {
			return badRequest("%s %q: not valid UTF-8", f.name, f.v)
		}
	}
	if a.StartAfter != "" && !strings.HasPrefix(strings.ToLower(a.StartAfter), strings.ToLower(a.Prefix)) {
		return badRequest("startAfter %q: does not start with startsWith %q", a.StartAfter, a.Prefix)
	}
	return nil
}

// filter is the id filter of a listing by prefix, nil for the recent
// listing (every document).
func (a *listArgs) filter() *idFilter {
	if !a.ByID {
		return nil
	}
	return &idFilter{
		prefix:     strings.ToLower(a.Prefix),
		matches:    parseIDPatterns(a.Matches),
		exclude:    parseIDPatterns(a.Exclude),
		startAfter: strings.ToLower(a.StartAfter),
	}
}

// listDocs runs a listing: every shard's candidates, merged and cut to the
// page, then those documents read by id (routed, and rendered, as a GET by
// id). A document deleted between the two steps is left out (nil).
func (n *Node) listDocs(ctx context.Context, t target, p listParams) ([]*storage.Document, []int, error) {
	if p.pageSize == 0 {
		return nil, nil, nil
	}
	candidates, err := n.listCandidates(ctx, t, p.args)
	if err != nil {
		return nil, nil, err
	}
	page := pageOf(candidates, p.start, p.pageSize)
	if len(page) == 0 {
		return nil, nil, nil
	}
	ids := make([]string, len(page))
	for i, k := range page {
		ids[i] = k.ID
	}
	return n.fetchDocs(ctx, t, ids)
}

// listCandidates returns the first a.Limit candidates of the whole
// listing, in order. A shard that already purged a bucket this router
// still gives it refuses (StaleRecord): the router waits for the newer
// record and asks every shard again.
func (n *Node) listCandidates(ctx context.Context, t target, a listArgs) ([]listKey, error) {
	for attempt := 0; ; attempt++ {
		keys, err := n.listShards(ctx, t, a)
		if err == nil || !isStaleRecord(err) || attempt >= maxRerouteAttempts {
			return keys, err
		}
		if err := n.waitNewerRecord(ctx, t.rec, rerouteWait(attempt)); err != nil {
			return nil, err
		}
		if rec := n.recordOf(t.rec.DatabaseName); rec != nil {
			t.rec = rec
		}
	}
}

// listShards runs the listing on one replica of every shard of t, in
// parallel, and merges each shard's candidates as they arrive: the router
// holds at most twice a.Limit merged candidates however many shards there
// are. Through the database (not "{db}${n}") each shard keeps only the
// buckets the router's record gives it.
func (n *Node) listShards(ctx context.Context, t target, a listArgs) ([]listKey, error) {
	if t.shard < 0 {
		a.Owners, a.RecordEtag = t.rec.Sharding.BucketRanges, t.rec.Etag
	}
	merged := topK[listKey]{k: a.Limit, cmp: cmpListKeys}
	var mu sync.Mutex
	err := forShards(targetShards(t), func(_, shard int) error {
		var keys []listKey
		err := n.onShardWithin(ctx, t, shard, true, queryScanAllowance, func(ctx context.Context, rep shardReplica) error {
			var err error
			keys, err = rep.list(ctx, a)
			return err
		})
		if err == nil {
			mu.Lock()
			mergeCandidates(&merged, keys)
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return merged.sorted(), nil
}

// mergeCandidates adds one shard's candidates to the merged listing.
func mergeCandidates(merged *topK[listKey], keys []listKey) {
	for _, k := range keys {
		k.lower = strings.ToLower(k.ID)
		merged.add(k)
	}
}

// pageOf returns the candidates at positions [start, start+pageSize).
func pageOf(candidates []listKey, start, pageSize int) []listKey {
	if start >= len(candidates) {
		return nil
	}
	return candidates[start:min(start+pageSize, len(candidates))]
}

// renderListing renders a listing's answer, {"Results": [...]}, each
// document as a GET by id renders it (or its @metadata alone). A nil
// document, deleted since its shard listed it, is left out.
func renderListing(docs []*storage.Document, shards []int, metadataOnly bool) []byte {
	size := 16
	for _, d := range docs {
		if d != nil {
			size += renderedSize(d)
		}
	}
	out := make([]byte, 0, size)
	out = append(out, `{"Results":[`...)
	first := true
	for i, d := range docs {
		if d == nil {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		if metadataOnly {
			md := *d
			md.Body = nil // rendered as {} plus @metadata
			d = &md
		}
		out = renderDoc(out, d, d.Bucket, shards[i])
	}
	return append(out, "]}"...)
}

// listCheckEvery is how many items a listing's scan reads between checks
// that its caller still waits.
const listCheckEvery = 1024

// list returns this replica's first a.Limit candidates of a listing. It
// reads ids and times only, never bodies. The purge floor is checked
// after the scan: a purge raises the floor before it deletes, so a scan
// that the check lets through saw every bucket the router's record gives
// this shard.
func (l *localReplica) list(ctx context.Context, a listArgs) ([]listKey, error) {
	if err := l.servesReads(ctx); err != nil {
		return nil, err
	}
	if err := l.settleScan(ctx, a.Owners, a.RecordEtag); err != nil {
		return nil, err
	}
	f := a.filter()
	top := topK[listKey]{k: a.Limit, cmp: cmpListKeys}
	seen := 0
	var err error
	if a.Limit > 0 {
		err = l.s.IterateBucketsMeta(0, bucket.MaxID, func(d *storage.Document) bool {
			if seen++; seen%listCheckEvery == 0 && ctx.Err() != nil {
				return false
			}
			if d.Deleted() || (a.Owners != nil && a.Owners.ShardOf(d.Bucket) != l.shard) {
				return true
			}
			k := listKey{ID: d.ID, lower: strings.ToLower(d.ID)}
			if f == nil {
				k.LastModified = d.LastModified.UnixNano()
			} else if !f.keep(k.lower) {
				return true
			}
			top.add(k)
			return true
		})
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("list shard %d of %q: %w", l.shard, l.db, err)
	}
	if err := l.n.replicas.checkView(l.db, l.shard, a.RecordEtag); err != nil {
		return nil, err
	}
	if err := l.ownersCurrent(a.Owners, a.RecordEtag); err != nil {
		return nil, err
	}
	return top.sorted(), nil
}

func (r *remoteReplica) list(ctx context.Context, a listArgs) ([]listKey, error) {
	var keys []listKey
	err := r.n.call(ctx, r.tag, opShardList, listRequest{DB: r.db, Shard: r.shard, Args: a}, &keys)
	if isUnknownOp(err) {
		// A node of an earlier version, during a rolling upgrade: another
		// member may serve it.
		return nil, unavailable("node %s does not serve document listings (it runs an earlier version)", r.tag)
	}
	return keys, err
}

// serveShardList runs a listing on this node's replica for another node.
// The answer travels as one bus message: candidates that do not fit in
// one (long ids, a large window, a small external NATS max_payload) are
// refused with a 400 that says how to ask for fewer.
func (n *Node) serveShardList(ctx context.Context, data []byte) (any, error) {
	var req listRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, badRequest("decode shard list request: %v", err)
	}
	if req.Args.Limit < 0 || req.Args.Limit > maxListWindow {
		return nil, badRequest("list limit %d: must be 0 to %d", req.Args.Limit, maxListWindow)
	}
	if err := req.Args.checkText(); err != nil {
		return nil, err
	}
	l, err := n.local(req.DB, req.Shard)
	if err != nil {
		return nil, err
	}
	l.routed = true
	keys, err := l.list(ctx, req.Args)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(keys)
	if err != nil {
		return nil, fmt.Errorf("encode listing of shard %d: %w", req.Shard, err)
	}
	if limit := n.bus.nc.MaxPayload() - busMessageSlack; int64(len(out)) > limit {
		return nil, badRequest("shard %d's %d candidates take %d bytes, more than a bus message carries (%d); ask for a smaller start+pageSize, or page with startAfter",
			req.Shard, len(keys), len(out), limit)
	}
	return out, nil
}
