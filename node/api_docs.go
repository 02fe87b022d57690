package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/document"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// maxIDsPerGet bounds the ids of one GET /docs.
const maxIDsPerGet = 1024

func validateID(id string) error {
	if err := bucket.ValidateID(id); err != nil {
		return badRequest("document id %q: %v", id, err)
	}
	return nil
}

// ifMatch reads the If-Match header (RavenDB clients quote it) and checks
// that it parses. A header that is present but empty (`If-Match: ""`) asks
// for a new document, as RavenDB's empty expected change vector does.
func ifMatch(r *http.Request) (cv string, isNew bool, err error) {
	h, ok := r.Header["If-Match"]
	if !ok || len(h) == 0 {
		return "", false, nil
	}
	v := strings.Trim(strings.TrimSpace(h[0]), `"`)
	if v == "" {
		return "", true, nil
	}
	if _, err := changevector.Parse(v); err != nil {
		return "", false, badRequest("If-Match: %v", err)
	}
	return v, false, nil
}

// shardFor picks the shard that serves id for target t.
func shardFor(t target, id string) (uint32, int) {
	b := bucket.ForID(id)
	if t.shard >= 0 {
		return b, t.shard
	}
	return b, t.rec.ShardOf(b)
}

func (n *Node) handleGetDocs(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	var one [1]string
	ids := queryValues(one[:0], r.URL.RawQuery, "id")
	if len(ids) == 0 {
		n.handleListDocs(w, r, t) // RavenDB's listing: by prefix, or the latest
		return
	}
	metadataOnly, err := metadataOnlyParam(r.URL.RawQuery)
	if err != nil {
		writeError(w, err)
		return
	}
	n.answerIDs(w, r, t, ids, metadataOnly)
}

// maxMultiGetBody bounds POST /docs's body: 1024 ids of 512 bytes in
// their shortest spelling (bucket.MaxIDLength), each of those bytes
// written as six characters of JSON at worst (an escape such as \u0041 or
// \u212A, KELVIN SIGN, a 3-byte spelling of 'k'), and some room.
const maxMultiGetBody = 4 << 20

// handlePostGetDocs answers POST /docs, RavenDB's clients' GET by ids
// when the ids would make the URL too long: the ids come as the body's
// {"Ids": [...]}, the other parameters (metadataOnly; RavenDB's loadHash,
// which names the ids for its HTTP cache, is ignored) in the query
// string, and the answer is the GET's with those ids.
func (n *Node) handlePostGetDocs(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	if len(queryValues(nil, r.URL.RawQuery, "id")) > 0 {
		writeError(w, badRequest(`POST /docs takes its ids in the body's "Ids", not as id in the query string`))
		return
	}
	metadataOnly, err := metadataOnlyParam(r.URL.RawQuery)
	if err != nil {
		writeError(w, err)
		return
	}
	raw, err := readBody(r, maxMultiGetBody)
	if err != nil {
		writeError(w, err)
		return
	}
	ids, err := parseMultiGet(raw)
	if err != nil {
		writeError(w, err)
		return
	}
	n.answerIDs(w, r, t, ids, metadataOnly)
}

