package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/document"
	"github.com/shardnode/shardnode/storage"
)

// Includes: a load may name fields of the documents it reads that hold
// the ids of other documents (?include=Customer, RavenDB's
// session.include(...).load(...)); the answer then carries those documents
// too, under "Includes", so that the client reads them without another
// round trip.

// Bounds of a load's includes.
const (
	maxIncludePaths  = 64
	maxIncludePath   = 512
	maxIncludedFound = maxIDsPerGet
)

// includePaths reads and checks the include parameters of a load: each a
// path of field names joined by '.', each name perhaps ending in '[]'.
func includePaths(rawQuery string) ([][]string, error) {
	raw := queryValues(nil, rawQuery, "include")
	if len(raw) > maxIncludePaths {
		return nil, badRequest("%d include paths; at most %d", len(raw), maxIncludePaths)
	}
	paths := make([][]string, len(raw))
	for i, p := range raw {
		if p == "" || len(p) > maxIncludePath {
			return nil, badRequest("include %q: a field path of 1 to %d bytes, such as Customer or Lines[].Product", p, maxIncludePath)
		}
		for _, seg := range strings.Split(p, ".") {
			if seg = strings.TrimSuffix(seg, "[]"); seg == "" {
				return nil, badRequest("include %q: an empty segment", p)
			}
			paths[i] = append(paths[i], seg)
		}
	}
	return paths, nil
}

// referencedIDs returns, in first-seen order and once each, the ids that
// the fields at paths (each a list of field names) of docs hold: a
// string, or the strings of an array, at the end of each path; an array on
// the way is walked element by element ("Lines[].Product", or
// "Lines.Product"). Ids of docs themselves, values that are not valid ids
// and anything past max ids are left out.
func referencedIDs(docs []*storage.Document, paths [][]string, max int) []string {
	seen := map[string]bool{}
	for _, d := range docs {
		if d != nil {
			seen[strings.ToLower(d.ID)] = true
		}
	}
	var out []string
	add := func(v any) {
		id, ok := v.(string)
		if !ok || len(out) >= max || seen[strings.ToLower(id)] || bucket.ValidateID(id) != nil {
			return
		}
		seen[strings.ToLower(id)] = true
		out = append(out, id)
	}
	var walk func(v any, segs []string)
	walk = func(v any, segs []string) {
		if arr, ok := v.([]any); ok {
			for _, e := range arr {
				walk(e, segs)
			}
			return
		}
		if len(segs) == 0 {
			add(v)
			return
		}
		if m, ok := v.(map[string]any); ok {
			walk(m[segs[0]], segs[1:])
		}
	}
	for _, d := range docs {
		if d == nil || len(d.Body) == 0 {
			continue
		}
		var body any
		if json.Unmarshal(d.Body, &body) != nil {
			continue
		}
		for _, p := range paths {
			walk(body, p)
		}
	}
	return out
}

// appendIncludes appends the "Includes" object of a load or a query's
// page: the documents that docs reference at paths, by id; the ones that
// do not exist are left out, as RavenDB's clients expect. It ends the
// answer's object too.
func (n *Node) appendIncludes(ctx context.Context, out []byte, t target, docs []*storage.Document, paths [][]string) ([]byte, error) {
	out = append(out, `"Includes":{`...)
	ids := referencedIDs(docs, paths, maxIncludedFound)
	if len(ids) > 0 {
		inc, shards, err := n.fetchDocs(ctx, t, ids)
		if err != nil {
			return nil, fmt.Errorf("read the included documents: %w", err)
		}
		first := true
		for i, d := range inc {
			if d == nil {
				continue
			}
			if !first {
				out = append(out, ',')
			}
			first = false
			out = document.AppendString(out, d.ID)
			out = append(out, ':')
			out = renderDoc(out, d, d.Bucket, shards[i])
		}
	}
	return append(out, '}', '}'), nil
}
