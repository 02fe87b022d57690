package systemtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestCleanStopHandsOverAcknowledgedWrites: writers increment counters
// with If-Match (read, then write the next value on the version read) in
// a shard of two members while replication lags (every batch waits
// 300 ms), and the member taking the shard's writes stops cleanly, as in
// a rolling restart. The other member must then hold every write the
// stopped one acknowledged: each counter equals the number of increments
// acknowledged, and no acknowledged write became a conflict loser. A node
// that stopped without draining left its last acknowledged writes on its
// own disk, and the next member accepted increments on the older
// versions (explorer round, session 8: 460 for 462 acknowledged).
//
// The writers start right after the database's create answers, through
// a node that has just started: such a node put the members it had not
// heard from yet last, so it sent the first increments to the shard's
// second member while the others went to the first, and increments taken
// by both became conflicts (a third of the runs; see membersByPreference).
func TestCleanStopHandsOverAcknowledgedWrites(t *testing.T) {
	if testing.Short() {
		// Under the race detector (CI runs it with -short) heartbeats
		// starve, nodes count each other down mid-request, and writes fail
		// over as they would on a cut network: not what this test is about.
		t.Skip("timing: members must hear each other's heartbeats")
	}
	first, second, other := counterShard(t, testcluster.Options{Nodes: 3, Failpoints: "replication/before-send=300ms"}, counters)
	load := startIncrements(t, other.URL(), "cnt", counters, 8)
	load.waitAcked(t, 100)
	first.Stop()                       // clean: SIGTERM for a process, Close in process
	load.waitAcked(t, load.total()+50) // the shard goes on on its second member
	load.stop()
	if err := load.check(t, second.URL(), "cnt$0"); err != nil {
		t.Errorf("on %s after %s stopped: %v", second.Tag, first.Tag, err)
	}
	conflicts := testcluster.Must(t, 200, "GET", second.URL()+"/databases/cnt$0/conflicts", "").JSON(t)
	if r, _ := conflicts["Results"].([]any); len(r) > 0 {
		t.Errorf("conflicts after a clean stop: %v", r)
	}
}

// TestStoppingLeaderHandsLeadershipOver: a raft leader that stops cleanly
// makes another voter the leader first, so the cluster is not left
// without one for an election timeout (writes everywhere pause while no
// node can confirm it follows the cluster). Right after the stop returns,
// one of the others already leads; without the hand-over none would for
// at least the heartbeat timeout (1 s).
func TestStoppingLeaderHandsLeadershipOver(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	leader := c.Members[c.Leader()]
	leader.Stop()
	var leads []string
	for _, m := range c.Members {
		if m == leader {
			continue
		}
		h, err := testcluster.Do("GET", m.URL()+"/healthz", "")
		if err != nil {
			t.Fatal(err)
		}
		if raftState, _ := h.JSON(t)["Raft"].(string); raftState == "Leader" {
			leads = append(leads, m.Tag)
		}
	}
	if len(leads) != 1 {
		t.Fatalf("right after leader %s stopped, leaders among the others: %v; want exactly one", leader.Tag, leads)
	}
}

// TestRestartedFirstMemberTakesIncrementsWithoutConflicts: If-Match
// increments go on through a shard's second member while its first is
// stopped, and through the first again once it restarted and caught up.
// The first must not serve before it holds every increment the second
// acknowledged: every counter equals its acknowledged increments on both
// members, and no conflict is recorded.
//
// A replica that caught up once, to where the other member was when it
// asked, served while that member went on taking the increments routed
// to it meanwhile. Then, with the catch-up asking once: a write the first
// refused while catching up, retried on the second, committed there after
// the first looked, and the first took an increment based on the older
// version (7 of 30 runs had a conflict). The second member now hands the
// shard's writes over before the first serves (node/handover.go): it stops
// taking routed writes, lets the ones committing finish, and names its
// last change, which the first waits to hold.
func TestRestartedFirstMemberTakesIncrementsWithoutConflicts(t *testing.T) {
	if testing.Short() {
		// As for TestCleanStopHandsOverAcknowledgedWrites: under the race
		// detector heartbeats starve, and writes fail over as on a cut
		// network, where two members may each take one.
		t.Skip("timing: members must hear each other's heartbeats")
	}
	first, second, other := counterShard(t, testcluster.Options{Nodes: 3}, counters)
	load := startIncrements(t, other.URL(), "cnt", counters, 8)
	load.waitAcked(t, 50)
	first.Stop()
	load.waitAcked(t, load.total()+300) // a backlog on the second member
	first.Start()
	load.waitAcked(t, load.total()+300) // and the first serves again
	load.stop()
	testcluster.WaitFor(t, 30*time.Second, "both members to hold every increment", func() error {
		for _, m := range []*testcluster.Member{first, second} {
			if err := load.check(t, m.URL(), "cnt$0"); err != nil {
				return fmt.Errorf("on %s: %w", m.Tag, err)
			}
		}
		return nil
	})
	for _, m := range []*testcluster.Member{first, second} {
		conflicts := testcluster.Must(t, 200, "GET", m.URL()+"/databases/cnt$0/conflicts", "").JSON(t)
		if r, _ := conflicts["Results"].([]any); len(r) > 0 {
			t.Errorf("conflicts on %s after the restart: %v", m.Tag, r)
		}
	}
}