// parseMultiGet reads POST /docs's body, {"Ids": ["a", "b", ...]}.
func parseMultiGet(raw []byte) ([]string, error) {
	var body struct {
		Ids []*string `json:"Ids"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return nil, badRequest(`body: %v (want {"Ids": ["id", ...]})`, err)
	}
	if dec.More() {
		return nil, badRequest(`body: data after the JSON object (want {"Ids": ["id", ...]})`)
	}
	if len(body.Ids) == 0 {
		return nil, badRequest(`body: "Ids" is missing or empty (want {"Ids": ["id", ...]})`)
	}
	ids := make([]string, len(body.Ids))
	for i, id := range body.Ids {
		if id == nil {
			return nil, badRequest(`body: "Ids"[%d] is null; every id must be a string`, i)
		}
		ids[i] = *id
	}
	return ids, nil
}

// metadataOnlyParam reads the metadataOnly query parameter of a GET by
// ids: true or false, false when absent or empty.
func metadataOnlyParam(rawQuery string) (bool, error) {
	var one [1]string
	vs := queryValues(one[:0], rawQuery, "metadataOnly")
	if len(vs) == 0 || vs[0] == "" {
		return false, nil
	}
	return boolParam("metadataOnly", vs[0])
}

// boolParam reads a boolean query parameter: true or false in any case, as
// RavenDB's server reads them, and nothing else (not Go's 1, t or F).
func boolParam(name, v string) (bool, error) {
	switch {
	case strings.EqualFold(v, "true"):
		return true, nil
	case strings.EqualFold(v, "false"):
		return false, nil
	}
	return false, badRequest("%s %q: must be true or false", name, v)
}

// answerIDs answers a GET of ids (from the query string or a POST's
// body): the documents in the order of ids, null for a missing one, a 404
// when the only id asked for is missing; with metadataOnly, each
// document's @metadata alone.
func (n *Node) answerIDs(w http.ResponseWriter, r *http.Request, t target, ids []string, metadataOnly bool) {
	if len(ids) > maxIDsPerGet {
		writeError(w, badRequest("%d ids asked for; at most %d per request", len(ids), maxIDsPerGet))
		return
	}
	for _, id := range ids {
		if err := validateID(id); err != nil {
			writeError(w, err)
			return
		}
	}
	var include [][]string
	if strings.Contains(r.URL.RawQuery, "include") {
		var err error
		if include, err = includePaths(r.URL.RawQuery); err != nil {
			writeError(w, err)
			return
		}
	}
	docs, shards, err := n.fetchDocs(r.Context(), t, ids)
	if err != nil {
		writeError(w, err)
		return
	}
	if len(ids) == 1 && docs[0] == nil {
		writeError(w, notFound("DocumentDoesNotExist", "document %q does not exist", ids[0]))
		return
	}
	if len(ids) == 1 && len(include) == 0 && notModified(w, r, docs[0].ChangeVector) { // the ETag covers no included document
		return
	}
	size := 32
	for _, d := range docs {
		if d != nil {
			size += renderedSize(d)
		}
	}
	bp, _ := n.answers.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	out := (*bp)[:0]
	if cap(out) < size {
		out = make([]byte, 0, size)
	}
	out = append(out, `{"Results":[`...)
	for i, d := range docs {
		if i > 0 {
			out = append(out, ',')
		}
		if d == nil {
			out = append(out, "null"...)
			continue
		}
		if metadataOnly {
			md := *d
			md.Body = nil // rendered as {} plus @metadata
			d = &md
		}
		out = renderDoc(out, d, d.Bucket, shards[i])
	}
	if len(include) == 0 {
		out = append(out, `],"Includes":{}}`...)
	} else if out, err = n.appendIncludes(r.Context(), append(out, `],`...), t, loadedReferences(docs, include)); err != nil {
		writeError(w, err)
		return
	}
	if cap(out) > maxPooledAnswer {
		writeRaw(w, http.StatusOK, out) // not pooled: sent as it is
		return
	}
	writeRawCopy(w, http.StatusOK, out) // copied or sent when it returns: the buffer goes back
	*bp = out
	n.answers.Put(bp)
}

// notModified sets a single document's ETag, its quoted change vector, as
// RavenDB does (its clients' HEAD reads the change vector from it), and
// answers 304 when the request's If-None-Match names that change vector.
func notModified(w http.ResponseWriter, r *http.Request, cv string) bool {
	w.Header().Set("ETag", `"`+cv+`"`)
	if !etagListMatches(r.Header.Get("If-None-Match"), cv) {
		return false
	}
	w.WriteHeader(http.StatusNotModified)
	return true
}

// etagListMatches reports whether an If-None-Match value names the
// document's change vector cv: "*" (any version), a list of quoted ETags
// (RFC 9110; a change vector holds commas, so only quotes delimit them; a
// weak W/ prefix compares the same), or one unquoted change vector, as
// RavenDB's clients send it. Change vectors match as If-Match compares
// them, by their version parts: the replicas of a moved document each
// give it their own order part.
func etagListMatches(inm, cv string) bool {
	inm = strings.TrimSpace(inm)
	switch {
	case inm == "":
		return false
	case inm == "*":
		return true
	case !strings.Contains(inm, `"`):
		return sameVersion(inm, cv)
	}
	for {
		open := strings.IndexByte(inm, '"')
		if open < 0 {
			return false
		}
		end := strings.IndexByte(inm[open+1:], '"')
		if end < 0 {
			return false
		}
		if sameVersion(inm[open+1:open+1+end], cv) {
			return true
		}
		inm = inm[open+1+end+1:]
	}
}

