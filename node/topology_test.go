package node

import (
	"context"
	"testing"
	"time"

	"github.com/shardnode/shardnode/raftfsm"
)

// TestTopologyEtagMovesWithTheNodes: GET /topology's Etag moves whenever
// its answer does, here when a node re-registers with another HTTP URL. A
// RavenDB client adopts a topology only if its Etag is newer than the one
// it holds: with the record's Etag alone, which a change of nodes leaves
// as it is, clients kept the stale URL.
func TestTopologyEtagMovesWithTheNodes(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{}`)
	topo := func() (etag uint64, url string) {
		m := c.must(200, "GET", "/topology?name=db", "").json(t)
		return uint64(m["Etag"].(float64)), m["Nodes"].([]any)[0].(map[string]any)["Url"].(string)
	}
	before, url := topo()
	record := c.must(200, "GET", "/admin/databases/db", "").json(t)["Etag"]

	moved := n.fsm.Nodes()[0]
	moved.HttpUrl = "http://127.0.0.1:1"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	index, err := n.proposeIndex(ctx, &raftfsm.AddNode{Node: moved})
	if err != nil {
		t.Fatal(err)
	}
	// The node's register loop puts its own URL back soon after: the
	// answer shows either URL, with an Etag at least the change's.
	if etag, _ := topo(); etag < index || etag <= before {
		t.Fatalf("topology Etag %d after the node list changed at index %d (before: %d)", etag, index, before)
	}
	waitFor(t, 10*time.Second, "the node to register its own URL again", func() bool {
		_, u := topo()
		return u == url
	})
	if etag, _ := topo(); etag <= index {
		t.Fatalf("topology Etag %d after the URL came back, not above the change at index %d", etag, index)
	}
	if got := c.must(200, "GET", "/admin/databases/db", "").json(t)["Etag"]; got != record {
		t.Fatalf("the record's Etag moved from %v to %v: the test no longer tells the node list's part", record, got)
	}
}
