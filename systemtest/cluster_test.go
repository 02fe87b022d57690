package systemtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

func TestReplicasConvergeAndAnyNodeServes(t *testing.T) {
	for _, external := range []bool{false, true} {
		t.Run(fmt.Sprintf("externalNATS=%v", external), func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Options{Nodes: 3, ExternalNATS: external})
			A, C := c.URL(0), c.URL(2)
			rec := testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`).JSON(t)
			shards := rec["Sharding"].(map[string]any)["Shards"].(map[string]any)
			count := map[string]int{}
			for _, s := range shards {
				ms := s.(map[string]any)["Members"].([]any)
				if len(ms) != 2 || ms[0] == ms[1] {
					t.Fatalf("members %v", ms)
				}
				for _, m := range ms {
					count[m.(string)]++
				}
			}
			if count["A"] != 2 || count["B"] != 2 || count["C"] != 2 {
				t.Fatalf("replicas not spread evenly: %v", count)
			}
			testcluster.Must(t, 400, "PUT", C+"/admin/databases/toomany", `{"Shards":1,"ReplicationFactor":4}`)
			// The record is visible on every node.
			testcluster.Must(t, 200, "GET", c.URL(1)+"/admin/databases/db", "")

			testcluster.Must(t, 201, "PUT", A+"/databases/db/docs?id=users/1", `{"Name":"Ada","@metadata":{"@collection":"Users"}}`)
			got := testcluster.Must(t, 200, "GET", C+"/databases/db/docs?id=users/1", "").JSON(t)
			if got["Results"].([]any)[0].(map[string]any)["Name"] != "Ada" {
				t.Fatalf("read through C: %v", got)
			}
			// An empty If-Match asks for a new document, through every node
			// (one of them forwards to a replica on another node).
			for i := range c.Members {
				testcluster.Must(t, 409, "PUT", c.URL(i)+"/databases/db/docs?id=users/1", `{"Name":"Bob"}`, "If-Match", `""`)
				testcluster.Must(t, 201, "PUT", fmt.Sprintf("%s/databases/db/docs?id=new/%d", c.URL(i), i), `{}`, "If-Match", `""`)
			}
			// A write load through every node.
			var wg sync.WaitGroup
			for w := 0; w < 6; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					url := c.URL(w % 3)
					for i := 0; i < 40; i++ {
						testcluster.Must(t, 201, "PUT", fmt.Sprintf("%s/databases/db/docs?id=w%d/%d", url, w, i), fmt.Sprintf(`{"W":%d,"I":%d}`, w, i))
						if i%10 == 0 {
							testcluster.Must(t, 204, "DELETE", fmt.Sprintf("%s/databases/db/docs?id=w%d/%d", url, w, i), "")
						}
					}
				}()
			}
			wg.Wait()
			testcluster.WaitFor(t, 30*time.Second, "replicas to converge", func() error { return converged(t, c, "db") })
			q := testcluster.Must(t, 200, "POST", c.URL(1)+"/databases/db/queries", `{"Query":"from @all_docs"}`).JSON(t)
			if q["TotalResults"] != float64(1+3+6*36) {
				t.Fatalf("query through B counts %v documents", q["TotalResults"])
			}
		})
	}
}

func TestWaitForReplicas(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 2})
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":1,"ReplicationFactor":2}`)
	testcluster.Must(t, 201, "PUT", c.URL(1)+"/databases/db/docs?id=x&waitForReplicas=2", `{"v":1}`)
	// Both replicas hold it the moment the write is acknowledged.
	for i := range c.Members {
		testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db$0/docs?id=x", c.URL(i)), "")
	}
	testcluster.Must(t, 400, "PUT", c.URL(0)+"/databases/db/docs?id=x&waitForReplicas=3", `{"v":1}`)
}