// sameVersion reports whether change vectors a and b are the same text or
// have causally equal version parts.
func sameVersion(a, b string) bool {
	if a == b {
		return true
	}
	ca, err := changevector.Parse(a)
	if err != nil {
		return false
	}
	cb, err := changevector.Parse(b)
	if err != nil {
		return false
	}
	return changevector.Compare(ca.Version, cb.Version) == changevector.Equal
}

// maxPooledAnswer bounds the buffers kept for reuse: a rare answer of
// many large documents is left to the collector.
const maxPooledAnswer = 64 << 10

// queryValues appends to dst the values of key in a raw query string, as
// url.ParseQuery would give them (pairs it would refuse are skipped), but
// without building a map: a point GET reads one id.
func queryValues(dst []string, rawQuery, key string) []string {
	for rawQuery != "" {
		var pair string
		pair, rawQuery, _ = strings.Cut(rawQuery, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if k != key {
			if !strings.ContainsAny(k, "%+") {
				continue
			}
			if uk, err := url.QueryUnescape(k); err != nil || uk != key {
				continue
			}
		}
		if strings.ContainsAny(v, "%+") {
			var err error
			if v, err = url.QueryUnescape(v); err != nil {
				continue
			}
		}
		dst = append(dst, v)
	}
	return dst
}

// fetchDocs reads ids, one request per shard, shards in parallel. A shard
// that already purged a bucket this router still maps to it refuses
// (StaleRecord): the router waits for the newer record and reads again.
func (n *Node) fetchDocs(ctx context.Context, t target, ids []string) ([]*storage.Document, []int, error) {
	for attempt := 0; ; attempt++ {
		docs, shards, err := n.fetchDocsOnce(ctx, t, ids)
		if err == nil || !isStaleRecord(err) || attempt >= maxRerouteAttempts {
			return docs, shards, err
		}
		if err := n.waitNewerRecord(ctx, t.rec, rerouteWait(attempt)); err != nil {
			return nil, nil, err
		}
		if rec := n.recordOf(t.rec.DatabaseName); rec != nil {
			t.rec = rec
		}
	}
}

func isStaleRecord(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Type == "StaleRecord"
}

func (n *Node) fetchDocsOnce(ctx context.Context, t target, ids []string) ([]*storage.Document, []int, error) {
	shards := make([]int, len(ids))
	oneShard := true
	for i, id := range ids {
		_, shards[i] = shardFor(t, id)
		oneShard = oneShard && shards[i] == shards[0]
	}
	if oneShard {
		// Every point GET: no grouping and no goroutine, whose stack
		// would grow anew through Pebble's read path every time.
		docs, err := n.readShard(ctx, t, shards[0], ids)
		if err != nil {
			return nil, nil, err
		}
		return docs, shards, nil
	}
	byShard := map[int][]int{}
	for i, shard := range shards {
		byShard[shard] = append(byShard[shard], i)
	}
	docs := make([]*storage.Document, len(ids))
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for shard, idx := range byShard {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := make([]string, len(idx))
			for k, i := range idx {
				want[k] = ids[i]
			}
			got, err := n.readShard(ctx, t, shard, want)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			for k, i := range idx {
				docs[i] = got[k]
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, nil, errs[0]
	}
	return docs, shards, nil
}

// readShard reads ids, all of them in shard, from one of its replicas: the
// documents in the order of ids, nil for a missing one.
func (n *Node) readShard(ctx context.Context, t target, shard int, ids []string) ([]*storage.Document, error) {
	var docs []*storage.Document
	err := n.onShard(ctx, t, shard, true, func(ctx context.Context, rep shardReplica) error {
		got, err := getInParts(ctx, rep, ids, t.rec.Etag)
		if err == nil && len(got) != len(ids) {
			err = fmt.Errorf("shard %d answered %d documents for %d ids", shard, len(got), len(ids))
		}
		docs = got
		return err
	})
	return docs, err
}

// getInParts reads ids from rep. A replica on another node answers in one
// bus message, which a few large documents can outgrow (any one document
// fits: documents are limited to what a message carries); such a read is
// asked again in halves.
func getInParts(ctx context.Context, rep shardReplica, ids []string, recordEtag uint64) ([]*storage.Document, error) {
	got, err := rep.get(ctx, ids, recordEtag)
	var ae *apiError
	if err == nil || len(ids) < 2 || !errors.As(err, &ae) || ae.Type != "ResultTooLarge" {
		return got, err
	}
	half := len(ids) / 2
	first, err := getInParts(ctx, rep, ids[:half], recordEtag)
	if err != nil {
		return nil, err
	}
	rest, err := getInParts(ctx, rep, ids[half:], recordEtag)
	if err != nil {
		return nil, err
	}
	return append(first, rest...), nil
}

// renderedSize is at least what renderDoc appends for d, unless its
// strings need escaping.
func renderedSize(d *storage.Document) int {
	return len(d.Body) + len(d.ID) + len(d.Collection) + len(d.ChangeVector) + 160
}

func renderDoc(dst []byte, d *storage.Document, b uint32, shard int) []byte {
	return document.Render(dst, d.Body, document.Metadata{ID: d.ID, Collection: d.Collection, ChangeVector: d.ChangeVector, LastModified: d.LastModified, Bucket: b, Shard: shard})
}

// docWrite is what a single-document PUT or DELETE names, checked.
type docWrite struct {
	t  target
	id string
	im string
	// isNew: an empty If-Match, the document must not exist.
	isNew bool
	wc    writeConcern
}

// parseDocWrite checks the parts a single-document PUT and DELETE share:
// the database (not a shard replica), the id, If-Match and the write
// concern.
func (n *Node) parseDocWrite(r *http.Request) (docWrite, error) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		return docWrite{}, err
	}
	if t.shard >= 0 {
		return docWrite{}, badRequest("write through the database %q, not one shard replica", t.rec.DatabaseName)
	}
	ids := r.URL.Query()["id"]
	if len(ids) > 1 {
		return docWrite{}, badRequest("%s writes one document: give one id, not %d (bulk_docs writes several)", r.Method, len(ids))
	}
	dw := docWrite{t: t, id: r.URL.Query().Get("id")}
	if err := validateID(dw.id); err != nil {
		return docWrite{}, err
	}
	if dw.im, dw.isNew, err = ifMatch(r); err != nil {
		return docWrite{}, err
	}
	if dw.wc, err = n.waitForParam(r, t); err != nil {
		return docWrite{}, err
	}
	return dw, nil
}

