package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardnode/shardnode/config"
)

// testNode starts a one-node cluster on loopback ports chosen at run time.
func testNode(t testing.TB, dir string, tweak ...func(*config.Config)) *Node {
	t.Helper()
	cfg := config.Default()
	cfg.Node.DataDir = dir
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Raft.Addr = "127.0.0.1:0"
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.HTTP.MaxDocumentBytes = 1 << 20
	cfg.HTTP.MaxBodyBytes = 4 << 20
	for _, f := range tweak {
		f(&cfg)
	}
	var logger *slog.Logger
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, &cfg, logger)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// client is a tiny HTTP helper for tests.
type client struct {
	t    *testing.T
	base string
}

type resp struct {
	Status int
	Body   []byte
	Header http.Header
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %s", r.Status, r.Body)
	}
	return m
}

func (c client) do(method, path, body string, headers ...string) resp {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{Status: res.StatusCode, Body: b, Header: res.Header}
}

func (c client) must(status int, method, path, body string, headers ...string) resp {
	c.t.Helper()
	r := c.do(method, path, body, headers...)
	if r.Status != status {
		c.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.Status, status, r.Body)
	}
	return r
}

func TestDocumentLifecycle(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	rec := c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3, "ReplicationFactor": 1}`).json(t)
	sharding := rec["Sharding"].(map[string]any)
	if len(sharding["Shards"].(map[string]any)) != 3 || len(sharding["BucketRanges"].([]any)) != 3 {
		t.Fatalf("record %v", rec)
	}
	c.must(409, "PUT", "/admin/databases/shop", `{"Shards": 3}`)

	put := c.must(201, "PUT", "/databases/shop/docs?id=users/1", `{"Name":"Ada","Age":36,"@metadata":{"@collection":"Users"}}`).json(t)
	cv := put["ChangeVector"].(string)
	got := c.must(200, "GET", "/databases/shop/docs?id=USERS/1", "").json(t)
	doc := got["Results"].([]any)[0].(map[string]any)
	md := doc["@metadata"].(map[string]any)
	if doc["Name"] != "Ada" || md["@collection"] != "Users" || md["@change-vector"] != cv || md["@id"] != "users/1" {
		t.Fatalf("doc %v", doc)
	}
	where := c.must(200, "GET", "/databases/shop/sharding/bucket?id=users/1", "").json(t)
	if md["@bucket"] != where["Bucket"] || md["@shard"] != where["Shard"] {
		t.Fatalf("bucket/shard %v vs %v", md, where)
	}

	// Several ids: null for the missing one.
	many := c.must(200, "GET", "/databases/shop/docs?id=users/1&id=nobody", "").json(t)
	if rs := many["Results"].([]any); len(rs) != 2 || rs[1] != nil {
		t.Fatalf("multi-get %v", many)
	}
	c.must(404, "GET", "/databases/shop/docs?id=nobody", "")

	// Optimistic concurrency.
	c.must(409, "PUT", "/databases/shop/docs?id=users/1", `{"Name":"x"}`, "If-Match", `"A:99-AAAAAAAAAAAAAAAAAAAAAA"`)
	c.must(201, "PUT", "/databases/shop/docs?id=users/1", `{"Name":"Ada L"}`, "If-Match", `"`+cv+`"`)
	c.must(409, "DELETE", "/databases/shop/docs?id=users/1", "", "If-Match", cv)
	c.must(204, "DELETE", "/databases/shop/docs?id=users/1", "")
	c.must(404, "GET", "/databases/shop/docs?id=users/1", "")
	c.must(204, "DELETE", "/databases/shop/docs?id=users/1", "")
}

func TestBulkDocsAndQueries(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 4}`)
	var cmds []string
	for i := 0; i < 200; i++ {
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"users/%d","Document":{"Age":%d,"Name":"u%03d","Address":{"City":"%s"},"@metadata":{"@collection":"Users"}}}`,
			i, i%50, i, []string{"Oslo", "Rome"}[i%2]))
	}
	cmds = append(cmds, `{"Type":"PUT","Id":"orders/1","Document":{"Age":99,"@metadata":{"@collection":"Orders"}}}`)
	cmds = append(cmds, `{"Type":"DELETE","Id":"users/0"}`)
	// Field names match case-insensitively (as encoding/json does), escapes
	// are decoded, whitespace is allowed and the document is stored compact.
	cmds = append(cmds, "{ \"type\" : \"put\", \"ID\":\"caf\\u00e9/1\", \"Document\": { \"A\" : [ 1 , 2 ] }, \"ChangeVector\": null }")
	res := c.must(201, "POST", "/databases/db/bulk_docs", `{"Commands":[`+strings.Join(cmds, ",")+`]}`).json(t)
	results := res["Results"].([]any)
	if len(results) != 203 {
		t.Fatalf("%d results", len(results))
	}
	first := results[0].(map[string]any)
	if first["Type"] != "PUT" || first["@id"] != "users/0" || first["@collection"] != "Users" || first["@change-vector"] == "" || first["@last-modified"] == "" {
		t.Fatalf("put result %v", first)
	}
	if got := c.must(200, "GET", "/databases/db/docs?id=caf%C3%A9/1", "").json(t)["Results"].([]any)[0].(map[string]any); fmt.Sprint(got["A"]) != "[1 2]" {
		t.Fatalf("escaped, spaced command stored %v", got)
	}
	last := results[201].(map[string]any)
	if last["Type"] != "DELETE" || last["Id"] != "users/0" || last["Deleted"] != true {
		t.Fatalf("delete result %v", last)
	}

	q := func(query string) map[string]any {
		return c.must(200, "POST", "/databases/db/queries", `{"Query":`+mustJSON(query)+`}`).json(t)
	}
	r := q("from Users where Age > 30 and Address.City = 'oslo' order by Age desc, Name limit 5 offset 2")
	// Ages 31..49 at even i (Oslo), i in 1..199 (users/0 deleted): each even
	// age a in 32,34..48 appears for i = a and a+50, a+100, a+150.
	if r["TotalResults"] != float64(9*4) {
		t.Fatalf("total %v", r["TotalResults"])
	}
	rs := r["Results"].([]any)
	if len(rs) != 5 {
		t.Fatalf("%d results", len(rs))
	}
	ages := []float64{}
	for _, d := range rs {
		ages = append(ages, d.(map[string]any)["Age"].(float64))
	}
	if fmt.Sprint(ages) != "[48 48 46 46 46]" {
		t.Fatalf("ages %v", ages)
	}
	if got := q("from @all_docs where Age = 99")["TotalResults"]; got != float64(1) {
		t.Fatalf("all_docs: %v", got)
	}
	if got := q("from Users where not (Age < 49)")["TotalResults"]; got != float64(4) {
		t.Fatalf("not: %v", got)
	}
	pr := c.must(200, "POST", "/databases/db/queries", `{"Query":"from Users where Name = $p0","QueryParameters":{"p0":"U007"}}`).json(t)
	if pr["TotalResults"] != float64(1) {
		t.Fatalf("param query %v", pr)
	}
	bad := c.must(400, "POST", "/databases/db/queries", `{"Query":"from Users where Age >"}`).json(t)
	if bad["Position"] == nil || !strings.Contains(bad["Error"].(string), "position") {
		t.Fatalf("parse error %v", bad)
	}
	// The message reads as written: no HTML escapes in the raw body.
	if raw := c.must(400, "POST", "/databases/db/queries", `{"Query":"from Users where Age >> 30"}`).Body; !bytes.Contains(raw, []byte(`found '>' at position 22`)) {
		t.Fatalf("parse error body %s", raw)
	}

	// Per-shard views add up to the whole.
	var sum float64
	for s := 0; s < 4; s++ {
		st := c.must(200, "GET", fmt.Sprintf("/databases/db$%d/stats", s), "").json(t)
		sum += st["DocumentsCount"].(float64)
		// The replica's engine figures: its files take space once written.
		eng, ok := st["Engine"].(map[string]any)
		if !ok || eng["DiskBytes"].(float64) <= 0 || eng["L0Files"] == nil || eng["CompactionDebtBytes"] == nil {
			t.Fatalf("shard %d: Engine %v", s, st["Engine"])
		}
		part := c.must(200, "POST", fmt.Sprintf("/databases/db$%d/queries", s), `{"Query":"from @all_docs"}`).json(t)
		if part["TotalResults"] != st["DocumentsCount"] {
			t.Fatalf("shard %d: a query of its replica counts %v documents, its stats %v", s, part["TotalResults"], st["DocumentsCount"])
		}
	}
	if sum != 201 {
		t.Fatalf("shard stats sum to %v documents, want 201", sum)
	}
	whole := c.must(200, "GET", "/databases/db/stats", "").json(t)
	if whole["DocumentsCount"] != float64(201) || whole["TombstonesCount"] != float64(1) {
		t.Fatalf("stats %v", whole)
	}

	// Documents of no collection: "from @empty" (RavenDB's name for them,
	// which a client may also send as their collection), and a null
	// @metadata.@collection, as reads show no @collection for them.
	c.must(201, "PUT", "/databases/db/docs?id=loose/1", `{"Loose":1}`)
	c.must(201, "PUT", "/databases/db/docs?id=loose/2", `{"Loose":2,"@metadata":{"@collection":"@Empty"}}`)
	for _, query := range []string{"from @empty", "from '@empty'", "from @all_docs where @metadata.@collection = null",
		"from @empty where @metadata.'@last-modified' > '2020-01-01T00:00:00.0000000Z'"} {
		if got := q(query)["TotalResults"]; got != float64(3) { // and café/1
			t.Errorf("%s: %v documents, want the 3 of no collection", query, got)
		}
	}
	if got := q("from @all_docs where @metadata.@collection = ''")["TotalResults"]; got != float64(0) {
		t.Errorf("@collection = '': %v documents, want 0", got)
	}
	if d := c.must(200, "GET", "/databases/db/docs?id=loose/2", "").json(t)["Results"].([]any)[0].(map[string]any); d["@metadata"].(map[string]any)["@collection"] != nil {
		t.Errorf("a document sent with @collection @Empty reads %v", d["@metadata"])
	}

}

func TestBucketsReport(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 3}`)
	var cmds []string
	for i := 0; i < 30; i++ {
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"orders/%d$users/7","Document":{"N":%d}}`, i, i))
	}
	c.must(201, "POST", "/databases/db/bulk_docs", `{"Commands":[`+strings.Join(cmds, ",")+`]}`)
	where := c.must(200, "GET", "/databases/db/sharding/bucket?id=users/7", "").json(t)
	b := int(where["Bucket"].(float64))
	bk := c.must(200, "GET", fmt.Sprintf("/databases/db/buckets/%d", b), "").json(t)
	if bk["DocumentsCount"] != float64(30) || len(bk["Documents"].([]any)) != 30 || bk["Size"].(float64) <= 0 {
		t.Fatalf("bucket %v", bk)
	}
	if s := bk["Shards"].([]any); len(s) != 1 || s[0] != where["Shard"] {
		t.Fatalf("bucket shards %v, want [%v]", s, where["Shard"])
	}
	// Documents sort as listings do, by lower-cased id.
	c.must(201, "PUT", "/databases/db/docs?id=ORDERS/99$users/7", `{}`)
	docs := c.must(200, "GET", fmt.Sprintf("/databases/db/buckets/%d", b), "").json(t)["Documents"].([]any)
	if docs[len(docs)-1] != "ORDERS/99$users/7" {
		t.Fatalf("bucket's documents end with %v, want ORDERS/99$users/7 (after orders/9$users/7 in lower case)", docs[len(docs)-1])
	}
	// One replica's view names its own shard only where it owns the bucket
	// or holds items in it.
	for sn := range 3 {
		view := c.must(200, "GET", fmt.Sprintf("/databases/db$%d/buckets/%d", sn, b), "").json(t)
		s := view["Shards"].([]any)
		if float64(sn) == where["Shard"] {
			if len(s) != 1 || s[0] != float64(sn) {
				t.Errorf("shard %d's view of its bucket: Shards %v, want [%d]", sn, s, sn)
			}
		} else if len(s) != 0 {
			t.Errorf("shard %d's view of a bucket it neither owns nor holds: Shards %v, want []", sn, s)
		}
	}
	// A query by GET, and HEAD answering as GET does.
	if got := c.must(200, "GET", "/databases/db/queries?query=from%20@all_docs", "").json(t)["TotalResults"]; got != float64(31) {
		t.Fatalf("GET query: %v results, want 31", got)
	}
	c.must(200, "HEAD", "/databases/db/queries?query=from%20@all_docs", "")
	rep := c.must(200, "GET", "/databases/db/buckets?groups=3", "").json(t)
	groups := rep["Groups"].([]any)
	if len(groups) != 3 {
		t.Fatalf("groups %v", groups)
	}
	var total float64
	for i, g := range groups {
		gm := g.(map[string]any)
		total += gm["DocumentsCount"].(float64)
		if s := gm["Shards"].([]any); len(s) != 1 || s[0] != float64(i) {
			t.Errorf("group %d shards %v", i, s)
		}
	}
	if total != 31 {
		t.Fatalf("report counts %v documents", total)
	}
	one := c.must(200, "GET", fmt.Sprintf("/databases/db/buckets?from=%d&to=%d&groups=10", b, b), "").json(t)
	if gs := one["Groups"].([]any); len(gs) != 1 || gs[0].(map[string]any)["DocumentsCount"] != float64(31) {
		t.Fatalf("single-bucket report %v", one)
	}
}

// TestBadInputChangesNothing sends each kind of bad input and checks the
// status, the JSON error body, and that the database is unchanged.
func TestBadInputChangesNothing(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	c.must(201, "PUT", "/databases/db/docs?id=keep", `{"v":1}`)
	before := c.must(200, "GET", "/databases/db/stats", "").Body
	bigID := strings.Repeat("x", 513)
	bigDoc := `{"x":"` + strings.Repeat("y", 1<<20) + `"}`
	cases := []struct {
		method, path, body string
		status             int
		headers            []string
	}{
		{"PUT", "/databases/db/docs?id=a", `{"x":`, 400, nil},
		{"PUT", "/databases/db/docs?id=a", `[1,2]`, 400, nil},
		{"PUT", "/databases/db/docs?id=a", `"str"`, 400, nil},
		{"PUT", "/databases/db/docs?id=a", `{"@metadata":7}`, 400, nil},
		{"PUT", "/databases/db/docs?id=", `{}`, 400, nil},
		{"PUT", "/databases/db/docs", `{}`, 400, nil},
		{"PUT", "/databases/db/docs?id=users$", `{}`, 400, nil},
		{"PUT", "/databases/db/docs?id=" + bigID, `{}`, 400, nil},
		{"PUT", "/databases/db/docs?id=a", bigDoc, 413, nil},
		{"PUT", "/databases/db/docs?id=keep", `{}`, 400, []string{"If-Match", "not-a-vector"}},
		{"PUT", "/databases/nope/docs?id=a", `{}`, 404, nil},
		{"PUT", "/databases/bad..name!/docs?id=a", `{}`, 400, nil},
		{"PUT", "/databases/db$1/docs?id=a", `{}`, 400, nil},
		{"GET", "/databases/db$9/stats", ``, 404, nil},
		{"GET", "/databases/db$x/stats", ``, 400, nil},
		{"DELETE", "/databases/db/docs?id=keep", ``, 400, []string{"If-Match", "A:1"}},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","Document":{}},{"Type":"PUT","Id":"","Document":{}}]}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","Document":{}},{"Type":"PATCH","Id":"x"}]}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","Document":[1]}]}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","Document":{},"ChangeVector":"zz"}]}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[]}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `[{"Type":"PUT","Id":"ok","Document":{}}]`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":{"Type":"PUT"}}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":7,"Document":{}}]}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","Document":{}},"x"]}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","Document":{"a":01}}]}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","Document":{}}]} x`, 400, nil},
		{"POST", "/databases/db/queries", `{"Query":"select *"}`, 400, nil},
		{"GET", "/databases/db/buckets?from=5&to=1", ``, 400, nil},
		{"GET", "/databases/db/buckets?to=1048576", ``, 400, nil},
		{"GET", "/databases/db/buckets?groups=0", ``, 400, nil},
		{"GET", "/databases/db/buckets/-1", ``, 400, nil},
		{"PUT", "/admin/databases/x", `{"Shards": 0}`, 400, nil},
		{"PUT", "/admin/databases/x", `{"Shards": 1025}`, 400, nil},
		{"PUT", "/admin/databases/x", `{"Shards": 1, "ReplicationFactor": 2}`, 400, nil},
		{"PUT", "/admin/databases/x", `{"Shards": "3"}`, 400, nil},
		{"PUT", "/admin/databases/x", `{"Shardz": 3}`, 400, nil},
		{"PUT", "/admin/databases/.hidden", `{"Shards": 1}`, 400, nil},
		{"DELETE", "/admin/databases/nope", ``, 404, nil},
		{"PUT", "/databases/db/docs?id=a&id=b", `{}`, 400, nil},
		{"DELETE", "/databases/db/docs?id=keep&id=b", ``, 400, nil},
		{"PUT", "/databases/db/docs?id=a", `{"n":1e400}`, 400, nil},
		{"PUT", "/databases/db/docs?id=a", "{\"s\":\"\xff\"}", 400, nil},
		{"PUT", "/databases/db/docs?id=a", `{"n":1,"x":{"y":2},"n":3}`, 400, nil},
		{"PUT", "/databases/db/docs?id=a", `{"@metadata":{"@collection":"A"},"\u0040metadata":{"@collection":"B"}}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","Document":{"a":1,"a":2}}]}`, 400, nil},
		{"PUT", "/databases/db/docs?id=a", `{}`, 415, []string{"Content-Encoding", "br"}},
		{"PUT", "/databases/db/docs?id=a", `{}`, 400, []string{"Content-Encoding", "gzip"}},
		{"POST", "/admin/databases/db$0/shards", `{"Members":["A"]}`, 400, nil},
		// A field named twice, or in two cases (the server matches field
		// names in any case), is ambiguous: refused, not the last one kept.
		{"PUT", "/admin/databases/x", `{"Shards": 2, "Shards": 3}`, 400, nil},
		{"PUT", "/admin/databases/x", `{"Shards": 2, "shards": 3}`, 400, nil},
		{"POST", "/databases/db/resharding", `{"FromBucket": 0, "ToBucket": 10, "ToShard": 1, "ToShard": 0}`, 400, nil},
		{"POST", "/databases/db/resharding", `{"FromBucket": 0, "ToBucket": 10, "ToShard": 1, "toShard": 0}`, 400, nil},
		{"PUT", "/admin/resharding/send-limit", `{"BytesPerSecond": 1, "bytesPerSecond": 0}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","Document":{}}],"commands":[]}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"DELETE","Id":"keep","type":"PUT","Document":{}}]}`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","ID":"keep","Document":{}}]}`, 400, nil},
		{"PUT", "/databases/db/docs?id=a", `{"@metadata":{"@collection":"A","@COLLECTION":"B"}}`, 400, nil},
		{"POST", "/databases/db/queries", `{"Query":"from @all_docs","query":"from Users"}`, 400, nil},
		{"GET", "/databases/db/docs?id=keep&metadataOnly=1", ``, 400, nil},
		{"GET", "/databases/db/docs?startsWith=k&metadataOnly=t", ``, 400, nil},
		{"PUT", "/admin/databases/x", `null`, 400, nil},
		{"PUT", "/admin/databases/x", `[1]`, 400, nil},
		{"POST", "/databases/db/queries", `{"Query":5}`, 400, nil},
		{"POST", "/databases/db/queries", `[1]`, 400, nil},
		{"POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"ok","Document":{}},null]}`, 400, nil},
		{"GET", "/databases/db/sharding/bucket?id=a&id=b", ``, 400, nil},
		{"GET", "/databases/db/queries?query=from+Users&query=from+Orders", ``, 400, nil},
	}
	for _, tc := range cases {
		r := c.do(tc.method, tc.path, tc.body, tc.headers...)
		if r.Status != tc.status {
			t.Errorf("%s %s %.40q: status %d, want %d: %s", tc.method, tc.path, tc.body, r.Status, tc.status, r.Body)
			continue
		}
		var e struct{ Error, Type string }
		if err := json.Unmarshal(r.Body, &e); err != nil || e.Error == "" || e.Type == "" {
			t.Errorf("%s %s: error body %s", tc.method, tc.path, r.Body)
		}
		if strings.Contains(e.Error, "Go ") { // a client speaks JSON, not Go's types
			t.Errorf("%s %s %.40q: message in Go's words: %s", tc.method, tc.path, tc.body, e.Error)
		}
	}
	after := c.must(200, "GET", "/databases/db/stats", "").Body
	if !bytes.Equal(before, after) {
		t.Fatalf("bad input changed the database:\n%s\n%s", before, after)
	}
	dbs := c.must(200, "GET", "/admin/databases", "").json(t)["Databases"].([]any)
	if len(dbs) != 1 {
		t.Fatalf("bad creates left databases: %v", dbs)
	}
	if ops := c.must(200, "GET", "/databases/db/resharding", "").json(t)["Operations"].([]any); len(ops) != 0 {
		t.Fatalf("bad resharding requests started operations: %v", ops)
	}
	if lim := c.must(200, "GET", "/admin/resharding/send-limit", "").json(t)["BytesPerSecond"]; lim != float64(0) {
		t.Fatalf("a bad send-limit request set the limit to %v", lim)
	}
	// metadataOnly is true or false in any case, as RavenDB reads it.
	if d := c.must(200, "GET", "/databases/db/docs?id=keep&metadataOnly=TRUE", "").json(t)["Results"].([]any)[0].(map[string]any); d["v"] != nil {
		t.Fatalf("metadataOnly=TRUE returned the body: %v", d)
	}
}

