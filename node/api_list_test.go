package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/storage"
)

// TestTopKKeepsTheLeast: whatever the values and k, a topK gives the k
// least values added, in order, as sorting them all would.
func TestTopKKeepsTheLeast(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vals := rapid.SliceOf(rapid.IntRange(-20, 20)).Draw(t, "values")
		k := rapid.IntRange(0, 12).Draw(t, "k")
		top := topK[int]{k: k, cmp: func(a, b int) int { return a - b }}
		for _, v := range vals {
			top.add(v)
		}
		want := slices.Sorted(slices.Values(vals))
		want = want[:min(k, len(want))]
		if got := top.sorted(); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("top %d of %v = %v, want %v", k, vals, got, want)
		}
	})
}

// TestMergeCandidates: shards' candidates merge into one order (by id
// ignoring case, or newest first with ties by id) before the page is cut.
func TestMergeCandidates(t *testing.T) {
	merge := func(limit int, perShard ...[]listKey) []listKey {
		top := topK[listKey]{k: limit, cmp: cmpListKeys}
		for _, keys := range perShard {
			mergeCandidates(&top, keys)
		}
		return top.sorted()
	}
	ids := func(ks []listKey) string {
		var s []string
		for _, k := range ks {
			s = append(s, k.ID)
		}
		return strings.Join(s, ",")
	}
	byID := merge(4, []listKey{{ID: "b"}, {ID: "D"}}, []listKey{{ID: "a"}, {ID: "C"}, {ID: "e"}}, nil)
	if got := ids(pageOf(byID, 1, 3)); got != "b,C,D" {
		t.Fatalf("by id, case-insensitively: %s", got)
	}
	if got := pageOf(byID, 5, 3); got != nil {
		t.Fatalf("past the end: %v", got)
	}
	recent := merge(10, []listKey{{ID: "x", LastModified: 5}, {ID: "b", LastModified: 1}}, []listKey{{ID: "a", LastModified: 5}, {ID: "z", LastModified: 9}})
	if got := ids(pageOf(recent, 0, 10)); got != "z,a,x,b" {
		t.Fatalf("most recent first, ties by id: %s", got)
	}
}

func TestParseListParams(t *testing.T) {
	p, err := parseListParams(url.Values{})
	if err != nil || p.start != 0 || p.pageSize != maxListPageSize || p.args.ByID || p.args.Limit != maxListPageSize {
		t.Fatalf("defaults: %+v %v", p, err)
	}
	// As RavenDB's clients send it: empty matches, exclude and startAfter.
	p, err = parseListParams(url.Values{"startsWith": {"users/"}, "matches": {""}, "exclude": {""}, "startAfter": {""}, "start": {"20"}, "pageSize": {"25"}, "metadataOnly": {"true"}})
	if err != nil || !p.args.ByID || p.args.Prefix != "users/" || p.args.Limit != 45 || !p.metadataOnly {
		t.Fatalf("by prefix: %+v %v", p, err)
	}
	// startsWith present but empty: every id, in id order.
	if p, err = parseListParams(url.Values{"startsWith": {""}}); err != nil || !p.args.ByID {
		t.Fatalf("empty startsWith: %+v %v", p, err)
	}
}

// listed is one listing answer.
type listed struct {
	Results []map[string]any
}

func (l listed) ids() []string {
	var out []string
	for _, d := range l.Results {
		out = append(out, d["@metadata"].(map[string]any)["@id"].(string))
	}
	return out
}

func (c client) list(path string) listed {
	c.t.Helper()
	r := c.must(200, "GET", path, "")
	var l listed
	if err := json.Unmarshal(r.Body, &l); err != nil {
		c.t.Fatalf("GET %s: %v: %s", path, err, r.Body)
	}
	return l
}