func (n *Node) handlePutDoc(w http.ResponseWriter, r *http.Request) {
	dw, err := n.parseDocWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	raw, err := readBody(r, n.maxDocBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	p, err := document.ParseOwned(raw) // raw is not read again
	if err != nil {
		writeError(w, badRequest("document %q: %v", dw.id, err))
		return
	}
	res, err := n.writeOps(r.Context(), dw.t, []storage.Op{{Kind: storage.OpPut, ID: dw.id, Collection: p.Collection, Body: p.Body, IfMatch: dw.im, IfNew: dw.isNew}}, dw.wc)
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]byte, 0, 64+len(dw.id)+len(res[0].ChangeVector))
	out = document.AppendString(append(out, `{"Id":`...), dw.id)
	out = document.AppendString(append(out, `,"ChangeVector":`...), res[0].ChangeVector)
	writeRaw(w, http.StatusCreated, append(out, '}'))
}

func (n *Node) handleDeleteDoc(w http.ResponseWriter, r *http.Request) {
	dw, err := n.parseDocWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if _, err := n.writeOps(r.Context(), dw.t, []storage.Op{{Kind: storage.OpDelete, ID: dw.id, IfMatch: dw.im, IfNew: dw.isNew}}, dw.wc); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// writeOps groups ops by shard and writes each group atomically on its
// shard, shards in parallel; results come back in the ops' order. Groups on
// different shards commit independently.
func (n *Node) writeOps(ctx context.Context, t target, ops []storage.Op, wc writeConcern) ([]storage.Result, error) {
	type group struct {
		shard  int
		routed uint64 // the etag of the record that gives these ops to shard
		idx    []int
		ops    []storage.Op
	}
	results := make([]storage.Result, len(ops))
	pending := make([]int, len(ops))
	for i := range pending {
		pending[i] = i
	}
	// A shard refuses writes for buckets it no longer owns (a move just
	// flipped them), naming the owner by its newer record. A single write
	// goes to that owner at once, telling it which record says so (the
	// owner accepts it even before applying that record itself); a group
	// waits until this node applied it and is grouped again.
	type route struct {
		shard  int
		routed uint64
	}
	hinted := map[int]ownerHint{} // op index → owner a refusal named
	first := time.Now()
	var rerouted time.Duration // first attempt → start of the latest
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			rerouted = time.Since(first)
		}
		// Route every op, then fill groups sized to fit: an op is large
		// and growing a group's slice would copy it again and again.
		routes := make([]route, len(pending))
		sizes := map[route]int{}
		for j, i := range pending {
			_, shard := shardFor(t, ops[i].ID)
			r := route{shard, t.rec.Etag}
			if h, ok := hinted[i]; ok && h.RecordEtag > t.rec.Etag {
				r = route{h.Shard, h.RecordEtag}
			}
			routes[j] = r
			sizes[r]++
		}
		groups := make(map[route]*group, len(sizes))
		var order []*group
		for j, i := range pending {
			r := routes[j]
			g, ok := groups[r]
			if !ok {
				g = &group{shard: r.shard, routed: r.routed, idx: make([]int, 0, sizes[r]), ops: make([]storage.Op, 0, sizes[r])}
				groups[r] = g
				order = append(order, g)
			}
			g.idx = append(g.idx, i)
			g.ops = append(g.ops, ops[i])
		}
		errs := make([]error, len(order))
		write := func(gi int) {
			g := order[gi]
			errs[gi] = n.writeShard(ctx, t, g.shard, g.ops, wc, g.routed, func(res []storage.Result) {
				for k, i := range g.idx {
					results[i] = res[k]
				}
			})
		}
		var wg sync.WaitGroup
		if len(order) == 1 {
			write(0) // one shard (every single-document write): no goroutine
		} else {
			for gi := range order {
				wg.Add(1)
				go func() {
					defer wg.Done()
					write(gi)
				}()
			}
		}
		wg.Wait()
		pending = pending[:0]
		var failed []error
		var waitFor uint64 // a record etag this node must reach first
		stale := false     // a refusal no newer than this node's record
		for gi, err := range errs {
			switch {
			case err == nil:
			case isNotOwned(err) && attempt < maxRerouteAttempts && t.shard < 0:
				g := order[gi]
				pending = append(pending, g.idx...)
				var ae *apiError
				errors.As(err, &ae)
				h := ae.Owner
				switch {
				case h == nil || h.RecordEtag <= t.rec.Etag:
					stale = true
				case len(g.idx) == 1 && t.rec.Sharding.Shards[h.Shard] != nil:
					hinted[g.idx[0]] = *h
				default:
					waitFor = max(waitFor, h.RecordEtag)
				}
			default:
				failed = append(failed, err)
			}
		}
		if len(failed) > 0 {
			return nil, wrapFirst(failed[0], errors.Join(failed...))
		}
		if len(pending) == 0 {
			if attempt > 0 {
				n.reroutes.record(t.rec.DatabaseName, t.rec.CreatedIndex, rerouted)
			}
			return results, nil
		}
		sort.Ints(pending)
		if waitFor > 0 {
			if err := n.waitRecord(ctx, t.rec.DatabaseName, waitFor, maxRecordWait); err != nil {
				return nil, err
			}
		}
		if stale {
			// The refusing replica is not ahead of this node: it lags, or
			// this node is about to apply a newer record.
			if err := n.waitNewerRecord(ctx, t.rec, rerouteWait(attempt)); err != nil {
				return nil, err
			}
		}
		if rec := n.recordOf(t.rec.DatabaseName); rec != nil {
			t.rec = rec
		}
	}
}

