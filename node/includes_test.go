package node

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/shardnode/shardnode/storage"
)

// TestLoadsCarryTheirIncludes: a load with include paths answers the
// documents those fields name under Includes, across shards, through GET
// and POST /docs, and so does a query's page for its include clause;
// missing ones and the loaded ones themselves are left out; bad paths are
// 400s.
func TestLoadsCarryTheirIncludes(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3}`)
	for _, d := range []struct{ id, body string }{
		{"companies/1", `{"Name":"Acme"}`},
		{"companies/2", `{"Name":"Initech"}`},
		{"products/1", `{"Name":"Anvil"}`},
		{"products/2", `{"Name":"Rocket"}`},
		{"orders/1", `{"Company":"companies/1","Lines":[{"Product":"products/1"},{"Product":"products/2"},{"Product":"products/404"}],"Tags":["companies/2", 7]}`},
		{"orders/2", `{"Company":"companies/1","Self":"orders/1"}`},
	} {
		c.must(201, "PUT", "/databases/shop/docs?id="+d.id, d.body)
	}
	includes := func(r resp) []string {
		t.Helper()
		var body struct{ Includes map[string]map[string]any }
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for id, d := range body.Includes {
			if d["@metadata"].(map[string]any)["@id"] != id {
				t.Errorf("included %q holds %v", id, d)
			}
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids
	}
	for _, tt := range []struct {
		path string
		want []string
	}{
		{"/databases/shop/docs?id=orders/1&include=Company", []string{"companies/1"}},
		{"/databases/shop/docs?id=orders/1&include=Lines[].Product", []string{"products/1", "products/2"}},
		{"/databases/shop/docs?id=orders/1&include=Lines.Product&include=Tags&include=Missing", []string{"companies/2", "products/1", "products/2"}},
		{"/databases/shop/docs?id=orders/1&id=orders/2&include=Company&include=Self", []string{"companies/1"}},
		{"/databases/shop/docs?id=orders/1", nil},
	} {
		if got := includes(c.must(200, "GET", tt.path, "")); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("GET %s: includes %v, want %v", tt.path, got, tt.want)
		}
	}
	r := c.must(200, "POST", "/databases/shop/docs?include=Company", `{"Ids":["orders/1","orders/2"]}`)
	if got := includes(r); !reflect.DeepEqual(got, []string{"companies/1"}) {
		t.Errorf("POST /docs: includes %v", got)
	}
	// A query's page carries the includes of its results.
	q := c.must(200, "POST", "/databases/shop/queries", `{"Query":"from @all_docs where startsWith(id(), 'orders/') order by id() include Company, Lines[].Product limit 1"}`)
	if got := includes(q); !reflect.DeepEqual(got, []string{"companies/1", "products/1", "products/2"}) {
		t.Errorf("query: includes %v", got)
	}
	q = c.must(200, "POST", "/databases/shop/queries", `{"Query":"from @all_docs where startsWith(id(), 'orders/') include Company limit 0"}`)
	if got := includes(q); got != nil {
		t.Errorf("count query: includes %v", got)
	}
	c.must(400, "GET", "/databases/shop/docs?id=orders/1&include=", "")
	c.must(400, "GET", "/databases/shop/docs?id=orders/1&include=Lines..Product", "")
}

func TestReferencedIDsWalksPathsAndArrays(t *testing.T) {
	docs := []*storage.Document{
		{ID: "a/1", Body: []byte(`{"X":{"Y":["b/1",{"Z":"b/2"}]},"L":[{"P":"c/1"},{"P":["c/2","C/1"]}],"N":5,"Me":"A/1","Bad":"x$"}`)},
		nil,
		{ID: "a/2", Body: []byte(`{"L":[{"P":"c/3"}]}`)},
		{ID: "a/3", Body: []byte(`not JSON`)},
	}
	got := loadedReferences(docs, [][]string{{"X", "Y"}, {"L", "P"}, {"N"}, {"Me"}, {"Bad"}, {"X", "Y", "Z"}})
	want := []string{"b/1", "c/1", "c/2", "b/2", "c/3"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loadedReferences = %v, want %v", got, want)
	}
	bodies := make([]map[string]any, len(docs))
	for i, d := range docs {
		if d != nil {
			bodies[i], _ = docMap(d)
		}
	}
	if got := referencedIDs(bodies, nil, [][]string{{"L", "P"}}, 2); len(got) != 2 {
		t.Fatalf("max 2: %v", got)
	}
}
