package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestPausedNodeTakesNoWritesIntoADeletedDatabase: a node frozen (SIGSTOP)
// while a database is deleted and created again under the same name wakes
// up with the old records. Writes that reached it meanwhile must not be
// acknowledged into the old database's replicas, which it drops as soon as
// it applies the delete: every write it acknowledges must be readable
// through every node afterwards.
func TestPausedNodeTakesNoWritesIntoADeletedDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("process cluster")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes})
	A, B := c.Members[0], c.Members[1]
	testcluster.Must(t, 201, "PUT", A.URL()+"/admin/databases/yy", `{"Shards":3,"ReplicationFactor":2}`)
	testcluster.Must(t, 201, "PUT", B.URL()+"/databases/yy/docs?id=before", `{"v":0}`)

	B.Pause()
	defer B.Resume2()
	testcluster.Must(t, 204, "DELETE", A.URL()+"/admin/databases/yy", "")
	testcluster.Must(t, 201, "PUT", A.URL()+"/admin/databases/yy", `{"Shards":3,"ReplicationFactor":2}`)

	// Writes sent to the frozen node wait in its socket queue.
	const writes = 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []string
	outcomes := map[string]int{}
	client := &http.Client{Timeout: 60 * time.Second}
	var written sync.WaitGroup // each request is in the frozen node's socket
	written.Add(writes)
	for i := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			wrote := func() { once.Do(written.Done) }
			defer wrote() // a request that failed before its write
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				WroteRequest: func(httptrace.WroteRequestInfo) { wrote() },
			})
			id := fmt.Sprintf("z/%d", i)
			req, _ := http.NewRequestWithContext(ctx, "PUT", B.URL()+"/databases/yy/docs?id="+id, strings.NewReader(`{"v":1}`))
			res, err := client.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				outcomes["error"]++
				return
			}
			res.Body.Close()
			outcomes[res.Status]++
			if res.StatusCode == 201 {
				acked = append(acked, id)
			}
		}()
	}
	written.Wait()
	B.Resume()
	wg.Wait()
	t.Logf("outcomes of the writes sent to the frozen node: %v", outcomes)

	for _, m := range c.Members {
		testcluster.WaitFor(t, 30*time.Second, "node "+m.Tag+" to serve", func() error {
			_, err := testcluster.Expect(200, "GET", m.URL()+"/healthz", "")
			return err
		})
		for _, id := range acked {
			if _, err := testcluster.Expect(200, "GET", m.URL()+"/databases/yy/docs?id="+id, ""); err != nil {
				t.Errorf("acknowledged write %s lost, read through %s: %v", id, m.Tag, err)
			}
		}
		// The old database's document is gone everywhere.
		if _, err := testcluster.Expect(404, "GET", m.URL()+"/databases/yy/docs?id=before", ""); err != nil {
			t.Errorf("through %s: %v", m.Tag, err)
		}
	}
}