// maxRerouteAttempts bounds how often a write follows moved buckets.
const maxRerouteAttempts = 50

func isNotOwned(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Type == "BucketNotOwned"
}

// waitNewerRecord waits for a record newer than rec (the refusing shard
// applied one; this node will shortly), but at most wait: when this node
// is already up to date it is the refusing node that lags, and a short
// pause is all a retry needs.
func (n *Node) waitNewerRecord(ctx context.Context, rec *raftfsm.DatabaseRecord, wait time.Duration) error {
	return n.waitRecord(ctx, rec.DatabaseName, rec.Etag+1, wait)
}

// rerouteWait is the pause before the attempt-th retry of a refused
// request: 1 ms doubling to 100 ms.
func rerouteWait(attempt int) time.Duration {
	return min(time.Millisecond<<min(attempt, 7), 100*time.Millisecond)
}

// wrapFirst keeps the first error's type (for the status) with every
// shard's message.
func wrapFirst(first, all error) error {
	if first == all {
		return first
	}
	ae := toAPIError(first)
	return &apiError{Status: ae.Status, Type: ae.Type, Msg: all.Error()}
}

// bulkCommand is one entry of POST /bulk_docs (read by parseBulkCommand).
type bulkCommand struct {
	Type         string
	ID           string
	Document     []byte // raw JSON, a slice of the validated request body
	ChangeVector *string
}