func TestRestartKeepsStateAndData(t *testing.T) {
	dir := t.TempDir()
	n := testNode(t, dir)
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 3}`)
	cv := c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":1}`).json(t)["ChangeVector"]
	c.must(201, "PUT", "/admin/databases/gone", `{"Shards": 1}`)
	c.must(201, "PUT", "/databases/gone/docs?id=a", `{"v":1}`)
	c.must(204, "DELETE", "/admin/databases/gone", "")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2 := testNode(t, dir)
	c2 := client{t, n2.HTTPURL()}
	doc := c2.must(200, "GET", "/databases/db/docs?id=a", "").json(t)["Results"].([]any)[0].(map[string]any)
	if doc["@metadata"].(map[string]any)["@change-vector"] != cv {
		t.Fatalf("after restart %v", doc)
	}
	// A database created again under a deleted one's name starts empty.
	c2.must(201, "PUT", "/admin/databases/gone", `{"Shards": 1}`)
	c2.must(404, "GET", "/databases/gone/docs?id=a", "")
	cl := c2.must(200, "GET", "/cluster", "").json(t)
	if cl["Leader"] != "A" || len(cl["Nodes"].([]any)) != 1 {
		t.Fatalf("cluster %v", cl)
	}
	if nodes := cl["Nodes"].([]any); nodes[0].(map[string]any)["HttpUrl"] != n2.HTTPURL() {
		t.Fatalf("node address not updated after restart: %v", nodes)
	}
}

