package node

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/storage"
)

// TestApplyRefusesWhatNoNodeCouldApply: a node-to-node apply request whose
// body is no command this version knows is refused with a 400 before it
// enters the raft log. Once committed, such an entry stopped every node
// that applied it, at every restart.
func TestApplyRefusesWhatNoNodeCouldApply(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	before := n.raft.r.LastIndex()
	for _, body := range []string{"garbage", "", "\x01{\"Name\": 5}", "\x7f{}"} {
		if r := c.do("POST", "/internal/raft/apply", body); r.Status != 400 || r.json(t)["Type"] == "" {
			t.Errorf("apply %q: %d %s", body, r.Status, r.Body)
		}
	}
	if after := n.raft.r.LastIndex(); after != before {
		t.Fatalf("refused commands reached the log: last index %d -> %d", before, after)
	}
	c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":1}`)
}

// TestJoinRefusesANodeThatCouldNeverTakePart: a join whose tag or addresses
// are invalid, or whose raft address nobody listens on, is a 400 and adds
// no voter; a one-node cluster keeps its quorum and serves.
func TestJoinRefusesANodeThatCouldNeverTakePart(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there any more
	for _, body := range []string{
		`{}`,
		`{"Node":{"Tag":"bad tag!","HttpUrl":"http://127.0.0.1:1","RaftAddr":"127.0.0.1:2"}}`,
		`{"Node":{"Tag":"B","HttpUrl":"not a url","RaftAddr":"127.0.0.1:2"}}`,
		`{"Node":{"Tag":"B","HttpUrl":"http://127.0.0.1:1","RaftAddr":"nowhere"}}`,
		`{"Node":{"Tag":"B","HttpUrl":"http://127.0.0.1:1","RaftAddr":"127.0.0.1:0"}}`,
		`{"Node":{"Tag":"B","HttpUrl":"http://127.0.0.1:1","RaftAddr":"127.0.0.1:2","NatsUrl":"ftp://x"}}`,
		`{"Node":{"Tag":"B","HttpUrl":"http://127.0.0.1:1","RaftAddr":"` + dead + `"}}`,
	} {
		if r := c.do("POST", "/cluster/join", body); r.Status != 400 {
			t.Errorf("join %s: %d %s", body, r.Status, r.Body)
		}
	}
	f := n.raft.r.GetConfiguration()
	if err := f.Error(); err != nil || len(f.Configuration().Servers) != 1 {
		t.Fatalf("raft configuration after refused joins: %+v %v", f.Configuration().Servers, err)
	}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
}