// parseBulkCommands reads {"Commands": [...]} in one validating pass plus
// one walk: each document stays a slice of raw, never decoded (bulk bodies
// are large, and encoding/json scanned them three times).
func parseBulkCommands(raw []byte) (cmds []bulkCommand, compact bool, err error) {
	compact, err = document.Validate(raw)
	if err != nil {
		return nil, false, badRequest("malformed JSON body: %v", err)
	}
	seen := false
	err = document.Members(raw, func(k, v []byte) error {
		if !document.KeyIs(k, "Commands") {
			return nil
		}
		if seen {
			return badRequest(`malformed JSON body: "Commands" named twice (field names match in any case)`)
		}
		seen = true
		if string(v) == "null" {
			cmds = nil
			return nil
		}
		cmds = make([]bulkCommand, 0, 64)
		return document.Elements(v, func(e []byte) error {
			c, err := parseBulkCommand(len(cmds), e)
			cmds = append(cmds, c)
			return err
		})
	})
	if errors.Is(err, document.ErrNotObject) {
		return nil, false, badRequest("malformed JSON body: must be an object with \"Commands\"")
	}
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return nil, false, err
		}
		return nil, false, badRequest(`malformed JSON body: "Commands": %v`, err)
	}
	return cmds, compact, nil
}

