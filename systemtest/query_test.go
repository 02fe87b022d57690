package systemtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shardnode/shardnode/testcluster"
)

// TestQueryPagesAcrossNodes: a query with order by, offset and limit
// answers the same page through every node, each shard sending only its
// first offset+limit matches, and TotalResults still counts every match.
// An answer too large for one bus message is refused with
// ResultTooLarge by the replica that cannot send it, not with a 503 after
// the asking node waited out its attempts; with a limit the same query
// answers, and reads by id (a multi-id GET, a listing's page) are asked
// again in parts that fit.
func TestQueryPagesAcrossNodes(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 2})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":4,"ReplicationFactor":1}`)
	var cmds []string
	for i := range 300 {
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"users/%d","Document":{"Age":%d,"@metadata":{"@collection":"Users"}}}`, i, i%50))
	}
	testcluster.Must(t, 201, "POST", A+"/databases/db/bulk_docs", `{"Commands":[`+join(cmds)+`]}`)
	// Ages 49 down to 0, six users each; within an age, ids in string order.
	query := `{"Query":"from Users where Age >= 10 order by Age desc limit 7 offset 10"}`
	for i := range c.Members {
		r := testcluster.Must(t, 200, "POST", c.URL(i)+"/databases/db/queries", query)
		var out struct {
			Results []struct {
				Age      int
				Metadata struct {
					ID string `json:"@id"`
				} `json:"@metadata"`
			}
			TotalResults int
		}
		if err := json.Unmarshal(r.Body, &out); err != nil {
			t.Fatal(err)
		}
		if out.TotalResults != 240 || len(out.Results) != 7 {
			t.Fatalf("node %d: %d results of %d, want 7 of 240", i, len(out.Results), out.TotalResults)
		}
		// Offset 10 skips age 49 (six) and the first four of age 48 in id order.
		var got []string
		for _, d := range out.Results {
			got = append(got, fmt.Sprintf("%s:%d", d.Metadata.ID, d.Age))
		}
		want := "users/48:48,users/98:48,users/147:47,users/197:47,users/247:47,users/297:47,users/47:47"
		if strings.Join(got, ",") != want {
			t.Fatalf("node %d: page %v, want %s", i, got, want)
		}
	}

	if testing.Short() {
		return // 20 MiB through JSON is slow under the race detector
	}
	// Large documents, all in one bucket, on a shard node A does not hold.
	members := shardMembers(t, A, "db")
	tenant := ""
	for k := 0; tenant == ""; k++ {
		r := testcluster.Must(t, 200, "GET", A+fmt.Sprintf("/databases/db/sharding/bucket?id=t/%d", k), "").JSON(t)
		if m := members[int(r["Shard"].(float64))]; len(m) == 1 && m[0] != "A" {
			tenant = fmt.Sprintf("t/%d", k)
		}
	}
	big := strings.Repeat("x", 1<<20)
	for i := range 20 { // 20 MiB: more than a bus message carries (16 MiB + framing)
		testcluster.Must(t, 201, "PUT", A+fmt.Sprintf("/databases/db/docs?id=big/%d$%s", i, tenant), fmt.Sprintf(`{"Pad":%q,"@metadata":{"@collection":"Big"}}`, big))
	}
	// Refused by the replica that cannot send it (a 422 naming the size),
	// not after the router waited out its attempts on every member (503).
	r := testcluster.Must(t, 422, "POST", A+"/databases/db/queries", `{"Query":"from Big"}`)
	if !strings.Contains(string(r.Body), "ResultTooLarge") {
		t.Fatalf("an answer too large for the bus: %s", r.Body)
	}
	// A read of them all by id, and a listing (which reads its page by id),
	// are asked again in parts that fit.
	ids := ""
	for i := range 20 {
		ids += fmt.Sprintf("&id=big/%d$%s", i, tenant)
	}
	for _, path := range []string{"/databases/db/docs?" + ids[1:], "/databases/db/docs?startsWith=big/"} {
		var got struct{ Results []json.RawMessage }
		if err := json.Unmarshal(testcluster.Must(t, 200, "GET", A+path, "").Body, &got); err != nil || len(got.Results) != 20 {
			t.Fatalf("GET %.60s: %d documents (%v), want 20", path, len(got.Results), err)
		}
	}
	r = testcluster.Must(t, 200, "POST", A+"/databases/db/queries", `{"Query":"from Big limit 2"}`)
	var page struct {
		Results      []json.RawMessage
		TotalResults int
	}
	if err := json.Unmarshal(r.Body, &page); err != nil || len(page.Results) != 2 || page.TotalResults != 20 {
		t.Fatalf("from Big limit 2: %d results of %d (%v)", len(page.Results), page.TotalResults, err)
	}
	// A count (limit 0, with or without an offset) sends no document.
	for _, q := range []string{"from Big limit 0", "from Big limit 0 offset 5"} {
		r = testcluster.Must(t, 200, "POST", A+"/databases/db/queries", fmt.Sprintf(`{"Query":%q}`, q))
		page.Results = nil
		if err := json.Unmarshal(r.Body, &page); err != nil || len(page.Results) != 0 || page.TotalResults != 20 {
			t.Fatalf("%s: %d results of %d (%v)", q, len(page.Results), page.TotalResults, err)
		}
	}
}
