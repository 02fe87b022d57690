package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestGetByIDMetadataOnly: metadataOnly=true on a GET by ids returns each
// document's @metadata alone, as RavenDB does, missing ones still null;
// a metadataOnly that is not a boolean is a 400, as on a listing.
func TestGetByIDMetadataOnly(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3}`)
	c.must(201, "PUT", "/databases/shop/docs?id=users/1", `{"Name":"Ada","@metadata":{"@collection":"Users"}}`)
	c.must(201, "PUT", "/databases/shop/docs?id=users/2", `{"Name":"Grace"}`)

	full := c.must(200, "GET", "/databases/shop/docs?id=users/1", "").json(t)["Results"].([]any)[0].(map[string]any)
	one := c.must(200, "GET", "/databases/shop/docs?id=users/1&metadataOnly=true", "").json(t)["Results"].([]any)
	doc := one[0].(map[string]any)
	if len(doc) != 1 || doc["@metadata"] == nil {
		t.Fatalf("metadataOnly=true: %v, want @metadata alone", doc)
	}
	if fmt.Sprint(doc["@metadata"]) != fmt.Sprint(full["@metadata"]) {
		t.Fatalf("metadataOnly @metadata %v, full %v", doc["@metadata"], full["@metadata"])
	}
	many := c.must(200, "GET", "/databases/shop/docs?id=users/1&id=nope&id=users/2&metadataOnly=true", "").json(t)["Results"].([]any)
	if len(many) != 3 || many[1] != nil {
		t.Fatalf("three ids, metadataOnly: %v", many)
	}
	for _, i := range []int{0, 2} {
		if d := many[i].(map[string]any); len(d) != 1 || d["@metadata"] == nil {
			t.Fatalf("result %d: %v, want @metadata alone", i, d)
		}
	}
	if d := c.must(200, "GET", "/databases/shop/docs?id=users/1&metadataOnly=false", "").json(t)["Results"].([]any)[0].(map[string]any); d["Name"] != "Ada" {
		t.Fatalf("metadataOnly=false: %v", d)
	}
	before := c.must(200, "GET", "/databases/shop/stats", "").Body
	for _, q := range []string{"id=users/1&metadataOnly=bogus", "id=users/1&id=users/2&metadataOnly=yes"} {
		r := c.must(400, "GET", "/databases/shop/docs?"+q, "")
		if !strings.Contains(string(r.Body), "metadataOnly") || !strings.Contains(string(r.Body), `"Type":"BadRequest"`) {
			t.Fatalf("%s: %s", q, r.Body)
		}
	}
	if after := c.must(200, "GET", "/databases/shop/stats", "").Body; !bytes.Equal(before, after) {
		t.Fatalf("bad requests changed the database:\n%s\n%s", before, after)
	}
}

// TestPostGetDocs: POST /docs with {"Ids": [...]}, which RavenDB's clients
// send when the ids make the URL too long, answers as the GET with those
// ids does: same results, nulls, 404, metadataOnly, limits and errors.
func TestPostGetDocs(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3}`)
	for i := range 5 {
		c.must(201, "PUT", fmt.Sprintf("/databases/shop/docs?id=users/%d", i), fmt.Sprintf(`{"N":%d,"@metadata":{"@collection":"Users"}}`, i))
	}
	idsBody := func(ids ...string) string {
		b, _ := json.Marshal(map[string]any{"Ids": ids})
		return string(b)
	}
	for _, ids := range [][]string{{"users/3", "nope", "USERS/0"}, {"users/1"}, {"users/4", "users/2"}} {
		for _, extra := range []string{"", "metadataOnly=true"} {
			var qs []string
			for _, id := range ids {
				qs = append(qs, "id="+id)
			}
			if extra != "" {
				qs = append(qs, extra)
			}
			get := c.must(200, "GET", "/databases/shop/docs?"+strings.Join(qs, "&"), "")
			post := c.must(200, "POST", "/databases/shop/docs?loadHash=12345&"+extra, idsBody(ids...))
			if !bytes.Equal(get.Body, post.Body) {
				t.Fatalf("ids %v %s:\nGET  %s\nPOST %s", ids, extra, get.Body, post.Body)
			}
		}
	}
	// One missing id: 404, as the GET.
	if r := c.must(404, "POST", "/databases/shop/docs", idsBody("nope")); !strings.Contains(string(r.Body), "DocumentDoesNotExist") {
		t.Fatalf("one missing id: %s", r.Body)
	}
	// As many ids as a GET takes, and no more.
	many := make([]string, maxIDsPerGet)
	for i := range many {
		many[i] = fmt.Sprintf("users/%d", i)
	}
	res := c.must(200, "POST", "/databases/shop/docs", idsBody(many...)).json(t)["Results"].([]any)
	if len(res) != maxIDsPerGet || res[0] == nil || res[5] != nil {
		t.Fatalf("%d ids: %d results, first %v, sixth %v", maxIDsPerGet, len(res), res[0], res[5])
	}
	before := c.must(200, "GET", "/databases/shop/stats", "").Body
	for _, bad := range []struct{ query, body, want string }{
		{"", idsBody(append(many, "users/x")...), "at most 1024"},
		{"", `{"Ids":[]}`, "is missing or empty"},
		{"", `{}`, "is missing or empty"},
		{"", ``, "body"},
		{"", `{"Ids":["a",null]}`, "null"},
		{"", `{"Ids":[1]}`, "Ids"},
		{"", `{"Ids":"a"}`, "Ids"},
		{"", `{"Ids":["a"],"Other":1}`, "Other"},
		{"", `{"Ids":["a"]} {}`, "after the JSON object"},
		{"", `{"Ids":["a",""]}`, "document id"},
		{"metadataOnly=bogus", idsBody("users/1"), "metadataOnly"},
		{"id=users/1", idsBody("users/1"), "query string"},
	} {
		r := c.must(400, "POST", "/databases/shop/docs?"+bad.query, bad.body)
		if !strings.Contains(string(r.Body), bad.want) || !strings.Contains(string(r.Body), `"Type":"BadRequest"`) {
			t.Fatalf("POST ?%s %.60s: %s, want it to name %q", bad.query, bad.body, r.Body, bad.want)
		}
	}
	if after := c.must(200, "GET", "/databases/shop/stats", "").Body; !bytes.Equal(before, after) {
		t.Fatalf("bad requests changed the database:\n%s\n%s", before, after)
	}
}

