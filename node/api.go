package node

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"net/url"
	"path"
	"reflect"
	"strconv"
	"strings"

	"github.com/shardnode/shardnode/document"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// routes is the HTTP API. Paths follow RavenDB's REST API where it has the
// same operation (docs/api.md lists the deviations).
func (n *Node) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", n.handleHealth)
	mux.Handle("GET /metrics", n.metrics.handler())
	mux.HandleFunc("GET /cluster", n.handleCluster)
	mux.HandleFunc("GET /topology", n.handleTopology)
	mux.HandleFunc("POST /cluster/join", n.handleJoin)
	mux.HandleFunc("DELETE /cluster/nodes/{tag}", n.handleRemoveNode)
	mux.HandleFunc("POST /internal/raft/apply", n.handleApply)
	mux.HandleFunc("POST /internal/raft/read-index", n.handleReadIndex)
	mux.HandleFunc("POST /internal/raft/commit-index", n.handleCommitIndex)
	mux.HandleFunc("POST /admin/raft/snapshot", n.handleRaftSnapshot)
	mux.HandleFunc("GET /admin/resharding/send-limit", n.handleGetSendLimit)
	mux.HandleFunc("PUT /admin/resharding/send-limit", n.handlePutSendLimit)
	mux.HandleFunc("GET /databases/{db}/conflicts", n.handleConflicts)
	mux.HandleFunc("POST /databases/{db}/resharding", n.handleStartResharding)
	mux.HandleFunc("GET /databases/{db}/resharding", n.handleListResharding)
	mux.HandleFunc("GET /databases/{db}/resharding/{id}", n.handleGetResharding)
	mux.HandleFunc("DELETE /databases/{db}/resharding/{id}", n.handleCancelResharding)
	mux.HandleFunc("GET /databases/{db}/events", n.handleEvents)
	mux.HandleFunc("POST /admin/databases/{db}/shards", n.handleAddShard)
	mux.HandleFunc("GET /admin/databases", n.handleListDatabases)
	mux.HandleFunc("PUT /admin/databases/{db}", n.handleCreateDatabase)
	mux.HandleFunc("GET /admin/databases/{db}", n.handleGetDatabase)
	mux.HandleFunc("DELETE /admin/databases/{db}", n.handleDeleteDatabase)
	mux.HandleFunc("GET /databases/{db}/docs", n.handleGetDocs)
	mux.HandleFunc("POST /databases/{db}/docs", n.handlePostGetDocs)
	mux.HandleFunc("PUT /databases/{db}/docs", n.handlePutDoc)
	mux.HandleFunc("DELETE /databases/{db}/docs", n.handleDeleteDoc)
	mux.HandleFunc("POST /databases/{db}/bulk_docs", n.handleBulkDocs)
	mux.HandleFunc("POST /databases/{db}/queries", n.handleQuery)
	mux.HandleFunc("GET /databases/{db}/queries", n.handleQuery)
	mux.HandleFunc("GET /databases/{db}/stats", n.handleStats)
	mux.HandleFunc("GET /databases/{db}/buckets", n.handleBucketsReport)
	mux.HandleFunc("GET /databases/{db}/buckets/{bucket}", n.handleBucket)
	mux.HandleFunc("GET /databases/{db}/sharding/bucket", n.handleBucketOf)
	mux.HandleFunc("GET /databases/{db}/hilo/next", n.handleHiloNext)
	mux.HandleFunc("PUT /databases/{db}/hilo/return", n.handleHiloReturn)
	mux.HandleFunc("POST /databases/{db}/multi_get", n.handleMultiGet(wellFormed(mux)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "RouteNotFound", Msg: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
	})
	if n.cfg.Debug.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof", func(w http.ResponseWriter, r *http.Request) {
			r.URL.Path += "/" // the index itself, not ServeMux's HTML redirect to it
			pprof.Index(w, r)
		})
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return n.metrics.instrument(n.untilReady(wellFormed(mux)))
}

