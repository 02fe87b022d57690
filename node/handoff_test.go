package node

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/replication"
)

// TestRefusingReplicaWaitsForItsPeersToHoldItsWrites: a replica that took
// a client write and then refuses the shard's next write (found behind,
// as when its node lost its confirmation during a raft election) must not
// let its router send that write to the other member before the member
// holds the first: the member would take it on the version before it, and
// both writes would be acknowledged (an explorer: If-Match increments
// acknowledged twice after raft leader kills, with waitForReplicas=2).
//
// The other member, Z, is played by the test on the bus: it acknowledges
// replication batches only once the test lets it, and records the client
// writes routed to it.
func TestRefusingReplicaWaitsForItsPeersToHoldItsWrites(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Z in raft's configuration too (a non-voter nobody reaches), or the
	// leader would finish "removing" it.
	if err := n.raft.r.AddNonvoter("Z", "127.0.0.1:1", 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.proposeIndex(ctx, &raftfsm.AddNode{Node: raftfsm.NodeInfo{Tag: "Z", HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:1"}}); err != nil {
		t.Fatal(err)
	}
	alive, stopAlive := context.WithCancel(ctx)
	var beats sync.WaitGroup
	beats.Add(1)
	go func() { // Z's heartbeats, until the test counts it down
		defer beats.Done()
		for {
			n.health.heard("Z", "z1")
			select {
			case <-alive.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { stopAlive(); beats.Wait() }()

	var mu sync.Mutex
	var held uint64         // the etag Z acknowledges
	release := false        // whether Z acknowledges the batches it gets
	var pending []*nats.Msg // the batches it holds back meanwhile
	var writes []string
	answer := func(m *nats.Msg, status int, body any) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Status", strconv.Itoa(status))
		if status != http.StatusOK {
			r.Header.Set("Error-Type", "TestRefusal")
		}
		r.Data, _ = json.Marshal(body)
		_ = m.RespondMsg(r)
	}
	sub, err := n.bus.nc.Subscribe(n.rpcSubject("Z"), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		switch op := m.Header.Get("Op"); op {
		case "repl.progress":
			answer(m, http.StatusOK, replication.ProgressReply{Etag: held, DatabaseID: "z-db", BatchFormat: replication.FormatBinaryV2})
		case "repl.batch":
			if !release {
				pending = append(pending, m)
				return
			}
			b, err := replication.DecodeBatch(m.Data)
			if err != nil {
				t.Errorf("batch to Z: %v", err)
				return
			}
			held = b.LastEtag
			answer(m, http.StatusOK, replication.ProgressReply{Etag: held})
		case opShardWriteOnce, opShardWriteBin, "shard.write":
			writes = append(writes, op)
			answer(m, http.StatusBadRequest, "Z takes no writes in this test")
		default: // the catch-up's questions: Z does not answer them
			answer(m, http.StatusServiceUnavailable, "no")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	zWrites := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), writes...)
	}

	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1, "ReplicationFactor": 2}`)
	if m := n.recordOf("db").Sharding.Shards[0].Members; len(m) != 2 || m[0] != n.cfg.Node.Tag {
		t.Fatalf("members %v: the test needs this node first", m)
	}
	k := replicaKey{"db", 0}
	waitFor(t, 10*time.Second, "the replica to serve", func() bool { return !n.catchUps.isBehind("db", 0) })
	c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":1}`) // Z does not hold it

	// Found behind: the write goes to Z only once Z holds the first.
	n.catchUps.set(k, true)
	r := c.do("PUT", "/databases/db/docs?id=a", `{"v":2}`)
	if r.Status != http.StatusServiceUnavailable || r.json(t)["Type"] != "ShardPeersBehind" {
		t.Fatalf("a write refused while Z lacks the first: %d %s, want 503 ShardPeersBehind", r.Status, r.Body)
	}
	if w := zWrites(); len(w) > 0 {
		t.Fatalf("the router sent a write to Z before Z held the first one: %v", w)
	}
	mu.Lock()
	release = true
	for _, m := range pending {
		if b, err := replication.DecodeBatch(m.Data); err == nil {
			held = b.LastEtag
			answer(m, http.StatusOK, replication.ProgressReply{Etag: held})
		}
	}
	pending = nil
	mu.Unlock()
	waitFor(t, 10*time.Second, "Z to hold the first write", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return held > 0
	})
	c.do("PUT", "/databases/db/docs?id=a", `{"v":3}`)
	if w := zWrites(); len(w) == 0 {
		t.Fatalf("with Z holding every write the replica took, its refusal did not pass the write on to Z")
	}

	// A member known down is not waited for: it catches up before it serves.
	mu.Lock()
	release, writes = false, nil
	mu.Unlock()
	n.catchUps.set(k, false)
	c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":4}`)
	n.catchUps.set(k, true)
	stopAlive()
	beats.Wait()
	n.health.markDown("Z")
	if r := c.do("PUT", "/databases/db/docs?id=a", `{"v":5}`); r.json(t)["Type"] == "ShardPeersBehind" {
		t.Fatalf("refused for a member known down: %d %s", r.Status, r.Body)
	}
	if m := n.recordOf("db").Sharding.Shards[0].Members; len(m) != 2 {
		t.Fatalf("members %v at the end: Z must have stayed one throughout", m)
	}
}