// TestListDocumentsByPrefix: a listing by prefix over three shards comes in
// case-insensitive id order, pages by start and by startAfter alike,
// applies matches and exclude, never shows a tombstone, renders each
// document as a GET by id does, and through "{db}${n}" lists that replica
// alone.
func TestListDocumentsByPrefix(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3}`)
	var cmds []string
	var want []string // live users/ ids, lower-cased, in order
	for i := 1; i <= 40; i++ {
		id := fmt.Sprintf("users/%d", i)
		if i%10 == 0 {
			id = fmt.Sprintf("USERS/%d", i) // listed by its lower-cased spelling
		}
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":%q,"Document":{"N":%d,"@metadata":{"@collection":"Users"}}}`, id, i))
		if i != 5 {
			want = append(want, strings.ToLower(id))
		}
	}
	cmds = append(cmds, `{"Type":"PUT","Id":"orders/1$users/3","Document":{}}`, `{"Type":"PUT","Id":"usersX","Document":{}}`, `{"Type":"DELETE","Id":"users/5"}`)
	c.must(201, "POST", "/databases/shop/bulk_docs", `{"Commands":[`+strings.Join(cmds, ",")+`]}`)
	slices.Sort(want)
	lower := func(ids []string) []string {
		out := slices.Clone(ids)
		for i := range out {
			out[i] = strings.ToLower(out[i])
		}
		return out
	}

	all := c.list("/databases/shop/docs?startsWith=Users/&pageSize=100")
	if got := lower(all.ids()); !slices.Equal(got, want) {
		t.Fatalf("listing:\n got %v\nwant %v", got, want)
	}
	shards := map[float64]bool{}
	for _, d := range all.Results {
		shards[d["@metadata"].(map[string]any)["@shard"].(float64)] = true
	}
	if len(shards) != 3 {
		t.Fatalf("the listing came from shards %v, want all 3", shards)
	}

	// Paging by start and by startAfter gives the same pages.
	var byStart, byAfter []string
	after := ""
	for start := 0; start < len(want)+7; start += 7 {
		byStart = append(byStart, c.list(fmt.Sprintf("/databases/shop/docs?startsWith=users/&start=%d&pageSize=7", start)).ids()...)
		page := c.list("/databases/shop/docs?startsWith=users/&pageSize=7&startAfter=" + url.QueryEscape(after)).ids()
		if len(page) > 0 {
			after = page[len(page)-1]
		}
		byAfter = append(byAfter, page...)
	}
	if !slices.Equal(lower(byStart), want) || !slices.Equal(lower(byAfter), want) {
		t.Fatalf("pages:\nby start %v\nby startAfter %v\nwant %v", byStart, byAfter, want)
	}

	// matches and exclude apply to the part after the prefix (sent
	// unescaped, as RavenDB's clients send them); start counts what they
	// keep. 1* and ?0 match 1, 10-19, 20, 30 and 40; 1? and 20 exclude
	// 10-19 and 20; start=1 skips users/1.
	got := c.list("/databases/shop/docs?startsWith=users/&matches=1*|?0&exclude=1?|20&start=1").ids()
	if fmt.Sprint(lower(got)) != "[users/30 users/40]" {
		t.Fatalf("matches/exclude: %v", got)
	}

	// Rendered as a GET by id renders it; metadataOnly leaves the body out.
	one := c.must(200, "GET", "/databases/shop/docs?id=users/7", "").json(t)["Results"].([]any)[0]
	page := c.list("/databases/shop/docs?startsWith=users/7&pageSize=1").Results
	if len(page) != 1 || fmt.Sprint(page[0]) != fmt.Sprint(one) {
		t.Fatalf("listed %v, by id %v", page, one)
	}
	md := c.list("/databases/shop/docs?startsWith=users/7&pageSize=1&metadataOnly=true").Results
	if len(md) != 1 || len(md[0]) != 1 || md[0]["@metadata"].(map[string]any)["@id"] != "users/7" {
		t.Fatalf("metadataOnly: %v", md)
	}
	if r := c.list("/databases/shop/docs?startsWith=users/&pageSize=0"); len(r.Results) != 0 {
		t.Fatalf("pageSize=0: %v", r.ids())
	}

	// One replica: its own documents only.
	var total int
	for s := 0; s < 3; s++ {
		part := c.list(fmt.Sprintf("/databases/shop$%d/docs?startsWith=users/", s))
		for _, d := range part.Results {
			if d["@metadata"].(map[string]any)["@shard"] != float64(s) {
				t.Fatalf("shop$%d listed %v", s, d)
			}
		}
		if !slices.IsSortedFunc(lower(part.ids()), strings.Compare) {
			t.Fatalf("shop$%d: %v", s, part.ids())
		}
		total += len(part.Results)
	}
	if total != len(want) {
		t.Fatalf("the shards list %d documents together, want %d", total, len(want))
	}
}