// TestPartitionedWritesConverge writes the same id on both replicas of a
// shard while they cannot reach each other; once they can, both hold the
// later write and the earlier one is recorded as the conflict's loser.
func TestPartitionedWritesConverge(t *testing.T) {
	if testing.Short() {
		t.Skip("process cluster")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes})
	rec := testcluster.Must(t, 201, "PUT", c.URL(2)+"/admin/databases/db", `{"Shards":1,"ReplicationFactor":2}`).JSON(t)
	members := rec["Sharding"].(map[string]any)["Shards"].(map[string]any)["0"].(map[string]any)["Members"].([]any)
	if fmt.Sprint(members) != "[A B]" {
		t.Fatalf("members %v", members)
	}
	A, B, C := c.Members[0], c.Members[1], c.Members[2]
	testcluster.Must(t, 201, "PUT", C.URL()+"/databases/db/docs?id=x&waitForReplicas=2", `{"v":"base"}`)
	B.Stop()
	testcluster.Must(t, 201, "PUT", C.URL()+"/databases/db/docs?id=x", `{"v":"on A"}`)
	A.Stop()
	B.Start()
	testcluster.WaitFor(t, 60*time.Second, "the write to reach B", func() error {
		_, err := testcluster.Expect(201, "PUT", C.URL()+"/databases/db/docs?id=x", `{"v":"on B"}`)
		return err
	})
	A.Start()
	testcluster.WaitFor(t, 60*time.Second, "the replicas to converge", func() error { return converged(t, c, "db") })
	for _, m := range []*testcluster.Member{A, B} {
		d := testcluster.Must(t, 200, "GET", m.URL()+"/databases/db$0/docs?id=x", "").JSON(t)
		if v := d["Results"].([]any)[0].(map[string]any)["v"]; v != "on B" {
			t.Fatalf("%s holds %v, want the later write", m.Tag, v)
		}
	}
	cs := testcluster.Must(t, 200, "GET", C.URL()+"/databases/db/conflicts", "").JSON(t)
	if cs["TotalResults"] != float64(1) || !strings.Contains(string(mustJSON(cs)), `"on A"`) {
		t.Fatalf("conflicts %v", cs)
	}
}

// TestServesEveryShardAfterANodeDies kills one of three nodes: reads and
// writes for every shard go on, and /cluster reports the node down.
func TestServesEveryShardAfterANodeDies(t *testing.T) {
	if testing.Short() {
		t.Skip("process cluster")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes})
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	ids := map[int]string{}
	for i := 0; len(ids) < 3; i++ {
		id := fmt.Sprintf("doc/%d", i)
		r := testcluster.Must(t, 200, "GET", c.URL(0)+"/databases/db/sharding/bucket?id="+id, "").JSON(t)
		s := int(r["Shard"].(float64))
		if _, ok := ids[s]; !ok {
			ids[s] = id
			testcluster.Must(t, 201, "PUT", c.URL(0)+"/databases/db/docs?id="+id+"&waitForReplicas=2", `{"v":1}`)
		}
	}
	leader := c.Leader()
	victim := (leader + 1) % 3 // not the leader: raft keeps its leader
	c.Members[victim].Kill()
	for i, m := range c.Members {
		if i == victim {
			continue
		}
		for s, id := range ids {
			testcluster.Must(t, 200, "GET", m.URL()+"/databases/db/docs?id="+id, "")
			testcluster.Must(t, 201, "PUT", m.URL()+"/databases/db/docs?id="+id, fmt.Sprintf(`{"v":2,"via":"%s","shard":%d}`, m.Tag, s))
		}
		testcluster.WaitFor(t, 10*time.Second, "the dead node to be reported down", func() error {
			cl := testcluster.Must(t, 200, "GET", m.URL()+"/cluster", "").JSON(t)
			for _, n := range cl["Nodes"].([]any) {
				nm := n.(map[string]any)
				if nm["Tag"] == c.Members[victim].Tag && nm["Status"] == "Down" {
					return nil
				}
			}
			return fmt.Errorf("cluster view %v", cl)
		})
	}
}