// bulkFields are the fields of a bulk_docs command that the server reads.
var bulkFields = [...]string{"Type", "Id", "Document", "ChangeVector"}

// parseBulkCommand reads command i, valid JSON.
func parseBulkCommand(i int, e []byte) (bulkCommand, error) {
	var c bulkCommand
	if e[0] != '{' {
		return c, badRequest("command %d: %s, want an object", i, jsonKindOf(e))
	}
	str := func(field string, v []byte, dst *string) error {
		if v[0] != '"' {
			return badRequest("command %d: %s must be a string", i, field)
		}
		s, err := document.Unquote(v)
		if err != nil {
			return badRequest("command %d: %s: %v", i, field, err)
		}
		*dst = s
		return nil
	}
	var seen [len(bulkFields)]bool
	err := document.Members(e, func(k, v []byte) error {
		f := slices.IndexFunc(bulkFields[:], func(name string) bool { return document.KeyIs(k, name) })
		if f < 0 {
			return nil // a field the server does not read
		}
		if seen[f] {
			return badRequest("command %d: %s named twice (field names match in any case)", i, bulkFields[f])
		}
		seen[f] = true
		switch bulkFields[f] {
		case "Type":
			return str("Type", v, &c.Type)
		case "Id":
			return str("Id", v, &c.ID)
		case "Document":
			c.Document = v
		case "ChangeVector":
			if string(v) == "null" {
				c.ChangeVector = nil
				return nil
			}
			var cv string
			if err := str("ChangeVector", v, &cv); err != nil {
				return err
			}
			c.ChangeVector = &cv
		}
		return nil
	})
	return c, err
}

// maxBulkCommands bounds one bulk_docs request.
const maxBulkCommands = 100000

func (n *Node) handleBulkDocs(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	if t.shard >= 0 {
		writeError(w, badRequest("write through the database %q, not one shard replica", t.rec.DatabaseName))
		return
	}
	raw, err := readBody(r, n.cfg.HTTP.MaxBodyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	cmds, compact, err := parseBulkCommands(raw)
	if err != nil {
		writeError(w, err)
		return
	}
	if len(cmds) == 0 {
		writeError(w, badRequest(`"Commands" is missing or empty`))
		return
	}
	if len(cmds) > maxBulkCommands {
		writeError(w, badRequest("%d commands; at most %d per request", len(cmds), maxBulkCommands))
		return
	}
	ops, err := n.bulkOps(cmds, compact) // raw is not read again: documents are split in place
	if err != nil {
		writeError(w, err)
		return
	}
	wc, err := n.waitForParam(r, t)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := n.writeOps(r.Context(), t, ops, wc)
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]byte, 0, 128*len(res))
	out = append(out, `{"Results":[`...)
	for i, rr := range res {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendBulkResult(out, rr)
	}
	out = append(out, "]}"...)
	writeRaw(w, http.StatusCreated, out)
}

// bulkOps validates every command before anything is written: one bad
// command refuses the whole batch. The commands' documents are parts of a
// request body the caller owns and does not read again (compact says the
// body held no whitespace): they are split in place, and their bodies share
// its memory.
func (n *Node) bulkOps(cmds []bulkCommand, compact bool) ([]storage.Op, error) {
	ops := make([]storage.Op, len(cmds))
	for i, c := range cmds {
		if err := validateID(c.ID); err != nil {
			return nil, badRequest("command %d: %v", i, err)
		}
		op := storage.Op{ID: c.ID, IfNew: c.ChangeVector != nil && *c.ChangeVector == ""}
		if c.ChangeVector != nil && *c.ChangeVector != "" {
			if _, err := changevector.Parse(*c.ChangeVector); err != nil {
				return nil, badRequest("command %d (%q): ChangeVector: %v", i, c.ID, err)
			}
			op.IfMatch = *c.ChangeVector
		}
		switch strings.ToUpper(c.Type) {
		case "PUT":
			if int64(len(c.Document)) > n.maxDocBytes {
				return nil, badRequest("command %d (%q): document of %d bytes exceeds the limit of %d bytes (http.max-document-bytes, and what one NATS message carries)", i, c.ID, len(c.Document), n.maxDocBytes)
			}
			p, err := document.ParseValidOwned(c.Document, compact) // the body was validated whole
			if err != nil {
				return nil, badRequest("command %d (%q): Document: %v", i, c.ID, err)
			}
			op.Kind, op.Collection, op.Body = storage.OpPut, p.Collection, p.Body
		case "DELETE":
			op.Kind = storage.OpDelete
		default:
			return nil, badRequest("command %d (%q): Type %q: must be PUT or DELETE", i, c.ID, c.Type)
		}
		ops[i] = op
	}
	return ops, nil
}