// TestWriteTimedOutOnAFrozenNodeIsNotAppliedLater: a write whose router
// gave up on a frozen replica (504) waits in that node's socket; when the
// node wakes it must not apply it over the newer acknowledged writes and
// the delete that other replicas took meanwhile.
func TestWriteTimedOutOnAFrozenNodeIsNotAppliedLater(t *testing.T) {
	if testing.Short() {
		t.Skip("process cluster")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes})
	C := c.Members[2]
	rec := testcluster.Must(t, 201, "PUT", C.URL()+"/admin/databases/db", `{"Shards":1,"ReplicationFactor":2}`).JSON(t)
	members := rec["Sharding"].(map[string]any)["Shards"].(map[string]any)["0"].(map[string]any)["Members"].([]any)
	testcluster.Must(t, 201, "PUT", C.URL()+"/databases/db/docs?id=x&waitForReplicas=2", `{"v":"v1"}`)
	var frozen *testcluster.Member
	for _, m := range c.Members {
		if m.Tag == members[0] {
			frozen = m
		}
	}
	frozen.Pause()
	defer frozen.Resume2()
	// Through C, which prefers the first member: the attempt there times
	// out once C finds the node down (or goes to the other member).
	r, err := testcluster.Do("PUT", C.URL()+"/databases/db/docs?id=x", `{"v":"v2-timed-out"}`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("write to the frozen member: %d %s", r.Status, r.Body)
	testcluster.WaitFor(t, 30*time.Second, "a write through the other member", func() error {
		_, err := testcluster.Expect(201, "PUT", C.URL()+"/databases/db/docs?id=x", `{"v":"v3"}`)
		return err
	})
	testcluster.Must(t, 204, "DELETE", C.URL()+"/databases/db/docs?id=x", "")
	frozen.Resume()
	testcluster.WaitFor(t, 30*time.Second, "the woken node to serve", func() error {
		_, err := testcluster.Expect(200, "GET", frozen.URL()+"/healthz", "")
		return err
	})
	// Long enough for replication between the two members to settle.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range c.Members {
			if r, err := testcluster.Do("GET", m.URL()+"/databases/db/docs?id=x", ""); err == nil && r.Status != 404 {
				t.Fatalf("the acknowledged delete was overwritten, read through %s: %d %s", m.Tag, r.Status, r.Body)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCommandThroughAFollowerOutlivesAFrozenLeader: a raft command sent
// through a follower while the leader is frozen goes to the next leader;
// no attempt waits out the whole forward to the frozen one (15 s).
func TestCommandThroughAFollowerOutlivesAFrozenLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("process cluster")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes})
	leader := c.Members[c.Leader()]
	follower := c.Members[(c.Leader()+1)%3]
	testcluster.Must(t, 201, "PUT", follower.URL()+"/admin/databases/db", `{"Shards":2,"ReplicationFactor":1}`)
	leader.Pause()
	defer leader.Resume2()
	start := time.Now()
	var last testcluster.Response
	for time.Since(start) < 40*time.Second {
		at := time.Now()
		r, err := testcluster.Do("POST", follower.URL()+"/databases/db/resharding", `{"FromBucket":0,"ToBucket":10,"ToShard":1}`, "Request-Id", "frozen-leader")
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(at)
		t.Logf("attempt after %v: %d in %v: %s", at.Sub(start).Round(time.Millisecond), r.Status, took.Round(time.Millisecond), r.Body)
		if took > 12*time.Second {
			t.Fatalf("one attempt waited %v on the frozen leader", took)
		}
		last = r
		if r.Status == 202 {
			return
		}
		if r.Status != 503 {
			t.Fatalf("resharding through a follower while the leader is frozen: %d %s", r.Status, r.Body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no new leader took the command within 40 s; last answer %d %s", last.Status, last.Body)
}

// TestNodeRemovedWhileFrozenStaysRemoved: a node removed from the cluster
// while it was frozen (it joined with an empty data directory and never
// restarted) must not join again when it wakes, and must say it was
// removed instead of serving. (The explorer saw such a node join again
// when it applied its own removal from the state; this test does not
// reproduce that timing here, so it guards the outcome only.)
func TestNodeRemovedWhileFrozenStaysRemoved(t *testing.T) {
	if testing.Short() {
		t.Skip("process cluster")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes})
	L := c.URL(c.Leader())
	var victim *testcluster.Member
	for i, m := range c.Members {
		if i != c.Leader() {
			victim = m
		}
	}
	testcluster.Must(t, 201, "PUT", L+"/admin/databases/db", `{"Shards":2,"ReplicationFactor":2}`)
	victim.Pause()
	defer victim.Resume2()
	testcluster.Must(t, 204, "DELETE", L+"/cluster/nodes/"+victim.Tag, "")
	time.Sleep(3 * time.Second) // frozen a while longer, as in the explorer's runs
	victim.Resume()
	testcluster.WaitFor(t, 30*time.Second, "the woken node to say it was removed", func() error {
		r, err := testcluster.Do("GET", victim.URL()+"/healthz", "")
		if err != nil {
			return err
		}
		if !strings.Contains(string(r.Body), `"Removed":true`) {
			return fmt.Errorf("healthz %d %s", r.Status, r.Body)
		}
		return nil
	})
	// Give a rejoin every chance to happen, then check it did not.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r := testcluster.Must(t, 200, "GET", L+"/cluster", "")
		if strings.Contains(string(r.Body), `"Tag":"`+victim.Tag+`"`) {
			t.Fatalf("the node removed while frozen is back: %s", r.Body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if r, _ := testcluster.Do("PUT", victim.URL()+"/databases/db/docs?id=x", `{}`); r.Status != 503 || !strings.Contains(string(r.Body), "NodeRemoved") {
		t.Fatalf("a write through the removed node: %d %s", r.Status, r.Body)
	}
}

// TestResumedNodeServesNoReadFromBeforeItsPause: reads that reach a
// shard's first member while it is frozen run the moment it resumes,
// before its freshness loop finds out it stood still. They must not answer
// from what the replica held before the pause: the other member took
// writes meanwhile, and a client that read the old version would base an
// If-Match on it. Each read queued there must see the write acknowledged
// before it was sent, or be refused; never the old version.
func TestResumedNodeServesNoReadFromBeforeItsPause(t *testing.T) {
	if testing.Short() {
		t.Skip("process cluster")
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes})
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/cnt", `{"Shards":3,"ReplicationFactor":2}`)
	// The frozen node is not the raft leader: this is about its replica,
	// not about an election (freezing a leader right after the cluster
	// formed once left a follower a candidate for 30 s).
	leader := c.Members[c.Leader()].Tag
	var shard int
	var members []string
	for s, m := range shardMembers(t, c.URL(0), "cnt") {
		if m[0] != leader {
			shard, members = s, m
			break
		}
	}
	if members == nil {
		t.Fatalf("every shard's first member is the leader %s", leader)
	}
	first, second := memberByTag(c, members[0]), memberByTag(c, members[1])
	var other *testcluster.Member
	for _, m := range c.Members {
		if m != first && m != second {
			other = m
		}
	}
	id := ""
	for i := 0; id == ""; i++ {
		cand := fmt.Sprintf("c/%d", i)
		where := testcluster.Must(t, 200, "GET", c.URL(0)+"/databases/cnt/sharding/bucket?id="+cand, "").JSON(t)
		if int(where["Shard"].(float64)) == shard {
			id = cand
		}
	}
	testcluster.WaitFor(t, 30*time.Second, "the counter to be created", func() error {
		_, err := testcluster.Expect(201, "PUT", other.URL()+"/databases/cnt/docs?id="+id, `{"n":0}`)
		return err
	})
	first.Pause()
	defer first.Resume2()
	testcluster.WaitFor(t, 30*time.Second, "a write through the other member", func() error {
		_, err := testcluster.Expect(201, "PUT", other.URL()+"/databases/cnt/docs?id="+id, `{"n":1}`)
		return err
	})
	if _, err := testcluster.Expect(200, "GET", fmt.Sprintf("%s/databases/cnt$%d/docs?id=%s", second.URL(), shard, id), ""); err != nil {
		t.Fatalf("the second member does not hold the write it took: %v", err)
	}
	// Reads sent to the frozen node wait in its socket queue; those that
	// got there before it resumes run first thing.
	const reads = 8
	type answer struct {
		status int
		n      float64
		err    error
	}
	answers := make(chan answer, reads)
	client := &http.Client{Timeout: 30 * time.Second}
	var written sync.WaitGroup // each request is in the frozen node's socket
	written.Add(reads)
	for range reads {
		go func() {
			var once sync.Once
			wrote := func() { once.Do(written.Done) }
			defer wrote() // a request that failed before its write
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				WroteRequest: func(httptrace.WroteRequestInfo) { wrote() },
			})
			req, _ := http.NewRequestWithContext(ctx, "GET", first.URL()+"/databases/cnt/docs?id="+id, nil)
			res, err := client.Do(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer res.Body.Close()
			var got struct{ Results []struct{ N float64 } }
			err = json.NewDecoder(res.Body).Decode(&got)
			a := answer{status: res.StatusCode, err: err}
			if len(got.Results) == 1 {
				a.n = got.Results[0].N
			}
			answers <- a
		}()
	}
	written.Wait()
	first.Resume()
	for range reads {
		a := <-answers
		switch {
		case a.err != nil:
			t.Logf("read through the resumed node: %v", a.err)
		case a.status == 200 && a.n != 1:
			t.Errorf("a read sent after n=1 was acknowledged answered n=%v from the resumed node", a.n)
		case a.status != 200 && a.status != 503:
			t.Errorf("read through the resumed node: status %d", a.status)
		}
	}
}