// TestSingleNodeRestartMovesRaftAddr: a one-node cluster restarted on
// another raft address (testNode's port 0 gives a new one each start) is not
// refused like a member of a larger cluster: it is the only voter, elects
// itself whatever its address, and raft's configuration and the state then
// hold the new address, so a node that joins later dials the right one.
func TestSingleNodeRestartMovesRaftAddr(t *testing.T) {
	dir := t.TempDir()
	n := testNode(t, dir)
	old := n.raft.transport.LocalAddr()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2 := testNode(t, dir)
	now := n2.raft.transport.LocalAddr()
	if now == old {
		t.Fatalf("restart kept raft address %s; the test needs another", old)
	}
	waitFor(t, 10*time.Second, "raft's configuration and the state to hold the new raft address", func() bool {
		f := n2.raft.r.GetConfiguration()
		if f.Error() != nil {
			return false
		}
		servers := f.Configuration().Servers
		if len(servers) != 1 || servers[0].Address != now {
			return false
		}
		nodes := n2.fsm.Nodes()
		return len(nodes) == 1 && nodes[0].RaftAddr == string(now)
	})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestRestartReplaysDeleteAndRecreate checks that replaying a log in which a
// database was created, deleted and created again never touches the data
// of the live incarnation.
func TestRestartReplaysDeleteAndRecreate(t *testing.T) {
	dir := t.TempDir()
	n := testNode(t, dir)
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	c.must(201, "PUT", "/databases/db/docs?id=old", `{"v":1}`)
	c.must(204, "DELETE", "/admin/databases/db", "")
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	c.must(201, "PUT", "/databases/db/docs?id=new", `{"v":2}`)
	n.Close()
	for i := 0; i < 2; i++ {
		n2 := testNode(t, dir)
		c2 := client{t, n2.HTTPURL()}
		c2.must(200, "GET", "/databases/db/docs?id=new", "")
		c2.must(404, "GET", "/databases/db/docs?id=old", "")
		n2.Close()
	}
}

// TestAStartingNodeSaysSoInsteadOfNotFound: until it has replayed the raft
// log a node answers database requests with 503 NodeStarting (and
// Retry-After), never with a false 404; health and membership answer
// throughout.
func TestAStartingNodeSaysSoInsteadOfNotFound(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":1}`)
	n.ready.Store(false) // as during Start, before the log is replayed
	for _, path := range []string{"/databases/db/docs?id=a", "/databases/nope/docs?id=a", "/admin/databases", "/admin/databases/db", "/topology?name=db"} {
		r := c.do("GET", path, "")
		if r.Status != 503 || r.json(t)["Type"] != "NodeStarting" || r.Header.Get("Retry-After") == "" {
			t.Errorf("GET %s while starting: %d %s (Retry-After %q)", path, r.Status, r.Body, r.Header.Get("Retry-After"))
		}
	}
	if r := c.do("PUT", "/admin/databases/db", `{"Shards": 1}`); r.Status != 503 {
		t.Errorf("create while starting: %d %s", r.Status, r.Body)
	}
	c.must(503, "GET", "/healthz", "") // served, and says not ready
	c.must(200, "GET", "/cluster", "")
	n.ready.Store(true)
	c.must(200, "GET", "/databases/db/docs?id=a", "")
}

// TestEmptyIfMatchAsksForANewDocument: as RavenDB's clients use it under
// optimistic concurrency, an empty expected change vector (If-Match: "" on
// a PUT or DELETE, "ChangeVector": "" in bulk_docs) means the document
// must not exist; an absent one means no check.
func TestEmptyIfMatchAsksForANewDocument(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":1}`, "If-Match", `""`)
	r := c.must(409, "PUT", "/databases/db/docs?id=a", `{"v":2}`, "If-Match", `""`)
	if r.json(t)["Type"] != "ConcurrencyException" {
		t.Fatalf("second new document: %s", r.Body)
	}
	c.must(409, "DELETE", "/databases/db/docs?id=a", "", "If-Match", "")
	c.must(409, "POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"a","Document":{"v":3},"ChangeVector":""}]}`)
	if doc := c.must(200, "GET", "/databases/db/docs?id=a", "").json(t)["Results"].([]any)[0].(map[string]any); doc["v"] != float64(1) {
		t.Fatalf("a refused write changed a: %v", doc)
	}
	c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":4}`) // no If-Match: no check
	c.must(201, "POST", "/databases/db/bulk_docs", `{"Commands":[{"Type":"PUT","Id":"c","Document":{},"ChangeVector":""},{"Type":"PUT","Id":"a","Document":{"v":5},"ChangeVector":null}]}`)
	doc := c.must(200, "GET", "/databases/db/docs?id=a", "").json(t)["Results"].([]any)[0].(map[string]any)
	if doc["v"] != float64(5) {
		t.Fatalf("a is %v", doc)
	}
}

// TestSingleDocumentETag: a single document's GET and HEAD carry its change
// vector as ETag (RavenDB's clients read it from a HEAD), and
// If-None-Match with that change vector gets 304 until the document
// changes.
func TestSingleDocumentETag(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	cv := c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":1}`).json(t)["ChangeVector"].(string)
	if got := c.must(200, "GET", "/databases/db/docs?id=a", "").Header.Get("ETag"); got != `"`+cv+`"` {
		t.Fatalf("GET ETag %q, want the change vector %q", got, cv)
	}
	head := c.must(200, "HEAD", "/databases/db/docs?id=a", "")
	if head.Header.Get("ETag") != `"`+cv+`"` || len(head.Body) != 0 {
		t.Fatalf("HEAD: ETag %q, body %q", head.Header.Get("ETag"), head.Body)
	}
	c.must(404, "HEAD", "/databases/db/docs?id=nope", "")
	if r := c.must(304, "GET", "/databases/db/docs?id=a", "", "If-None-Match", `"`+cv+`"`); len(r.Body) != 0 {
		t.Fatalf("304 with a body: %q", r.Body)
	}
	c.must(304, "HEAD", "/databases/db/docs?id=a", "", "If-None-Match", cv)
	cv2 := c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":2}`).json(t)["ChangeVector"].(string)
	if got := c.must(200, "GET", "/databases/db/docs?id=a", "", "If-None-Match", `"`+cv+`"`).Header.Get("ETag"); got != `"`+cv2+`"` {
		t.Fatalf("after a write: ETag %q, want %q", got, cv2)
	}
	if got := c.must(200, "GET", "/databases/db/docs?id=a&id=nope", "").Header.Get("ETag"); got != "" {
		t.Fatalf("several ids: ETag %q", got)
	}
}

// TestDeletingADatabaseUnderLoadKeepsTheNodeUp: queries, multi-shard GETs
// and writes racing a database's deletion get answers (404 once it is gone,
// 503 while its replicas close), never a crashed node: a read of a closed
// replica used to panic inside Pebble.
func TestDeletingADatabaseUnderLoadKeepsTheNodeUp(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	var cmds strings.Builder
	cmds.WriteString(`{"Commands":[`)
	for i := 0; i < 3000; i++ {
		if i > 0 {
			cmds.WriteByte(',')
		}
		fmt.Fprintf(&cmds, `{"Type":"PUT","Id":"doc/%d","Document":{"i":%d}}`, i, i)
	}
	cmds.WriteString(`]}`)
	for round := 0; round < 4; round++ {
		c.must(201, "PUT", "/admin/databases/gone", `{"Shards": 3}`)
		c.must(201, "POST", "/databases/gone/bulk_docs", cmds.String())
		stop := make(chan struct{})
		statuses := make(chan int, 100000)
		var answered atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < 6; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					var r resp
					switch w % 3 {
					case 0:
						r = c.do("POST", "/databases/gone/queries", `{"Query":"from @all_docs where i > 5 order by i desc limit 3"}`)
					case 1:
						r = c.do("GET", fmt.Sprintf("/databases/gone/docs?id=doc/%d&id=doc/%d&id=doc/%d", k%3000, (k+1)%3000, (k+2)%3000), "")
					default:
						r = c.do("PUT", fmt.Sprintf("/databases/gone/docs?id=w/%d", k), `{}`)
					}
					statuses <- r.Status
					answered.Add(1)
				}
			}()
		}
		waitAnswered := func(n int64) {
			for deadline := time.Now().Add(20 * time.Second); answered.Load() < n; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("only %d answers", answered.Load())
				}
			}
		}
		waitAnswered(30) // the load is running
		c.must(204, "DELETE", "/admin/databases/gone", "")
		waitAnswered(answered.Load() + 60) // and runs on against the deleted database
		close(stop)
		wg.Wait()
		close(statuses)
		for s := range statuses {
			if s != 200 && s != 201 && s != 404 && s != 503 {
				t.Fatalf("round %d: a request racing the delete got %d", round, s)
			}
		}
	}
	c.must(200, "GET", "/healthz", "")
}