// wellFormed refuses, with JSON errors as every other, what ServeMux and
// url.Query would not refuse as such: a path that is not canonical (`//`,
// `.` or `..` segments), which ServeMux redirects with an HTML body (and
// a 307 that would make a client send a write again elsewhere), and a
// query string that does not parse (a bad percent-escape, a `;`), whose
// pairs url.Query drops silently, so that `id=a%zzb` read as no id.
func wellFormed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.EscapedPath(); r.Method != http.MethodConnect && cleanPath(p) != p {
			writeError(w, &apiError{Status: http.StatusNotFound, Type: "RouteNotFound",
				Msg: fmt.Sprintf("path %q is not canonical (an empty, . or .. segment); did you mean %q?", p, cleanPath(p))})
			return
		}
		if q := r.URL.RawQuery; strings.ContainsAny(q, "%;") {
			if _, err := url.ParseQuery(q); err != nil {
				writeError(w, badRequest("malformed query string: %v", err))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPath is the canonical form of an escaped path, as ServeMux makes it
// before it redirects: . and .. resolved, runs of / made one, a trailing /
// kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// untilReady answers requests about databases with 503 NodeStarting until
// the node has replayed the raft log and opened its replicas: before then
// its records are incomplete, and "database does not exist" would be a
// false answer that a client could act on (recreate it, give up). Health,
// cluster membership, joins, forwarded raft commands and profiles are
// served throughout: other nodes and operators need them while it starts.
func (n *Node) untilReady(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !n.ready.Load() && needsRecords(r.URL.Path) {
			w.Header().Set("Retry-After", "1")
			writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "NodeStarting",
				Msg: fmt.Sprintf("node %s is starting: it serves databases once it has replayed the raft log; retry shortly or ask another node", n.cfg.Node.Tag)})
			return
		}
		if (n.removed.Load() || n.removedForGood.Load()) && needsRecords(r.URL.Path) {
			writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "NodeRemoved",
				Msg: fmt.Sprintf("node %s was removed from the cluster: it serves no database; ask another node", n.cfg.Node.Tag)})
			return
		}
		if needsRecords(r.URL.Path) && writes(r) && !n.fresh.wait(r.Context(), freshWait) {
			w.Header().Set("Retry-After", "1")
			writeError(w, n.errNotFresh())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writes reports whether a request may change data or state: everything
// but reads, queries and POST /docs (a GET by ids).
func writes(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return false
	case http.MethodPost:
		return !strings.HasSuffix(r.URL.Path, "/queries") && !strings.HasSuffix(r.URL.Path, "/docs")
	}
	return true
}

// needsRecords reports whether a request's answer depends on the
// database records.
func needsRecords(path string) bool {
	return strings.HasPrefix(path, "/databases/") || strings.HasPrefix(path, "/admin/") || path == "/topology"
}

// apiError is an error with its HTTP status and a type name for clients.
type apiError struct {
	Status int
	Type   string
	Msg    string
	// Owner, on a BucketNotOwned refusal, is what the refusing replica's
	// record says, so the router can go to the new owner at once.
	Owner *ownerHint
	// AskAgain, on a retryable refusal of a write, says that the router
	// should ask the same member again after its pause rather than the
	// shard's next member: the refusing replica takes the write itself
	// shortly, and another member that took it meanwhile would hold a
	// write the member reads go to lacks (a span lease about to flip
	// empty buckets, see spanLeases.refuse).
	AskAgain bool
}

// ownerHint names the shard that owns a refused write's bucket and the
// etag of the record that says so.
type ownerHint struct {
	Shard      int
	RecordEtag uint64
}

func (e *apiError) Error() string { return e.Msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "BadRequest", Msg: fmt.Sprintf(format, args...)}
}

func notFound(typ, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: typ, Msg: fmt.Sprintf(format, args...)}
}

func unavailable(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "ServiceUnavailable", Msg: fmt.Sprintf(format, args...)}
}