// increments is a load of If-Match increments on counters c/0..c/n-1
// through one node.
type increments struct {
	acked, unknown []atomic.Int64
	stopped        atomic.Bool
	wg             sync.WaitGroup
}

func startIncrements(t *testing.T, url, db string, counters, workers int) *increments {
	l := &increments{acked: make([]atomic.Int64, counters), unknown: make([]atomic.Int64, counters)}
	client := &http.Client{Timeout: 30 * time.Second}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			k := w % counters
			id := fmt.Sprintf("c/%d", k)
			for !l.stopped.Load() {
				res, err := client.Get(url + "/databases/" + db + "/docs?id=" + id)
				if err != nil {
					continue
				}
				var got struct {
					Results []struct {
						N        int64 `json:"n"`
						Metadata struct {
							CV string `json:"@change-vector"`
						} `json:"@metadata"`
					}
				}
				err = json.NewDecoder(res.Body).Decode(&got)
				res.Body.Close()
				if err != nil || res.StatusCode != 200 || len(got.Results) != 1 {
					continue
				}
				req, _ := http.NewRequest("PUT", url+"/databases/"+db+"/docs?id="+id, strings.NewReader(fmt.Sprintf(`{"n":%d}`, got.Results[0].N+1)))
				req.Header.Set("If-Match", `"`+got.Results[0].Metadata.CV+`"`)
				res, err = client.Do(req)
				if err != nil {
					l.unknown[k].Add(1)
					continue
				}
				res.Body.Close()
				switch {
				case res.StatusCode == 201:
					l.acked[k].Add(1)
				case res.StatusCode >= 500 && res.StatusCode != 503:
					l.unknown[k].Add(1)
				}
			}
		}()
	}
	return l
}

func (l *increments) total() int64 {
	var sum int64
	for i := range l.acked {
		sum += l.acked[i].Load()
	}
	return sum
}

func (l *increments) waitAcked(t *testing.T, n int64) {
	t.Helper()
	testcluster.WaitFor(t, 60*time.Second, "increments to be acknowledged", func() error {
		if got := l.total(); got < n {
			return fmt.Errorf("%d of %d", got, n)
		}
		return nil
	})
}

func (l *increments) stop() {
	l.stopped.Store(true)
	l.wg.Wait()
}

// check compares each counter on the replica that url and db (a "{db}${n}")
// name with what was acknowledged.
func (l *increments) check(t *testing.T, url, db string) error {
	for i := range l.acked {
		id := fmt.Sprintf("c/%d", i)
		r, err := testcluster.Expect(200, "GET", fmt.Sprintf("%s/databases/%s/docs?id=%s", url, db, id), "")
		if err != nil {
			return err
		}
		n := int64(r.JSON(t)["Results"].([]any)[0].(map[string]any)["n"].(float64))
		if want, maybe := l.acked[i].Load(), l.unknown[i].Load(); n < want || n > want+maybe {
			return fmt.Errorf("%s = %d; %d increments were acknowledged, %d more had no certain answer", id, n, want, maybe)
		}
	}
	return nil
}

// counters is how many counters the increment tests share out.
const counters = 4

// counterShard starts a 3-node cluster with database cnt of one shard on
// two members, first and second, and creates n counters at 0 through the
// third node, other, which routes the tests' requests and stays up.
func counterShard(t *testing.T, opts testcluster.Options, n int) (first, second, other *testcluster.Member) {
	t.Helper()
	c := testcluster.Start(t, opts)
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/cnt", `{"Shards":1,"ReplicationFactor":2}`)
	members := shardMembers(t, c.URL(0), "cnt")[0]
	first, second = memberByTag(c, members[0]), memberByTag(c, members[1])
	for _, m := range c.Members {
		if m != first && m != second {
			other = m
		}
	}
	createCounters(t, other.URL(), "cnt", n)
	return first, second, other
}

// createCounters writes c/0..c/n-1 at 0 through url. A write answered
// with an uncertain outcome (a 504 when the router's node, slowed by the
// race detector, counted a member down mid-request) is sent again: the
// same value either way.
func createCounters(t *testing.T, url, db string, n int) {
	t.Helper()
	for i := range n {
		testcluster.WaitFor(t, 30*time.Second, fmt.Sprintf("counter c/%d to be created", i), func() error {
			_, err := testcluster.Expect(201, "PUT", fmt.Sprintf("%s/databases/%s/docs?id=c/%d", url, db, i), `{"n":0}`)
			return err
		})
	}
}