// TestDatabaseNamesAreCaseInsensitive: as in RavenDB, SHOP is shop: it
// cannot be created beside it, and every path finds it by either spelling.
func TestDatabaseNamesAreCaseInsensitive(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 2}`)
	r := c.must(409, "PUT", "/admin/databases/SHOP", `{"Shards": 2}`).json(t)
	if r["Type"] != "DatabaseAlreadyExists" || !strings.Contains(r["Error"].(string), "case-insensitive") {
		t.Fatalf("creating SHOP beside shop: %v", r)
	}
	c.must(201, "PUT", "/databases/SHOP/docs?id=users/1", `{"v":1}`)
	c.must(200, "GET", "/databases/shop/docs?id=users/1", "")
	if rec := c.must(200, "GET", "/admin/databases/Shop", "").json(t); rec["DatabaseName"] != "shop" {
		t.Fatalf("GET /admin/databases/Shop: %v", rec["DatabaseName"])
	}
	if list := c.must(200, "GET", "/admin/databases", "").json(t); len(list["Databases"].([]any)) != 1 {
		t.Fatalf("databases: %v", list)
	}
	c.must(204, "DELETE", "/admin/databases/SHOP", "")
	c.must(404, "GET", "/databases/shop/docs?id=users/1", "")
}

// TestBadReshardingRequestsSayWhatIsWrong: a resharding request with a
// field of the wrong type or out of range is a 400 whose message names the
// field and what it takes, in the words of JSON rather than of Go, and
// reads as written (no HTML escapes in the raw body); an unknown operation
// is named the same way by GET and DELETE.
func TestBadReshardingRequestsSayWhatIsWrong(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 3}`)
	for _, tc := range []struct {
		body, want string
	}{
		{`{"FromBucket":-1,"ToBucket":5,"ToShard":1}`, "need 0 <= FromBucket <= ToBucket <= 1048575"},
		{`{"FromBucket":0,"ToBucket":1048576,"ToShard":1}`, "need 0 <= FromBucket <= ToBucket <= 1048575"},
		{`{"FromBucket":"0","ToBucket":5,"ToShard":1}`, `"FromBucket" is string, want a whole number`},
		{`{"FromBucket":0.5,"ToBucket":5,"ToShard":1}`, `"FromBucket" is number 0.5, want a whole number`},
		{`{"FromBucket":[],"ToBucket":5,"ToShard":1}`, `"FromBucket" is array, want a whole number`},
		{`{"FromBucket":0,"ToBucket":5,"ToShard":-1}`, "ToShard -1: shard numbers are 0 or more"},
		{`{"FromBucket":0,"ToBucket":5,"ToShard":true}`, `"ToShard" is bool, want a whole number`},
	} {
		r := c.do("POST", "/databases/db/resharding", tc.body)
		var e struct{ Error string }
		_ = json.Unmarshal(r.Body, &e)
		if r.Status != 400 || !strings.Contains(e.Error, tc.want) || bytes.Contains(r.Body, []byte(`\u003c`)) {
			t.Errorf("%s: %d %s, want a 400 saying %q", tc.body, r.Status, r.Body, tc.want)
		}
	}
	var ae struct{ Error string }
	if r := c.do("PUT", "/admin/databases/x", `{"Shards": 1, "ReplicationFactor": "2"}`); r.Status != 400 || json.Unmarshal(r.Body, &ae) != nil || !strings.Contains(ae.Error, `"ReplicationFactor" is string, want a whole number`) {
		t.Errorf("ReplicationFactor \"2\": %d %s, want a 400 naming the field and what it takes", r.Status, r.Body)
	}
	get := c.do("GET", "/databases/db/resharding/nope", "")
	del := c.do("DELETE", "/databases/db/resharding/nope", "")
	if get.Status != 404 || del.Status != 404 || !bytes.Equal(get.Body, del.Body) {
		t.Errorf("unknown operation: GET %d %s, DELETE %d %s; want the same 404", get.Status, get.Body, del.Status, del.Body)
	}
	if ops := c.must(200, "GET", "/databases/db/resharding", "").json(t)["Operations"].([]any); len(ops) != 0 {
		t.Fatalf("bad resharding requests started operations: %v", ops)
	}
}