// toAPIError maps internal errors to statuses.
func toAPIError(err error) *apiError {
	var ae *apiError
	var ce *storage.ConcurrencyError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ce):
		return &apiError{Status: http.StatusConflict, Type: "ConcurrencyException", Msg: ce.Error()}
	case errors.Is(err, raftfsm.ErrDatabaseExists):
		return &apiError{Status: http.StatusConflict, Type: typeOf(raftfsm.ErrDatabaseExists), Msg: err.Error()}
	case errors.Is(err, raftfsm.ErrDatabaseNotFound):
		return &apiError{Status: http.StatusNotFound, Type: typeOf(raftfsm.ErrDatabaseNotFound), Msg: err.Error()}
	case errors.Is(err, raftfsm.ErrInvalid):
		return &apiError{Status: http.StatusBadRequest, Type: typeOf(raftfsm.ErrInvalid), Msg: err.Error()}
	case errors.Is(err, raftfsm.ErrConflict):
		return &apiError{Status: http.StatusConflict, Type: typeOf(raftfsm.ErrConflict), Msg: err.Error()}
	case errors.Is(err, raftfsm.ErrStale):
		return &apiError{Status: http.StatusConflict, Type: typeOf(raftfsm.ErrStale), Msg: err.Error()}
	case errors.Is(err, raftfsm.ErrNodeNotFound):
		return &apiError{Status: http.StatusNotFound, Type: typeOf(raftfsm.ErrNodeNotFound), Msg: err.Error()}
	case errors.Is(err, raftfsm.ErrNodeIDConflict):
		return &apiError{Status: http.StatusConflict, Type: typeOf(raftfsm.ErrNodeIDConflict), Msg: err.Error()}
	case errors.Is(err, raftfsm.ErrOperationNotFound):
		return &apiError{Status: http.StatusNotFound, Type: typeOf(raftfsm.ErrOperationNotFound), Msg: err.Error()}
	case errors.Is(err, storage.ErrClosed):
		// Retryable on another replica, as a replica that is not open.
		return &apiError{Status: http.StatusServiceUnavailable, Type: "ShardNotOnThisNode",
			Msg: fmt.Sprintf("the replica closed under the request (its database was deleted or its shard left the node): %v", err)}
	case errors.Is(err, ErrNotLeader):
		return unavailable("%v", err)
	case errors.Is(err, errTimeout):
		return &apiError{Status: http.StatusGatewayTimeout, Type: "Timeout", Msg: err.Error() + " (a write may or may not have been applied)"}
	default:
		return &apiError{Status: http.StatusInternalServerError, Type: "InternalError", Msg: err.Error()}
	}
}

// typeOf names a state-machine error for clients (and for decoding a
// forwarded command's answer back into the sentinel).
func typeOf(err error) string {
	switch err {
	case raftfsm.ErrDatabaseExists:
		return "DatabaseAlreadyExists"
	case raftfsm.ErrDatabaseNotFound:
		return "DatabaseDoesNotExist"
	case raftfsm.ErrInvalid:
		return "BadRequest"
	case raftfsm.ErrConflict:
		return "Conflict"
	case raftfsm.ErrStale:
		return "StaleMigrationStep"
	case raftfsm.ErrNodeNotFound:
		return "NodeNotFound"
	case raftfsm.ErrNodeIDConflict:
		return "NodeIdConflict"
	case raftfsm.ErrOperationNotFound:
		return "OperationNotFound"
	}
	return "InternalError"
}

// errorBody is every error's JSON body.
type errorBody struct {
	Error string `json:"Error"`
	Type  string `json:"Type"`
}

func writeError(w http.ResponseWriter, err error) {
	ae := toAPIError(err)
	writeJSON(w, ae.Status, errorBody{Error: ae.Msg, Type: ae.Type})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshalAnswer(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = marshalAnswer(errorBody{Error: "encode response: " + err.Error(), Type: "InternalError"})
	}
	writeRaw(w, status, b)
}

// marshalAnswer is json.Marshal without HTML's escapes: a message reads
// "0 <= FromBucket", not "0 \u003c= FromBucket", to a client that prints
// the raw body. JSON allows both.
func marshalAnswer(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// jsonContentType is every answer's Content-Type header value; net/http
// only reads it.
var jsonContentType = []string{"application/json; charset=utf-8"}

// writeRaw answers b, a whole JSON answer that nothing changes after
// this call.
func writeRaw(w http.ResponseWriter, status int, b []byte) { writeAnswer(w, status, b, true) }

// writeRawCopy is writeRaw for a b its caller reuses once it returns (a
// pooled buffer): w copies it, or sends it, before it returns.
func writeRawCopy(w http.ResponseWriter, status int, b []byte) { writeAnswer(w, status, b, false) }

// writeAnswer answers b; owned says whether w may keep b as it is.
func writeAnswer(w http.ResponseWriter, status int, b []byte, owned bool) {
	h := w.Header()
	h["Content-Type"] = jsonContentType // canonical keys: no Set, no copy
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	if o, ok := w.(ownedWriter); ok && owned {
		o.writeOwned(b)
		return
	}
	_, _ = w.Write(b)
}

// ownedWriter is a ResponseWriter that can send a whole answer without
// copying it, given that its caller never changes it afterwards: front's
// (and the wrappers that pass it on). A query's or a listing's answer is
// as large as its results; a copy into the server's buffer doubled what
// it held while it was written.
type ownedWriter interface {
	writeOwned(b []byte)
}

// readBody reads at most limit bytes of the request body; a larger body is
// a 413.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	var b []byte
	var err error
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		// RavenDB's clients compress request bodies; the limit applies to
		// what the body inflates to.
		zr, zerr := gzip.NewReader(r.Body)
		if zerr != nil {
			return nil, badRequest("read request body: Content-Encoding gzip: %v", zerr)
		}
		defer zr.Close()
		if b, err = io.ReadAll(io.LimitReader(zr, limit+1)); err != nil {
			return nil, badRequest("read request body: Content-Encoding gzip: %v", err)
		}
		if int64(len(b)) > limit {
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: "BodyTooLarge", Msg: fmt.Sprintf("request body inflates to more than the limit of %d bytes for %s %s", limit, r.Method, r.URL.Path)}
		}
		return b, nil
	default:
		return nil, &apiError{Status: http.StatusUnsupportedMediaType, Type: "UnsupportedContentEncoding", Msg: fmt.Sprintf("Content-Encoding %q is not supported: send the body as is or gzip-compressed", enc)}
	}
	if n := r.ContentLength; n > 0 && n <= limit {
		// The size is known: one allocation, where io.ReadAll would grow a
		// megabyte bulk body through a dozen copies.
		b = make([]byte, n)
		if _, err = io.ReadFull(r.Body, b); errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("body shorter than its Content-Length %d: %w", n, err)
		}
	} else {
		b, err = io.ReadAll(io.LimitReader(r.Body, limit+1))
	}
	if err != nil {
		return nil, badRequest("read request body: %v", err)
	}
	if int64(len(b)) > limit {
		return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: "BodyTooLarge", Msg: fmt.Sprintf("request body exceeds the limit of %d bytes for %s %s", limit, r.Method, r.URL.Path)}
	}
	return b, nil
}