// TestDocMapToleratesHugeNumbers: a document stored before writes refused
// numbers beyond float64's range is still read by queries, the number
// comparing as infinity, instead of failing every query that reads it.
func TestDocMapToleratesHugeNumbers(t *testing.T) {
	m, err := docMap(&storage.Document{ID: "big/1", Body: []byte(`{"n":1e400,"a":[-1e999,{"x":2}],"s":"t"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := m["n"].(float64); !ok || !math.IsInf(n, 1) {
		t.Fatalf("n = %#v", m["n"])
	}
	a := m["a"].([]any)
	if f, ok := a[0].(float64); !ok || !math.IsInf(f, -1) || a[1].(map[string]any)["x"] != 2.0 || m["s"] != "t" {
		t.Fatalf("decoded %#v", m)
	}
}

// TestReusedRequestIDIsRefused: a Request-Id names one command; reusing it
// for another is a 409 that says so, never a success that did nothing.
// Retrying the same create returns its record.
func TestReusedRequestIDIsRefused(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/rq1", `{"Shards": 2}`, "Request-Id", "r-123")
	if r := c.must(201, "PUT", "/admin/databases/rq1", `{"Shards": 2}`, "Request-Id", "r-123"); r.json(t)["DatabaseName"] != "rq1" {
		t.Fatalf("retried create: %s", r.Body)
	}
	// Names are case-insensitive, so a retry spelling the name another way
	// is the same request.
	if r := c.must(201, "PUT", "/admin/databases/RQ1", `{"Shards": 2}`, "Request-Id", "r-123"); r.json(t)["DatabaseName"] != "rq1" {
		t.Fatalf("create retried with another spelling: %s", r.Body)
	}
	if r := c.do("PUT", "/admin/databases/RQ1", `{"Shards": 3}`, "Request-Id", "r-123"); r.Status != 409 || r.json(t)["Type"] != "RequestIdReused" {
		t.Fatalf("another create under the first's id and another spelling: %d %s", r.Status, r.Body)
	}
	if r := c.do("PUT", "/admin/databases/rq2", `{}`, "Request-Id", "r-123"); r.Status != 409 || r.json(t)["Type"] != "RequestIdReused" {
		t.Fatalf("create with a reused id: %d %s", r.Status, r.Body)
	}
	c.must(404, "GET", "/admin/databases/rq2", "")
	c.must(201, "PUT", "/admin/databases/rq3", `{}`, "Request-Id", "r-456")
	if r := c.do("DELETE", "/admin/databases/rq1", "", "Request-Id", "r-456"); r.Status != 409 || r.json(t)["Type"] != "RequestIdReused" {
		t.Fatalf("delete with a reused id: %d %s", r.Status, r.Body)
	}
	c.must(200, "GET", "/admin/databases/rq1", "")
	c.must(204, "DELETE", "/admin/databases/rq1", "", "Request-Id", "r-789")
	if r := c.do("PUT", "/admin/databases/rq1", `{"Shards": 3}`, "Request-Id", "r-123"); r.Status != 409 {
		t.Fatalf("re-create with the first create's id after a delete: %d %s", r.Status, r.Body)
	}

	// Resharding: a retry gets its operation, another request the 409.
	c.must(201, "PUT", "/admin/databases/rs", `{"Shards": 2}`)
	move := `{"FromBucket": 0, "ToBucket": 10, "ToShard": 1}`
	first := c.must(202, "POST", "/databases/rs/resharding", move, "Request-Id", "op-1").json(t)["OperationId"]
	if again := c.must(202, "POST", "/databases/rs/resharding", move, "Request-Id", "op-1").json(t)["OperationId"]; again != first {
		t.Fatalf("retried resharding: operation %v, first %v", again, first)
	}
	if r := c.do("POST", "/databases/rs/resharding", `{"FromBucket": 0, "ToBucket": 10, "ToShard": 0}`, "Request-Id", "op-1"); r.Status != 409 || r.json(t)["Type"] != "RequestIdReused" {
		t.Fatalf("resharding with a reused id: %d %s", r.Status, r.Body)
	}

	// Adding a shard: a retry adds nothing more, another command's id is
	// refused and adds nothing.
	shards := func() int {
		return len(c.must(200, "GET", "/admin/databases/rs", "").json(t)["Sharding"].(map[string]any)["Shards"].(map[string]any))
	}
	c.must(201, "POST", "/admin/databases/rs/shards", `{"Members": ["A"]}`, "Request-Id", "add-1")
	c.must(201, "POST", "/admin/databases/rs/shards", `{"Members": ["A"]}`, "Request-Id", "add-1")
	if n := shards(); n != 3 {
		t.Fatalf("%d shards after an add and its retry, want 3", n)
	}
	if r := c.do("POST", "/admin/databases/rs/shards", `{"Members": ["A"]}`, "Request-Id", "op-1"); r.Status != 409 || r.json(t)["Type"] != "RequestIdReused" {
		t.Fatalf("add shard with a resharding's id: %d %s", r.Status, r.Body)
	}
	if n := shards(); n != 3 {
		t.Fatalf("%d shards after a refused add, want 3", n)
	}
}

// TestRetriedCreateMustAskForTheSameDatabase: a create retried with its
// Request-Id answers 201 with the record only when it asks for what the
// first try did; the same id with another body is a 409 RequestIdReused
// that changes nothing (it was a 201 with the first try's record, which
// the client took for the database it asked for).
func TestRetriedCreateMustAskForTheSameDatabase(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	shards := func(rec map[string]any) int { return len(rec["Sharding"].(map[string]any)["Shards"].(map[string]any)) }
	first := c.must(201, "PUT", "/admin/databases/rq1", `{}`, "Request-Id", "r1").json(t)
	for _, body := range []string{`{"Shards": 2}`, `{"Shards": 1, "ReplicationFactor": 2}`} {
		r := c.do("PUT", "/admin/databases/rq1", body, "Request-Id", "r1")
		if e := r.json(t); r.Status != 409 || e["Type"] != "RequestIdReused" || !strings.Contains(e["Error"].(string), "Shards 1, ReplicationFactor 1") {
			t.Fatalf("create retried with its id and body %s: %d %s", body, r.Status, r.Body)
		}
	}
	// The same request, the defaults written out or not, is its retry.
	again := c.must(201, "PUT", "/admin/databases/rq1", `{"Shards": 1}`, "Request-Id", "r1").json(t)
	if again["CreatedIndex"] != first["CreatedIndex"] || again["DatabaseId"] != first["DatabaseId"] || shards(again) != 1 {
		t.Fatalf("retried create answered %v, first %v", again, first)
	}
	if got := shards(c.must(200, "GET", "/admin/databases/rq1", "").json(t)); got != 1 {
		t.Fatalf("database has %d shards after refused retries, want 1", got)
	}
}

// TestRetriedDeleteIsIdempotent: a delete retried with its Request-Id
// after its answer was lost answers 204 again, though the database is
// gone (it was a 404: the lookup ran before the id was looked at).
// Another command's id stays a 409 that deletes nothing, and a new id for
// a missing database a 404.
func TestRetriedDeleteIsIdempotent(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/rq1", `{}`)
	c.must(204, "DELETE", "/admin/databases/rq1", "", "Request-Id", "d1")
	c.must(204, "DELETE", "/admin/databases/rq1", "", "Request-Id", "d1")
	c.must(204, "DELETE", "/admin/databases/RQ1", "", "Request-Id", "d1") // names are case-insensitive
	c.must(404, "GET", "/admin/databases/rq1", "")
	if r := c.do("DELETE", "/admin/databases/rq1", "", "Request-Id", "d2"); r.Status != 404 || r.json(t)["Type"] != "DatabaseDoesNotExist" {
		t.Fatalf("delete of a missing database with a new id: %d %s", r.Status, r.Body)
	}
	if r := c.do("DELETE", "/admin/databases/rq1$0", "", "Request-Id", "d1"); r.Status != 404 {
		t.Fatalf("delete of a missing database's shard: %d %s", r.Status, r.Body)
	}
	// Ids of other commands: a create's, and the delete of another database.
	c.must(201, "PUT", "/admin/databases/rq2", `{}`, "Request-Id", "c2")
	for _, try := range []struct{ db, id string }{{"rq1", "c2"}, {"rq2", "c2"}, {"rq2", "d1"}} {
		r := c.do("DELETE", "/admin/databases/"+try.db, "", "Request-Id", try.id)
		if e := r.json(t); r.Status != 409 || e["Type"] != "RequestIdReused" {
			t.Fatalf("delete %s with the id %s: %d %s", try.db, try.id, r.Status, r.Body)
		}
	}
	c.must(200, "GET", "/admin/databases/rq2", "")
	// The delete applied: its retry answers as the first try did, even
	// once the name is taken again, and leaves the new database alone.
	c.must(201, "PUT", "/admin/databases/rq1", `{}`)
	c.must(204, "DELETE", "/admin/databases/rq1", "", "Request-Id", "d1")
	c.must(200, "GET", "/admin/databases/rq1", "")
}

// TestReshardingRetryAfterItsOperationWasPruned: once a finished operation
// is pruned from the record, a retry of the request that started it cannot
// be told from another command that used the id. It is still refused
// (nothing is applied), with a message that says the operation is gone
// rather than that the id surely named another command.
func TestReshardingRetryAfterItsOperationWasPruned(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/rs", `{"Shards": 2}`) // shard 0 owns 0..524287
	move := `{"FromBucket": 0, "ToBucket": 9, "ToShard": 1}`
	first := c.must(202, "POST", "/databases/rs/resharding", move, "Request-Id", "op-old").json(t)["OperationId"].(string)
	finished := func(id string) func() bool {
		return func() bool {
			return c.must(200, "GET", "/databases/rs/resharding/"+id, "").json(t)["Status"] == "Completed"
		}
	}
	waitFor(t, 10*time.Second, "the first operation", finished(first))
	// 51 more finished operations: the first is pruned when the last starts.
	var ids []string
	for i := range 50 {
		ids = append(ids, c.must(202, "POST", "/databases/rs/resharding", fmt.Sprintf(`{"FromBucket": %d, "ToBucket": %d, "ToShard": 1}`, 100+i, 100+i), "").json(t)["OperationId"].(string))
	}
	for _, id := range ids {
		waitFor(t, 10*time.Second, "operation "+id, finished(id))
	}
	last := c.must(202, "POST", "/databases/rs/resharding", `{"FromBucket": 200, "ToBucket": 200, "ToShard": 1}`, "").json(t)["OperationId"].(string)
	waitFor(t, 10*time.Second, "the last operation", finished(last))
	c.must(404, "GET", "/databases/rs/resharding/"+first, "")

	r := c.do("POST", "/databases/rs/resharding", move, "Request-Id", "op-old")
	body := r.json(t)
	if r.Status != 409 || body["Type"] != "RequestIdReused" {
		t.Fatalf("retry after the prune: %d %s", r.Status, r.Body)
	}
	msg := body["Error"].(string)
	for _, want := range []string{`Request-Id "op-old" was already used`, "operation " + first, "pruned", "50 finished operations", "not applied"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "was already used by another command") {
		t.Errorf("message says the id surely named another command: %s", msg)
	}
	// 50 finished, and the last, which was running when the first was
	// pruned: the refused retry started nothing.
	if ops := c.must(200, "GET", "/databases/rs/resharding", "").json(t)["Operations"].([]any); len(ops) != 51 {
		t.Errorf("%d operations in the record after the refused retry, want 51", len(ops))
	}
}

// TestLeaderFinishesARemovalThatStoppedHalfway: a node that raft's
// configuration no longer lists but the state does (a removal whose raft
// step committed and whose state step never ran) is removed from the
// state by the leader, and its replicas are given to another node.
func TestLeaderFinishesARemovalThatStoppedHalfway(t *testing.T) {
	a := testNode(t, t.TempDir())
	joinedNode(t, a, "B")
	c := client{t, a.HTTPURL()}
	// The raft step alone, as when the removal's answer was lost.
	if err := a.raft.r.RemoveServer("B", 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*finishRemovalsEvery, "the leader to finish the removal", func() bool { return len(a.fsm.Nodes()) == 1 })
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
}

// joinedNode starts node tag, joined to a's cluster, and returns once a's
// state lists it; tweak adjusts its configuration further.
func joinedNode(t *testing.T, a *Node, tag string, tweak ...func(*config.Config)) *Node {
	t.Helper()
	n := testNode(t, t.TempDir(), append([]func(*config.Config){func(cfg *config.Config) {
		cfg.Node.Tag = tag
		cfg.Raft.Bootstrap = false
		cfg.Raft.Join = a.HTTPURL()
	}}, tweak...)...)
	waitFor(t, 10*time.Second, tag+" to register", func() bool {
		for _, m := range a.fsm.Nodes() {
			if m.Tag == tag {
				return true
			}
		}
		return false
	})
	return n
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDataDirectoryKeepsItsNodeTag: a data directory opens only as the node
// it was created for; another tag is refused at start with a message that
// names node.tag (it used to run and never become ready).
func TestDataDirectoryKeepsItsNodeTag(t *testing.T) {
	dir := t.TempDir()
	n := testNode(t, dir)
	n.Close()
	cfg := config.Default()
	cfg.Node.DataDir, cfg.Node.Tag = dir, "C"
	cfg.HTTP.Addr, cfg.Raft.Addr, cfg.NATS.Listen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Start(ctx, &cfg, nil); err == nil || !strings.Contains(err.Error(), "node.tag") || !strings.Contains(err.Error(), `"A"`) {
		t.Fatalf("start as C on A's data directory: %v", err)
	}
	testNode(t, dir) // as A again
}

// TestFailedStartLeavesTheDirectoryUnclaimed: a start that fails before
// raft has state (here its HTTP port is taken) does not tie a fresh data
// directory to its tag: the corrected start, under another tag, runs.
func TestFailedStartLeavesTheDirectoryUnclaimed(t *testing.T) {
	dir := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := config.Default()
	cfg.Node.DataDir, cfg.Node.Tag = dir, "A"
	cfg.HTTP.Addr, cfg.Raft.Addr, cfg.NATS.Listen = taken.Addr().String(), "127.0.0.1:0", "127.0.0.1:0"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Start(ctx, &cfg, nil); err == nil || !strings.Contains(err.Error(), "http.addr") {
		t.Fatalf("start on a taken port: %v", err)
	}
	cfg.Node.Tag, cfg.HTTP.Addr = "C", "127.0.0.1:0"
	n, err := Start(ctx, &cfg, nil)
	if err != nil {
		t.Fatalf("start as C after the failed start as A: %v", err)
	}
	n.Close()
	cfg.Node.Tag = "A" // now the directory is C's
	if _, err := Start(ctx, &cfg, nil); err == nil || !strings.Contains(err.Error(), `"C"`) {
		t.Fatalf("start as A on C's data directory: %v", err)
	}
}

// TestGzipRequestBodies: bodies sent gzip-compressed, as RavenDB's clients
// send them, are read as if sent plain.
func TestGzipRequestBodies(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	gz := func(s string) string {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.String()
	}
	c.must(201, "PUT", "/databases/db/docs?id=a", gz(`{"v":1,"@metadata":{"@collection":"Things"}}`), "Content-Encoding", "gzip")
	c.must(201, "POST", "/databases/db/bulk_docs", gz(`{"Commands":[{"Type":"PUT","Id":"b","Document":{"v":2}}]}`), "Content-Encoding", "gzip")
	r := c.must(200, "POST", "/databases/db/queries", gz(`{"Query":"from @all_docs order by v"}`), "Content-Encoding", "gzip").json(t)
	if r["TotalResults"] != 2.0 {
		t.Fatalf("query over gzip-sent documents: %v", r)
	}
}

// TestReplicationFromAnEarlierDatabaseIsRefused: a replication batch that
// says its replica belongs to a database created before the one of that
// name this node knows (deleted since, and created again) is refused, so
// its documents cannot enter the new database; one from a newer database
// this node has not applied yet is a retryable refusal; one from a node of
// an earlier version (no header) passes.
func TestReplicationFromAnEarlierDatabaseIsRefused(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	old := n.recordOf("db").CreatedIndex
	c.must(204, "DELETE", "/admin/databases/db", "")
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	cur := n.recordOf("db").CreatedIndex
	status := func(err error) int {
		var ae *apiError
		if err == nil {
			return 0
		}
		if errors.As(err, &ae) {
			return ae.Status
		}
		return -1
	}
	for _, tc := range []struct {
		created string
		want    int
	}{
		{strconv.FormatUint(old, 10), 410},
		{strconv.FormatUint(cur, 10), 0},
		{strconv.FormatUint(cur+5, 10), 503},
		{"", 0},
		{"x", 400},
	} {
		if got := status(n.checkIncarnation("db", tc.created)); got != tc.want {
			t.Errorf("batch from a database created at %q (this one: %d): status %d, want %d", tc.created, cur, got, tc.want)
		}
	}
}

// TestJoinIsCheckedBeforeRaftListens: a node with no raft state that joins
// asks the cluster whether its tag is free for its data directory before
// its raft address accepts a connection, so a member's peers never send
// it the member's log; a NodeIdConflict answer stops the start with
// ErrNodeIDConflict, and the directory keeps its id for the next start.
func TestJoinIsCheckedBeforeRaftListens(t *testing.T) {
	raftLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := raftLn.Addr().String()
	raftLn.Close()
	asked := make(chan string, 4)
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req joinRequest
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil || r.URL.Path != "/cluster/join" {
			http.Error(w, "unexpected", 400)
			return
		}
		state := "closed"
		if c, err := net.DialTimeout("tcp", raftAddr, time.Second); err == nil {
			c.Close()
			state = "open"
		}
		asked <- fmt.Sprintf("check=%v id=%s raft=%s", req.Check, req.Node.ID, state)
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"Error":"node B is a member with another data directory (node id %s)","Type":"NodeIdConflict"}`, strings.Repeat("0", 32))
	}))
	defer leader.Close()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Node.DataDir, cfg.Node.Tag = dir, "B"
	cfg.HTTP.Addr, cfg.Raft.Addr, cfg.NATS.Listen = "127.0.0.1:0", raftAddr, "127.0.0.1:0"
	cfg.Raft.Bootstrap, cfg.Raft.Join = false, leader.URL
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = Start(ctx, &cfg, nil)
	if !errors.Is(err, ErrNodeIDConflict) {
		t.Fatalf("start refused by the cluster: %v, want ErrNodeIDConflict", err)
	}
	id, rerr := os.ReadFile(filepath.Join(dir, nodeIDFile))
	if rerr != nil || !validNodeID(strings.TrimSpace(string(id))) {
		t.Fatalf("NODE_ID %q: %v", id, rerr)
	}
	close(asked)
	var got []string
	for a := range asked {
		got = append(got, a)
	}
	if want := fmt.Sprintf("check=true id=%s raft=closed", strings.TrimSpace(string(id))); len(got) != 1 || got[0] != want {
		t.Fatalf("the cluster was asked %q, want once %q", got, want)
	}
	if !strings.Contains(err.Error(), strings.TrimSpace(string(id))) || !strings.Contains(err.Error(), "DELETE /cluster/nodes/B") {
		t.Fatalf("error does not name this directory's id and the way out: %v", err)
	}
	if _, err := loadNodeID(dir); err != nil {
		t.Fatal(err)
	}
	if again, _ := loadNodeID(dir); again != strings.TrimSpace(string(id)) {
		t.Fatalf("the directory's id changed: %s then %s", id, again)
	}
}

