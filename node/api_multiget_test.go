package node

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestMultiGetAnswersEachReadAsAlone: a multi_get (RavenDB's clients'
// lazy operations) answers each read with the status, headers and body it
// gets alone, a lazy load of a missing document as a load that found
// nothing, and refuses whole, changing nothing, a body with anything but
// reads of its database.
func TestMultiGetAnswersEachReadAsAlone(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3}`)
	c.must(201, "PUT", "/admin/databases/other", `{"Shards": 1}`)
	for i := 1; i <= 3; i++ {
		c.must(201, "PUT", fmt.Sprintf("/databases/shop/docs?id=users/%d", i), fmt.Sprintf(`{"Age":%d,"@metadata":{"@collection":"Users"}}`, 20*i))
	}
	query := `{"Query":"from Users where Age > $p0","QueryParameters":{"p0":30}}`
	quoted, _ := json.Marshal(query)
	body := `{"Requests":[
		{"Url":"/databases/shop/docs","Query":"?&id=users%2F1","Method":"GET","Headers":{}},
		{"Url":"/databases/shop/docs","Query":"?id=users%2Fnobody"},
		{"Url":"/databases/shop/queries","Query":"?queryHash=x","Method":"POST","Content":` + string(quoted) + `},
		{"Url":"/databases/shop/queries","Method":"POST","Content":` + query + `},
		{"Url":"/databases/shop/docs","Query":"startsWith=users/&metadataOnly=true"},
		{"Url":"/databases/shop$0/docs","Query":"?startsWith=users/"},
		{"Url":"/databases/shop/queries","Method":"POST","Content":{"Query":"from Users where"}}
	]}`
	var got struct {
		Results []struct {
			Result     json.RawMessage
			StatusCode int
			Headers    map[string]string
		}
	}
	if err := json.Unmarshal(c.must(200, "POST", "/databases/shop/multi_get", body).Body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Results) != 7 {
		t.Fatalf("%d results for 7 reads", len(got.Results))
	}
	alone := []resp{
		c.do("GET", "/databases/shop/docs?id=users/1", ""),
		{Status: 404, Body: []byte(`{"Results":[null],"Includes":{}}`)},
		c.do("POST", "/databases/shop/queries", query),
		c.do("POST", "/databases/shop/queries", query),
		c.do("GET", "/databases/shop/docs?startsWith=users/&metadataOnly=true", ""),
		c.do("GET", "/databases/shop$0/docs?startsWith=users/", ""),
		c.do("POST", "/databases/shop/queries", `{"Query":"from Users where"}`),
	}
	for i, want := range alone {
		r := got.Results[i]
		if r.StatusCode != want.Status || string(r.Result) != strings.TrimSpace(string(want.Body)) {
			t.Errorf("read %d: %d %s, alone %d %s", i, r.StatusCode, r.Result, want.Status, want.Body)
		}
	}
	if etag := got.Results[0].Headers["Etag"]; etag == "" || etag != alone[0].Header.Get("ETag") {
		t.Errorf("read 0's ETag %q, alone %q", etag, alone[0].Header.Get("ETag"))
	}

	for _, bad := range []struct{ body, want string }{
		{`{"Requests":[{"Url":"/databases/shop/docs","Query":"?id=users%2F1","Method":"PUT","Content":{"Age":1}}]}`, "reads only"},
		{`{"Requests":[{"Url":"/databases/shop/docs","Query":"?id=users%2F1","Method":"DELETE"}]}`, "reads only"},
		{`{"Requests":[{"Url":"/databases/shop/bulk_docs","Method":"POST","Content":{"Commands":[]}}]}`, "reads only"},
		{`{"Requests":[{"Url":"/databases/shop/events"}]}`, "reads only"},
		{`{"Requests":[{"Url":"/databases/shop/multi_get","Method":"POST"}]}`, "reads only"},
		{`{"Requests":[{"Url":"/databases/other/docs","Query":"?id=a"}]}`, `of database "other"`},
		{`{"Requests":[{"Url":"/admin/databases"}]}`, "not a path under /databases/"},
		{`{"Requests":[{"Url":"/databases/shop/docs","Bogus":1}]}`, "Bogus"},
		{`{"Requests":` + strings.Repeat(`[`, 1) + strings.TrimSuffix(strings.Repeat(`{"Url":"/databases/shop/stats"},`, maxMultiGetRequests+1), ",") + `]}`, "at most 1024"},
		{`[]`, "malformed JSON body"},
	} {
		r := c.must(400, "POST", "/databases/shop/multi_get", bad.body)
		if m := r.json(t); m["Type"] != "BadRequest" || !strings.Contains(m["Error"].(string), bad.want) {
			t.Errorf("%.80s: %s, want an error naming %q", bad.body, r.Body, bad.want)
		}
	}
	if doc := c.must(200, "GET", "/databases/shop/docs?id=users/1", "").json(t)["Results"].([]any)[0].(map[string]any); doc["Age"] != float64(20) {
		t.Fatalf("a refused multi_get changed users/1: %v", doc)
	}
	c.must(404, "POST", "/databases/nope/multi_get", `{"Requests":[]}`)
}