// TestListRecentDocuments: without startsWith the most recently modified
// documents come first, over every shard, and tombstones never show.
func TestListRecentDocuments(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 3}`)
	var order []string // most recent first
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("doc/%d", i)
		c.must(201, "PUT", "/databases/db/docs?id="+id, `{}`)
		order = slices.Insert(order, 0, id)
	}
	c.must(201, "PUT", "/databases/db/docs?id=doc/3", `{"again":true}`) // now the latest
	order = slices.Insert(slices.DeleteFunc(order, func(s string) bool { return s == "doc/3" }), 0, "doc/3")
	c.must(204, "DELETE", "/databases/db/docs?id=doc/7", "")
	order = slices.DeleteFunc(order, func(s string) bool { return s == "doc/7" })

	if got := c.list("/databases/db/docs").ids(); !slices.Equal(got, order) {
		t.Fatalf("recent:\n got %v\nwant %v", got, order)
	}
	if got := c.list("/databases/db/docs?start=2&pageSize=3").ids(); !slices.Equal(got, order[2:5]) {
		t.Fatalf("start=2&pageSize=3: %v, want %v", got, order[2:5])
	}
	// Every shard's part is in the same order.
	for s := 0; s < 3; s++ {
		got := c.list(fmt.Sprintf("/databases/db$%d/docs", s)).ids()
		wantPart := slices.DeleteFunc(slices.Clone(order), func(id string) bool { return n.recordOf("db").ShardOf(bucket.ForID(id)) != s })
		if !slices.Equal(got, wantPart) {
			t.Fatalf("db$%d: %v, want %v", s, got, wantPart)
		}
	}
}

// TestListingShowsALeftoverOnce: a copy of a document on a shard that does
// not own its bucket (left there by a move) is listed once, from the
// owner, as a query counts it; through "{db}${n}" the leftover shows.
func TestListingShowsALeftoverOnce(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *config.Config) { c.Resharding.MigratorIntervalMs = 3_600_000 })
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 3}`)
	c.must(201, "PUT", "/databases/db/docs?id=k/1", `{"v":"owner"}`)
	owner := n.recordOf("db").ShardOf(bucket.ForID("k/1"))
	other := (owner + 1) % 3
	s, _, ok := n.replicas.getWithReplicator("db", other)
	if !ok {
		t.Fatalf("shard %d is not open", other)
	}
	if _, err := s.Write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: "k/1", Body: []byte(`{"v":"leftover"}`)}}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/databases/db/docs?startsWith=k/", "/databases/db/docs"} {
		got := c.list(path).Results
		if len(got) != 1 || got[0]["v"] != "owner" || got[0]["@metadata"].(map[string]any)["@shard"] != float64(owner) {
			t.Fatalf("GET %s: %v", path, got)
		}
	}
	if got := c.list(fmt.Sprintf("/databases/db$%d/docs?startsWith=k/", other)).Results; len(got) != 1 || got[0]["v"] != "leftover" {
		t.Fatalf("the leftover through db$%d: %v", other, got)
	}
}

// TestListingBadParameters: each bad parameter is a 400 whose message
// names it.
func TestListingBadParameters(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	for _, tc := range []struct{ query, names string }{
		{"start=-1", "start"},
		{"start=abc", "start"},
		{"start=1.5", "start"},
		{"pageSize=-3", "pageSize"},
		{"pageSize=ten", "pageSize"},
		{"pageSize=1025", "1024"},
		{"start=9990&pageSize=20", "10000"},
		{"start=10001", "start"},
		{"startsWith=users/&startAfter=orders/1", "startAfter"},
		{"matches=1*", "matches"},
		{"exclude=1*", "exclude"},
		{"startAfter=users/1", "startAfter"},
		{"metadataOnly=maybe", "metadataOnly"},
		{"etag=5", "etag"},
		{"startsWith=" + strings.Repeat("x", 513), "startsWith"},
		{"startsWith=a&matches=" + strings.Repeat("*", 1025), "matches"},
		{"startsWith=%FF", "startsWith"},
	} {
		r := c.do("GET", "/databases/db/docs?"+tc.query, "")
		var e struct{ Error, Type string }
		if r.Status != 400 || json.Unmarshal(r.Body, &e) != nil || e.Type != "BadRequest" || !strings.Contains(e.Error, tc.names) {
			t.Errorf("?%.60s: %d %s, want a 400 naming %s", tc.query, r.Status, r.Body, tc.names)
		}
	}
	c.must(404, "GET", "/databases/nope/docs?startsWith=a", "")
	c.must(404, "GET", "/databases/db$7/docs", "")
}
