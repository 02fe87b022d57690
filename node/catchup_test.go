package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// TestReplicaRefusesRoutedRequestsUntilItServes: a replica reached by a
// routed client request (a read, a write, a query) answers the retryable
// 503 ShardCatchingUp while its node is not ready or while it is marked
// behind its peers, so the router asks another member instead of taking
// old data or basing a write on it; reads addressed to the replica itself
// ("{db}${n}") still see it as it is.
func TestReplicaRefusesRoutedRequestsUntilItServes(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":1}`)
	ctx := context.Background()

	routed := func() *localReplica {
		l, err := n.local("db", 0)
		if err != nil {
			t.Fatal(err)
		}
		l.routed = true
		return l
	}
	refused := func(what string, err error) {
		t.Helper()
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != 503 || ae.Type != "ShardCatchingUp" || !retryable(err) {
			t.Errorf("%s: got %v, want a retryable 503 ShardCatchingUp", what, err)
		}
	}
	check := func(state string) {
		t.Helper()
		_, err := routed().get(ctx, []string{"a"}, 0)
		refused(state+": routed get", err)
		_, err = routed().write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "b", Body: []byte(`{"v":2}`)}}, writeConcern{}, 0)
		refused(state+": routed write", err)
		_, err = routed().query(ctx, queryArgs{Query: "from @all_docs"})
		refused(state+": routed query", err)
		direct, err := n.local("db", 0)
		if err != nil {
			t.Fatal(err)
		}
		if docs, err := direct.get(ctx, []string{"a"}, 0); err != nil || docs[0] == nil {
			t.Errorf("%s: direct get: %v %v", state, docs, err)
		}
	}

	n.ready.Store(false) // as while the node replays the log after a restart
	check("node not ready")
	n.ready.Store(true)

	n.catchUps.set(replicaKey{"db", 0}, true) // a peer reported changes it lacks
	check("replica behind")
	n.catchUps.set(replicaKey{"db", 0}, false)

	if docs, err := routed().get(ctx, []string{"a"}, 0); err != nil || docs[0] == nil {
		t.Fatalf("caught up: routed get: %v %v", docs, err)
	}
	// The refused writes stored nothing.
	c.must(404, "GET", "/databases/db/docs?id=b", "")
}

// TestRoutedReadsAfterTheDrainAndAfterAStaleRefusal: a node stopping
// cleanly answers routed reads until its drain ends and refuses them
// (retryable) from then on, since the other members take the writes; a
// replica that refused a routed write for want of a confirmation is
// behind at once, so routed reads go to another member too, while reads
// addressed to it still see it.
func TestRoutedReadsAfterTheDrainAndAfterAStaleRefusal(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":1}`)
	ctx := context.Background()
	l, err := n.local("db", 0)
	if err != nil {
		t.Fatal(err)
	}
	l.routed = true
	refusedAs := func(what, typ string, err error) {
		t.Helper()
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != 503 || ae.Type != typ || !retryable(err) {
			t.Errorf("%s: got %v, want a retryable 503 %s", what, err, typ)
		}
	}

	n.refusedWhileStale("db", 0)
	_, err = l.get(ctx, []string{"a"}, 0)
	refusedAs("routed get after a stale refusal", "ShardCatchingUp", err)
	if !n.staleRefusals.Load() {
		t.Errorf("the refusal is not noted for the freshness loop")
	}
	direct, err := n.local("db", 0)
	if err != nil {
		t.Fatal(err)
	}
	if docs, err := direct.get(ctx, []string{"a"}, 0); err != nil || docs[0] == nil {
		t.Errorf("direct get after a stale refusal: %v %v", docs, err)
	}
	n.catchUps.set(replicaKey{"db", 0}, false)

	n.draining.Store(true) // the drain runs: reads are still this member's
	if docs, err := l.get(ctx, []string{"a"}, 0); err != nil || docs[0] == nil {
		t.Errorf("routed get during the drain: %v %v", docs, err)
	}
	close(n.drained) // the drain ended: the other members take the writes
	_, err = l.get(ctx, []string{"a"}, 0)
	refusedAs("routed get after the drain", "NodeStopping", err)
	_, err = l.query(ctx, queryArgs{Query: "from @all_docs"})
	refusedAs("routed query after the drain", "NodeStopping", err)
	n.draining.Store(false)
	n.drained = make(chan struct{}) // Close drains again and closes it
}

// TestReplicaOpenedOnAServingNodeWaitsForItsPeers: a replica of a shard
// with another member, opened on a node that serves already (after a
// restart, a replica can open just after the node became ready), refuses
// routed writes until its catch-up has asked that member how far it got.
// It used to take them on what it held until the answer came: an
// explorer saw If-Match increments acknowledged twice after restarts.
func TestReplicaOpenedOnAServingNodeWaitsForItsPeers(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A second member, Z, that is up but does not answer yet.
	if _, err := n.proposeIndex(ctx, &raftfsm.AddNode{Node: raftfsm.NodeInfo{Tag: "Z", HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:1"}}); err != nil {
		t.Fatal(err)
	}
	// Z's heartbeats go on (as a live node's would) until the write was
	// checked: heard only before the create, Z counted down 1.5 s later,
	// and on a loaded machine the create took longer than that, so the
	// catch-up had stopped waiting for Z before the write below.
	n.health.heard("Z", "z1")
	beats := make(chan struct{})
	stopBeats := sync.OnceFunc(func() { close(beats) })
	defer stopBeats()
	go func() {
		t := time.NewTicker(heartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-beats:
				return
			case <-t.C:
				n.health.heard("Z", "z1")
			}
		}
	}()
	asked := make(chan struct{}, 16)
	sub, err := n.bus.nc.Subscribe(n.rpcSubject("Z"), func(m *nats.Msg) {
		// The catch-up's question; replication asks Z too, and earlier.
		if m.Header.Get("Op") == "shard.stats" {
			asked <- struct{}{}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	created := make(chan struct{})
	go func() {
		defer close(created)
		c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1, "ReplicationFactor": 2}`)
	}()
	defer func() { <-created }()
	select {
	case <-asked: // the catch-up asks Z
	case <-ctx.Done():
		t.Fatal("the new replica's catch-up never asked the other member")
	}
	l, err := n.local("db", 0)
	if err != nil {
		t.Fatal(err)
	}
	l.routed = true
	_, err = l.write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "a", Body: []byte(`{"v":1}`)}}, writeConcern{}, 0)
	var ae *apiError
	if !errors.As(err, &ae) || ae.Type != "ShardCatchingUp" {
		t.Fatalf("a routed write before the other member answered: %v, want ShardCatchingUp", err)
	}
	stopBeats() // Z goes down: the create stops waiting for it
}
