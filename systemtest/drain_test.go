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
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Failpoints: "replication/before-send=300ms"})
	testcluster.Must(t, 201, "PUT", c.URL(0)+"/admin/databases/cnt", `{"Shards":1,"ReplicationFactor":2}`)
	members := shardMembers(t, c.URL(0), "cnt")[0]
	first, second := memberByTag(c, members[0]), memberByTag(c, members[1])
	var other *testcluster.Member // routes the writers' requests; stays up
	for _, m := range c.Members {
		if m != first && m != second {
			other = m
		}
	}
	const counters = 4
	for i := range counters {
		testcluster.Must(t, 201, "PUT", fmt.Sprintf("%s/databases/cnt/docs?id=c/%d", other.URL(), i), `{"n":0}`)
	}

	client := &http.Client{Timeout: 30 * time.Second}
	var acked, unknown [counters]atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("c/%d", w%counters)
			for !stop.Load() {
				res, err := client.Get(other.URL() + "/databases/cnt/docs?id=" + id)
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
				req, _ := http.NewRequest("PUT", other.URL()+"/databases/cnt/docs?id="+id, strings.NewReader(fmt.Sprintf(`{"n":%d}`, got.Results[0].N+1)))
				req.Header.Set("If-Match", `"`+got.Results[0].Metadata.CV+`"`)
				res, err = client.Do(req)
				if err != nil {
					unknown[w%counters].Add(1)
					continue
				}
				res.Body.Close()
				switch {
				case res.StatusCode == 201:
					acked[w%counters].Add(1)
				case res.StatusCode >= 500 && res.StatusCode != 503:
					unknown[w%counters].Add(1) // a 504: it may have applied
				}
			}
		}()
	}
	waitAcked := func(n int64) {
		testcluster.WaitFor(t, 30*time.Second, "increments to be acknowledged", func() error {
			var sum int64
			for i := range counters {
				sum += acked[i].Load()
			}
			if sum < n {
				return fmt.Errorf("%d of %d", sum, n)
			}
			return nil
		})
	}
	waitAcked(100)
	first.Stop() // clean: SIGTERM for a process, Close in process
	before := acked[0].Load() + acked[1].Load() + acked[2].Load() + acked[3].Load()
	waitAcked(before + 50) // the shard goes on on its second member
	stop.Store(true)
	wg.Wait()

	for i := range counters {
		id := fmt.Sprintf("c/%d", i)
		d := testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/cnt$0/docs?id=%s", second.URL(), id), "").JSON(t)
		n := int64(d["Results"].([]any)[0].(map[string]any)["n"].(float64))
		if want, maybe := acked[i].Load(), unknown[i].Load(); n < want || n > want+maybe {
			t.Errorf("%s = %d on %s after %s stopped; %d increments were acknowledged, %d more had no certain answer", id, n, second.Tag, first.Tag, want, maybe)
		}
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