// TestRestartedNodeServesOnlyTheCurrentState: a node that was down while a
// database was deleted and another created serves, from the moment it says
// it is ready, the state the cluster had committed: the deleted database is
// a 404 (a write to it is refused, not acknowledged and lost), the new one
// answers with its documents. It has to ask the leader how far the log
// goes: its own commit index after a restart is only as far as its own log.
func TestRestartedNodeServesOnlyTheCurrentState(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/old", `{"Shards":3,"ReplicationFactor":3}`)
	testcluster.Must(t, 201, "PUT", A+"/databases/old/docs?id=o/1", `{"v":1}`)
	C := c.Members[2]
	// C restarts from a snapshot that has "old" and a log that deletes it
	// (its commit index starts at the snapshot's) ...
	testcluster.Must(t, 204, "POST", C.URL()+"/admin/raft/snapshot", "")
	testcluster.Must(t, 204, "DELETE", A+"/admin/databases/old", "")
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/new0", `{"Shards":2,"ReplicationFactor":2}`)
	testcluster.WaitFor(t, 10*time.Second, "C to apply the new database", func() error {
		_, err := testcluster.Expect(200, "GET", C.URL()+"/admin/databases/new0", "")
		return err
	})
	C.Stop()
	// ... and misses entries committed while it is down.
	for i := 1; i < 20; i++ {
		testcluster.Must(t, 201, "PUT", A+fmt.Sprintf("/admin/databases/new%d", i), `{"Shards":2,"ReplicationFactor":2}`)
	}
	testcluster.Must(t, 201, "PUT", A+"/databases/new19/docs?id=n/1", `{"v":1}`)
	C.Start()
	for _, p := range []struct{ method, path, body string }{
		{"GET", "/databases/old/docs?id=o/1", ""},
		{"PUT", "/databases/old/docs?id=o/2", `{"v":2}`},
	} {
		if r, _ := testcluster.Do(p.method, C.URL()+p.path, p.body); r.Status != 404 {
			t.Fatalf("%s %s on the restarted node: %d %s, want 404: the database was deleted", p.method, p.path, r.Status, r.Body)
		}
	}
	if r, _ := testcluster.Do("GET", C.URL()+"/databases/new19/docs?id=n/1", ""); r.Status != 200 {
		t.Fatalf("GET of a database created while the node was down: %d %s", r.Status, r.Body)
	}
}

// TestRestartedReplicaServesOnlyOnceCaughtUp: while one replica's node is
// down, the other takes new versions of every document. Once the node is
// back and ready, routed reads through a third node must return the new
// versions at once (the restarted replica, behind, is skipped until its
// peer's changes have reached it), and a write with If-Match set to an old
// change vector is refused: it would replace an acknowledged version.
func TestRestartedReplicaServesOnlyOnceCaughtUp(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":1,"ReplicationFactor":2}`)
	members := shardMembers(t, A, "db")[0]
	down, up := memberByTag(c, members[0]), memberByTag(c, members[1])
	var third *testcluster.Member
	for _, m := range c.Members {
		if m != down && m != up {
			third = m
		}
	}
	const docs = 3000
	bulk := func(url string, v int) {
		var cmds []string
		for i := range docs {
			cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"x/%d","Document":{"V":%d}}`, i, v))
		}
		testcluster.Must(t, 201, "POST", url+"/databases/db/bulk_docs?waitForReplicas=1", `{"Commands":[`+join(cmds)+`]}`)
	}
	bulk(up.URL(), 1)
	testcluster.WaitFor(t, 30*time.Second, "both replicas to hold V1", func() error { return converged(t, c, "db") })
	old := testcluster.Must(t, 200, "GET", up.URL()+"/databases/db/docs?id=x/0", "").JSON(t)
	oldCV := old["Results"].([]any)[0].(map[string]any)["@metadata"].(map[string]any)["@change-vector"].(string)
	down.Stop()
	bulk(up.URL(), 2)
	down.Start()
	ids := ""
	for i := range docs {
		ids += fmt.Sprintf("&id=x/%d", i)
		if (i+1)%500 == 0 {
			if rr, _ := testcluster.Do("GET", third.URL()+"/databases/db/docs?"+ids[1:], ""); rr.Status != 200 {
				for _, m := range c.Members {
					h, _ := testcluster.Do("GET", m.URL()+"/healthz", "")
					t.Logf("health of %s: %s", m.Tag, h.Body)
				}
			}
			r := testcluster.Must(t, 200, "GET", third.URL()+"/databases/db/docs?"+ids[1:], "").JSON(t)
			for _, d := range r["Results"].([]any) {
				if d := d.(map[string]any); d["V"] != float64(2) {
					t.Fatalf("%v read through %s just after %s restarted: V %v, want 2", d["@metadata"].(map[string]any)["@id"], third.Tag, down.Tag, d["V"])
				}
			}
			ids = ""
		}
	}
	r, _ := testcluster.Do("PUT", third.URL()+"/databases/db/docs?id=x/0", `{"V":3}`, "If-Match", oldCV)
	if r.Status != 409 {
		t.Fatalf("a write based on the version before the restart: %d %s, want 409", r.Status, r.Body)
	}
}