// decodeJSON strictly decodes a JSON request body into v: a field named
// twice, in one spelling or in two cases (encoding/json matches field
// names in any case, and keeps the last), is refused rather than guessed.
func decodeJSON(b []byte, v any) error {
	if err := keysOnce(b, true); err != nil {
		return err
	}
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return badRequest("malformed JSON body: null, want an object") // encoding/json would leave v as it is
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonBodyError(err)
	}
	if dec.More() {
		return badRequest("malformed JSON body: trailing data after the JSON value")
	}
	return nil
}

// jsonBodyError is the 400 for a request body encoding/json could not
// decode, a value of the wrong type named in JSON's words (`"Shards" is
// string, want a whole number`), not Go's.
func jsonBodyError(err error) error {
	var te *json.UnmarshalTypeError
	switch {
	case !errors.As(err, &te):
		return badRequest("malformed JSON body: %v", err)
	case te.Field != "":
		return badRequest("malformed JSON body: %q is %s, want %s", te.Field, te.Value, jsonKind(te.Type))
	}
	return badRequest("malformed JSON body: the body is %s, want %s", te.Value, jsonKind(te.Type))
}

// jsonKind says in JSON's words what a body's field of Go type t takes,
// for a client that sent something else.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<(t.Bits())-1)
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value of another type"
}

// jsonKindOf names the kind of the JSON value v (valid JSON) as
// encoding/json's errors do: object, array, string, number, bool or null.
func jsonKindOf(v []byte) string {
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// keysOnce refuses a request body that names one field twice: the same key
// (which document.Validate refuses), or two keys equal in any case, which
// encoding/json decodes into one field, keeping the last. deep checks the
// objects inside the top-level one too; a body holding client-named maps
// (query parameters) checks only its top level. It also refuses what
// document.Validate refuses in any body: invalid UTF-8, numbers beyond
// float64's range.
func keysOnce(b []byte, deep bool) error {
	if _, err := document.Validate(b); err != nil {
		return badRequest("malformed JSON body: %v", err)
	}
	return foldedKeysOnce(bytes.TrimSpace(b), deep)
}

// foldedKeysOnce is keysOnce's check of v, valid JSON, for keys equal in
// any case.
func foldedKeysOnce(v []byte, deep bool) error {
	switch {
	case len(v) > 0 && v[0] == '{':
		seen := map[string]string{}
		return document.Members(v, func(k, val []byte) error {
			key, err := document.Unquote(k)
			if err != nil {
				return badRequest("malformed JSON body: key %s: %v", k, err)
			}
			folded := strings.ToLower(strings.ToUpper(key))
			if first, ok := seen[folded]; ok {
				return badRequest("malformed JSON body: %q and %q name the same field (field names match in any case)", first, key)
			}
			seen[folded] = key
			if deep {
				return foldedKeysOnce(val, deep)
			}
			return nil
		})
	case deep && len(v) > 0 && v[0] == '[':
		return document.Elements(v, func(e []byte) error { return foldedKeysOnce(e, deep) })
	}
	return nil
}
