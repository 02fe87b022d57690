package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// POST /databases/{db}/multi_get runs several reads in one round trip, as
// RavenDB's clients send their lazy operations (session.advanced.lazily:
// loads, queries, counts), and answers each as it would have been answered
// alone.

// maxMultiGetRequests bounds how many reads one multi_get holds.
const maxMultiGetRequests = 1024

// multiGetRequest is one read of a multi_get body, in RavenDB's shape: Url
// is the path (/databases/{db}/...), Query its query string (with or
// without its '?'), Content a POST's JSON body.
type multiGetRequest struct {
	Url     string            `json:"Url"`
	Query   string            `json:"Query"`
	Method  string            `json:"Method"`
	Headers map[string]string `json:"Headers"`
	Content json.RawMessage   `json:"Content"`
}

// multiGetResult is one read's answer: its body as JSON (null when it has
// none), its status and its headers but the body's own.
type multiGetResult struct {
	Result     json.RawMessage   `json:"Result"`
	StatusCode int               `json:"StatusCode"`
	Headers    map[string]string `json:"Headers"`
}

// handleMultiGet returns the multi_get handler, which runs each read
// through inner, the API's routes.
func (n *Node) handleMultiGet(inner http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := n.resolve(r.PathValue("db")); err != nil {
			writeError(w, err)
			return
		}
		raw, err := readBody(r, n.cfg.HTTP.MaxBodyBytes)
		if err != nil {
			writeError(w, err)
			return
		}
		var body struct {
			Requests []multiGetRequest `json:"Requests"`
		}
		if err := decodeJSON(raw, &body); err != nil {
			writeError(w, badRequest("malformed JSON body: %v", err))
			return
		}
		if len(body.Requests) > maxMultiGetRequests {
			writeError(w, badRequest("Requests: %d reads, at most %d in one multi_get", len(body.Requests), maxMultiGetRequests))
			return
		}
		reqs := make([]*http.Request, len(body.Requests))
		for i, mg := range body.Requests {
			if reqs[i], err = multiGetRead(r, r.PathValue("db"), mg); err != nil {
				writeError(w, badRequest("Requests[%d]: %v", i, err))
				return
			}
		}
		results := make([]multiGetResult, len(reqs))
		for i, req := range reqs {
			rec := &recorder{header: http.Header{}, status: http.StatusOK}
			inner.ServeHTTP(rec, req)
			results[i] = rec.result()
			if results[i].StatusCode == http.StatusNotFound && errorType(results[i].Result) == "DocumentDoesNotExist" {
				// A lazy load of one missing document: the clients read
				// the load's answer, and this one says it is missing.
				results[i].Result = json.RawMessage(`{"Results":[null],"Includes":{}}`)
			}
		}
		writeJSON(w, http.StatusOK, struct {
			Results []multiGetResult `json:"Results"`
		}{results})
	}
}

// multiGetRead builds the request for one read of a multi_get sent to
// database db: a GET, or a POST of a query or of ids, of that database or
// one of its shard replicas, and never an event stream or another
// multi_get.
func multiGetRead(outer *http.Request, db string, mg multiGetRequest) (*http.Request, error) {
	method := strings.ToUpper(mg.Method)
	if method == "" {
		method = http.MethodGet
	}
	path := mg.Url
	if !strings.HasPrefix(path, "/") {
		path = "/databases/" + db + "/" + path
	}
	rest, ok := strings.CutPrefix(path, "/databases/")
	if !ok {
		return nil, fmt.Errorf("Url %q: not a path under /databases/", mg.Url)
	}
	name, sub, _ := strings.Cut(rest, "/")
	if base, _, _ := strings.Cut(name, "$"); !strings.EqualFold(base, strings.Split(db, "$")[0]) {
		return nil, fmt.Errorf("Url %q: of database %q, not of %q", mg.Url, name, db)
	}
	switch {
	case method == http.MethodGet && sub != "events" && sub != "multi_get":
	case method == http.MethodPost && (sub == "queries" || sub == "docs"):
	default:
		return nil, fmt.Errorf("%s %s: a multi_get holds reads only (GET, or POST of queries or docs)", method, mg.Url)
	}
	target := path
	if q := strings.TrimPrefix(mg.Query, "?"); q != "" {
		target += "?" + q
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, fmt.Errorf("Url and Query %q: %v", target, err)
	}
	var content []byte
	if c := bytes.TrimSpace(mg.Content); len(c) > 0 && !bytes.Equal(c, []byte("null")) {
		content = c
		if c[0] == '"' { // a body sent as a JSON string holding the JSON
			var s string
			if err := json.Unmarshal(c, &s); err != nil {
				return nil, fmt.Errorf("Content: %v", err)
			}
			content = []byte(s)
		}
	}
	req, err := http.NewRequestWithContext(outer.Context(), method, u.String(), bytes.NewReader(content))
	if err != nil {
		return nil, err
	}
	for k, v := range mg.Headers {
		req.Header.Set(k, v)
	}
	return req, nil
}

// recorder is the ResponseWriter of one read of a multi_get.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// result is the read's answer as multi_get sends it.
func (r *recorder) result() multiGetResult {
	res := multiGetResult{StatusCode: r.status, Headers: map[string]string{}}
	for k, v := range r.header {
		if k != "Content-Length" && k != "Content-Type" && len(v) > 0 {
			res.Headers[k] = v[0]
		}
	}
	if b := bytes.TrimSpace(r.body.Bytes()); len(b) > 0 && json.Valid(b) {
		res.Result = b
	} else {
		res.Result = json.RawMessage("null")
	}
	return res
}

// errorType is the Type of an error body, or "" for any other answer.
func errorType(body []byte) string {
	var e errorBody
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Type
}
