package node

import (
	"bytes"
	"fmt"
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