func appendBulkResult(out []byte, r storage.Result) []byte {
	if r.Kind == storage.OpDelete {
		out = append(out, `{"Type":"DELETE","Id":`...)
		out = document.AppendString(out, r.ID)
		return append(strconv.AppendBool(append(out, `,"Deleted":`...), r.Deleted), '}')
	}
	out = append(out, `{"Type":"PUT","@id":`...)
	out = document.AppendString(out, r.ID)
	out = append(out, `,"@collection":`...)
	if r.Collection == "" {
		out = append(out, `"@empty"`...) // RavenDB's name for the documents of no collection
	} else {
		out = document.AppendString(out, r.Collection)
	}
	out = append(out, `,"@change-vector":`...)
	out = document.AppendString(out, r.ChangeVector)
	out = append(out, `,"@last-modified":"`...)
	out = document.AppendTime(out, r.LastModified)
	return append(out, `"}`...)
}

// writeShard writes one shard's group through a replica of that shard.
func (n *Node) writeShard(ctx context.Context, t target, shard int, ops []storage.Op, wc writeConcern, routed uint64, done func([]storage.Result)) error {
	var extra time.Duration
	if wc.Replicas > 1 {
		extra = wc.Timeout
	}
	err := n.onShardWithin(ctx, t, shard, false, extra, func(ctx context.Context, rep shardReplica) error {
		res, err := rep.write(ctx, ops, wc, routed)
		if err != nil {
			return err
		}
		if len(res) != len(ops) {
			return fmt.Errorf("shard %d answered %d results for %d writes", shard, len(res), len(ops))
		}
		done(res)
		return nil
	})
	if err != nil {
		return fmt.Errorf("shard %d: %w", shard, err)
	}
	return nil
}

// writeConcern is how many replicas must hold a write before it is
// acknowledged, and how long to wait for them.
type writeConcern struct {
	Replicas int
	Timeout  time.Duration
}

// Bounds of ?waitForReplicasTimeout.
const (
	defaultReplicasTimeout = 10 * time.Second
	maxReplicasTimeout     = 120 * time.Second
)

// waitForParam reads ?waitForReplicas=N (the write is acknowledged only
// once N replicas of its shard hold it) and ?waitForReplicasTimeout (a Go
// duration such as 2s; default 10s).
func (n *Node) waitForParam(r *http.Request, t target) (writeConcern, error) {
	wc := writeConcern{Replicas: 1, Timeout: defaultReplicasTimeout}
	q := r.URL.Query()
	if v := q.Get("waitForReplicas"); v != "" {
		w, err := strconv.Atoi(v)
		if err != nil || w < 1 || w > t.rec.ReplicationFactor {
			return wc, badRequest("waitForReplicas %q: must be 1..%d (the database's replication factor)", v, t.rec.ReplicationFactor)
		}
		wc.Replicas = w
	}
	if v := q.Get("waitForReplicasTimeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > maxReplicasTimeout {
			return wc, badRequest("waitForReplicasTimeout %q: must be a duration such as 2s, at most %v", v, maxReplicasTimeout)
		}
		wc.Timeout = d
	}
	return wc, nil
}
