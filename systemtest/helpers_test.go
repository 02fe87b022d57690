package systemtest

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"

	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/testcluster"
)

// replicaView is what one replica holds: id → version (the version part
// of its change vector) and body.
func replicaView(t testing.TB, url, db string, shard int) (map[string]string, error) {
	r, err := testcluster.Expect(200, "POST", fmt.Sprintf("%s/databases/%s$%d/queries", url, db, shard), `{"Query":"from @all_docs"}`)
	if err != nil {
		return nil, err
	}
	var out struct {
		Results []map[string]any
	}
	if err := json.Unmarshal(r.Body, &out); err != nil {
		return nil, err
	}
	view := map[string]string{}
	for _, d := range out.Results {
		md := d["@metadata"].(map[string]any)
		cv, err := changevector.Parse(md["@change-vector"].(string))
		if err != nil {
			return nil, err
		}
		// A moved item's order part is each destination replica's own
		// (DESIGN §2), like an etag; its version is the document's history,
		// which every replica must agree on.
		view[md["@id"].(string)] = cv.Version.String() + " " + mustJSON(withoutMeta(d))
	}
	return view, nil
}

func withoutMeta(d map[string]any) map[string]any {
	c := map[string]any{}
	for k, v := range d {
		if k != "@metadata" {
			c[k] = v
		}
	}
	return c
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// shardMembers reads each shard's members from the record.
func shardMembers(t testing.TB, url, db string) map[int][]string {
	t.Helper()
	rec := testcluster.Must(t, 200, "GET", url+"/admin/databases/"+db, "").JSON(t)
	out := map[int][]string{}
	for k, v := range rec["Sharding"].(map[string]any)["Shards"].(map[string]any) {
		var n int
		fmt.Sscan(k, &n)
		for _, m := range v.(map[string]any)["Members"].([]any) {
			out[n] = append(out[n], m.(string))
		}
	}
	return out
}

// converged checks that every replica of every shard holds the same
// documents, bodies and versions.
func converged(t testing.TB, c *testcluster.Cluster, db string) error {
	members := shardMembers(t, c.URL(0), db)
	shards := make([]int, 0, len(members))
	for s := range members {
		shards = append(shards, s)
	}
	sort.Ints(shards)
	for _, s := range shards {
		var first map[string]string
		var firstTag string
		for _, tag := range members[s] {
			m := memberByTag(c, tag)
			view, err := replicaView(t, m.URL(), db, s)
			if err != nil {
				return err
			}
			if first == nil {
				first, firstTag = view, tag
				continue
			}
			if len(view) != len(first) {
				return fmt.Errorf("shard %d: %s holds %d documents, %s holds %d", s, firstTag, len(first), tag, len(view))
			}
			for id, v := range first {
				if view[id] != v {
					return fmt.Errorf("shard %d, %q: %s has %s, %s has %s", s, id, firstTag, v, tag, view[id])
				}
			}
		}
	}
	return nil
}

func memberByTag(c *testcluster.Cluster, tag string) *testcluster.Member {
	for _, m := range c.Members {
		if m.Tag == tag {
			return m
		}
	}
	panic("no member " + tag)
}