// TestIDSpellingsOfOneLength: an id's limit is measured in its shortest
// spelling, so a document stored under a 512-byte id whose lower case is
// longer ('Ⱥ' takes 2 bytes, 'ⱥ' 3) is read, matched (If-Match), listed
// and deleted by that lower-cased spelling too; an id whose shortest
// spelling is over the limit is still a 400 with a JSON error, in any
// spelling, and changes nothing.
func TestIDSpellingsOfOneLength(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	id := strings.Repeat("Ⱥ", 256)
	lower := strings.ToLower(id)
	if len(id) != 512 || len(lower) != 768 {
		t.Fatalf("test ids: %d and %d bytes", len(id), len(lower))
	}
	q := func(id string) string { return "/databases/db/docs?id=" + url.QueryEscape(id) }
	atID := func(r resp) string {
		t.Helper()
		return r.json(t)["Results"].([]any)[0].(map[string]any)["@metadata"].(map[string]any)["@id"].(string)
	}

	cv := c.must(201, "PUT", q(id), `{"v":1}`).json(t)["ChangeVector"].(string)
	if got := atID(c.must(200, "GET", q(lower), "")); got != id {
		t.Fatalf("GET by the lower-cased spelling: @id %q, want %q", got, id)
	}
	body, _ := json.Marshal(map[string]any{"Ids": []string{lower, id}})
	if got := c.must(200, "POST", "/databases/db/docs", string(body)).json(t)["Results"].([]any); len(got) != 2 || got[0] == nil || got[1] == nil {
		t.Fatalf("POST /docs by both spellings: %v", got)
	}
	if got := c.list("/databases/db/docs?startsWith=" + url.QueryEscape(lower)).ids(); len(got) != 1 || got[0] != id {
		t.Fatalf("listing by the lower-cased spelling: %q", got)
	}
	// An update by the lower-cased spelling matches the stored version.
	cv = c.must(201, "PUT", q(lower), `{"v":2}`, "If-Match", `"`+cv+`"`).json(t)["ChangeVector"].(string)
	// KELVIN SIGN spells 'k' in 3 bytes: 1536 bytes as sent, 512 at
	// shortest, one document with "k"×512.
	kelvin := strings.Repeat("\u212a", 512)
	c.must(201, "PUT", q(kelvin), `{"k":1}`)
	if got := atID(c.must(200, "GET", q(strings.Repeat("k", 512)), "")); got != kelvin {
		t.Fatalf("GET by the shortest spelling: @id %q", got)
	}
	if got := c.list("/databases/db/docs?startsWith=k&startAfter=" + url.QueryEscape(kelvin)).ids(); len(got) != 0 {
		t.Fatalf("listing after the last id: %q", got)
	}
	c.must(204, "DELETE", q(strings.ToUpper(kelvin)), "")

	before := c.must(200, "GET", "/databases/db/stats", "").Body
	for _, tc := range []struct{ method, id, want string }{
		{"PUT", id + "a", "513 bytes in its shortest spelling (max 512)"},
		{"PUT", lower + "a", "513 bytes in its shortest spelling, 769 as sent (max 512 in the shortest spelling)"},
		{"GET", lower + "a", "513 bytes in its shortest spelling, 769 as sent (max 512 in the shortest spelling)"},
		{"DELETE", lower + "a", "513 bytes in its shortest spelling, 769 as sent (max 512 in the shortest spelling)"},
		{"PUT", strings.Repeat("\u212a", 513), "513 bytes in its shortest spelling, 1539 as sent (max 512 in the shortest spelling)"},
		{"GET", strings.Repeat("a", 2049), "2049 bytes as sent (max 2048 as sent, and 512 in the id's shortest spelling)"},
	} {
		r := c.do(tc.method, q(tc.id), `{"v":3}`)
		var e struct{ Error, Type string }
		if r.Status != 400 || json.Unmarshal(r.Body, &e) != nil || e.Type != "BadRequest" || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s of a %d-byte id: %d %.300s; want a 400 saying %q", tc.method, len(tc.id), r.Status, r.Body, tc.want)
		}
	}
	if r := c.do("GET", "/databases/db/docs?startsWith="+url.QueryEscape(lower+"a"), ""); r.Status != 400 || !strings.Contains(string(r.Body), "startsWith") {
		t.Errorf("a startsWith over an id's limit: %d %.300s", r.Status, r.Body)
	}
	if after := c.must(200, "GET", "/databases/db/stats", "").Body; !bytes.Equal(before, after) {
		t.Fatalf("refused ids changed the database:\n%s\n%s", before, after)
	}

	c.must(204, "DELETE", q(lower), "", "If-Match", cv)
	c.must(404, "GET", q(id), "")
	c.must(404, "GET", q(lower), "")
}
