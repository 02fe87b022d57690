package node

import (
	"context"
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
// the fields at paths (each a list of field names) of the documents
// bodies hold (a document's map as docMap gives it; nil for none): a
// string, or the strings of an array, at the end of each path; an array on
// the way is walked element by element ("Lines[].Product", or
// "Lines.Product"). The ids own (the documents' own), values that are not
// valid ids and anything past limit ids are left out.
func referencedIDs(bodies []map[string]any, own []string, paths [][]string, limit int) []string {
	seen := map[string]bool{}
	for _, id := range own {
		seen[strings.ToLower(id)] = true
	}
	var out []string
	add := func(v any) {
		id, ok := v.(string)
		if !ok || len(out) >= limit || seen[strings.ToLower(id)] || bucket.ValidateID(id) != nil {
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
	for _, body := range bodies {
		if body == nil {
			continue
		}
		for _, p := range paths {
			walk(body, p)
		}
	}
	return out
}

// loadedReferences is referencedIDs of a load's documents (nil for a
// missing one), decoded here; one that does not decode names nothing.
func loadedReferences(docs []*storage.Document, paths [][]string) []string {
	bodies := make([]map[string]any, len(docs))
	var own []string
	for i, d := range docs {
		if d == nil {
			continue
		}
		own = append(own, d.ID)
		bodies[i], _ = docMap(d)
	}
	return referencedIDs(bodies, own, paths, maxIncludedFound)
}

// appendIncludes appends the "Includes" object of a load or a query's
// page: the documents ids (see referencedIDs) that exist, by id (the ones
// that do not are left out, as RavenDB's clients expect). It ends the
// answer's object too.
func (n *Node) appendIncludes(ctx context.Context, out []byte, t target, ids []string) ([]byte, error) {
	out = append(out, `"Includes":{`...)
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