// TestJoinChecksNodeIDs: the leader refuses a join or a check whose node
// id is malformed (400) or differs from the one recorded for its tag (409
// NodeIdConflict), changing nothing; the same id, or a check of a free
// tag, passes.
func TestJoinChecksNodeIDs(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	self := n.selfInfo()
	if !validNodeID(self.ID) || n.fsm.Nodes()[0].ID != self.ID {
		t.Fatalf("the node registered %+v, its own id is %q", n.fsm.Nodes()[0], self.ID)
	}
	other := strings.Repeat("ab", 16)
	for body, want := range map[string]int{
		`{"Check":true,"Node":{"Tag":"A","Id":"` + self.ID + `"}}`:                                                      200,
		`{"Check":true,"Node":{"Tag":"B","Id":"` + other + `"}}`:                                                        200,
		`{"Check":true,"Node":{"Tag":"A","Id":"` + other + `"}}`:                                                        409,
		`{"Check":true,"Node":{"Tag":"A","Id":"XYZ"}}`:                                                                  400,
		`{"Check":true,"Node":{"Tag":"A"}}`:                                                                             400,
		`{"Check":true,"Node":{"Tag":"a b","Id":"` + other + `"}}`:                                                      400,
		`{"Node":{"Tag":"A","Id":"nothex","HttpUrl":"` + self.HttpUrl + `","RaftAddr":"` + self.RaftAddr + `"}}`:        400,
		`{"Node":{"Tag":"A","Id":"` + other + `","HttpUrl":"` + self.HttpUrl + `","RaftAddr":"` + self.RaftAddr + `"}}`: 409,
	} {
		r := c.do("POST", "/cluster/join", body)
		if r.Status != want {
			t.Errorf("join %s: %d %s, want %d", body, r.Status, r.Body, want)
		}
		if want == 409 && r.json(t)["Type"] != "NodeIdConflict" {
			t.Errorf("join %s: %s, want Type NodeIdConflict", body, r.Body)
		}
	}
	if nodes := n.fsm.Nodes(); len(nodes) != 1 || nodes[0].ID != self.ID {
		t.Fatalf("nodes after refused joins: %+v", nodes)
	}
}
