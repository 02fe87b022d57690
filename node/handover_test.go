package node

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shardnode/shardnode/storage"
)

// TestHandOverRefusesRoutedWritesForTheWindow: a replica asked to hand
// its shard's writes over to a member that caught up refuses routed
// writes from then on with the retryable 503 ShardHandingOver, answers
// only once the write that was committing has committed, with an etag
// that covers it, and takes routed writes again once the window ended or
// the member it handed over to is known down. A member known down because
// it announced a clean stop, which asks from its next run before this node
// heard that run's heartbeat, is up from its request on. Reads, and writes
// to the replica itself ("{db}${n}"), are not held back.
func TestHandOverRefusesRoutedWritesForTheWindow(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":1}`)
	ctx := context.Background()
	k := replicaKey{"db", 0}

	replica := func(routed bool) *localReplica {
		t.Helper()
		l, err := n.local("db", 0)
		if err != nil {
			t.Fatal(err)
		}
		l.routed = routed
		return l
	}
	put := func(l *localReplica, id string) error {
		_, err := l.write(ctx, []storage.Op{{Kind: storage.OpPut, ID: id, Body: []byte(`{"v":2}`)}}, writeConcern{}, 0)
		return err
	}
	refused := func(what string, err error) {
		t.Helper()
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != 503 || ae.Type != "ShardHandingOver" || !retryable(err) || !servesSoon(err) {
			t.Fatalf("%s: got %v, want a retryable 503 ShardHandingOver", what, err)
		}
	}

	// A write that passed the checks and is committing: inside the fence.
	fence := n.replicas.fence("db", 0)
	inFlight := fence.enter()
	type answer struct {
		r   handOverReply
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		r, err := n.handOver(ctx, replica(false), "R")
		answered <- answer{r, err}
	}()
	waitFor(t, 10*time.Second, "the hand-over to be marked", func() bool { _, ok := n.handOvers.active(k, func(string) bool { return true }); return ok })

	refused("routed write during the hand-over", put(replica(true), "b"))
	select {
	case a := <-answered:
		t.Fatalf("the hand-over answered %+v, %v while a write was committing", a.r, a.err)
	default:
	}
	res, err := replica(false).s.Write(ctx, []storage.Op{{Kind: storage.OpPut, ID: "inflight", Body: []byte(`{"v":3}`)}})
	if err != nil {
		t.Fatal(err)
	}
	fence.exit(inFlight)
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.r.LastEtag < res[0].Etag || a.r.DatabaseID != replica(false).s.DatabaseID() {
		t.Errorf("hand-over answered %+v; the write committing got etag %d on replica %s", a.r, res[0].Etag, replica(false).s.DatabaseID())
	}

	refused("routed write after the answer", put(replica(true), "b"))
	if docs, err := replica(true).get(ctx, []string{"a"}, 0); err != nil || docs[0] == nil {
		t.Errorf("routed read during the hand-over: %v %v", docs, err)
	}
	if err := put(replica(false), "direct"); err != nil {
		t.Errorf("write to db$0 during the hand-over: %v", err)
	}

	// The window ends (here: its deadline is now).
	n.handOvers.set(k, "R", time.Now())
	if err := put(replica(true), "b"); err != nil {
		t.Errorf("routed write after the window: %v", err)
	}

	// The member handed over to goes down: the window ends at once.
	if _, err := n.handOver(ctx, replica(false), "R"); err != nil {
		t.Fatal(err)
	}
	refused("routed write during the second hand-over", put(replica(true), "c"))
	n.health.heard("R", "1")
	n.health.markDown("R")
	if err := put(replica(true), "c"); err != nil {
		t.Errorf("routed write once the member handed over to is down: %v", err)
	}
	c.must(200, "GET", "/databases/db/docs?id=c", "")

	// The member announced a clean stop, restarted and asks, before this
	// node heard a heartbeat of its new run: the request counts as one,
	// and the window holds.
	n.health.heard("R", "1")
	n.health.markLeft("R", "1")
	if !n.health.knownDown("R") {
		t.Fatal("a member that announced a clean stop should be known down")
	}
	n.health.heardRequest("R", "2") // as handleRPC does with the request's Shardnode-From
	if _, err := n.handOver(ctx, replica(false), "R"); err != nil {
		t.Fatal(err)
	}
	refused("routed write during a hand-over to a member back from a clean stop", put(replica(true), "d"))
	if n.health.knownDown("R") || n.health.incarnation("R") != "2" {
		t.Errorf("after its hand-over request, R known down %v, incarnation %q; want up, 2", n.health.knownDown("R"), n.health.incarnation("R"))
	}
}

// TestHandOverFromAnEarlierVersionIsNotWaitedFor: a member of an earlier
// version answers shard.hand-over as an unknown op (as every version
// answers one), and a member that handed over answers its etag; the
// replica taking the writes over waits for the etag of the one and not
// for the other, instead of hanging until its catch-up times out.
func TestHandOverFromAnEarlierVersionIsNotWaitedFor(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	l, err := n.local("db", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Two peers on the bus: OLD predates the op, NEW hands over the etag
	// this replica holds already from it.
	var asked atomic.Int32
	serve := func(tag string, answer func(m *nats.Msg) *nats.Msg) {
		sub, err := n.bus.nc.Subscribe(n.rpcSubject(tag), func(m *nats.Msg) {
			if m.Header.Get("Op") == opHandOver {
				asked.Add(1)
			}
			_ = m.RespondMsg(answer(m))
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
	}
	serve("OLD", func(m *nats.Msg) *nats.Msg {
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Status", "400")
		r.Header.Set("Error-Type", "BadRequest")
		r.Data = []byte(unknownOpPrefix + `"` + m.Header.Get("Op") + `"`)
		return r
	})
	serve("NEW", func(m *nats.Msg) *nats.Msg {
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Status", "200")
		r.Data = []byte(`{"DatabaseId":"new-peer","LastEtag":7}`)
		return r
	})
	if _, err := l.s.Write(context.Background(), []storage.Op{{Kind: storage.OpSetProgress, Source: "new-peer", Etag: 7}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), catchUpTimeout)
	defer cancel()
	k := replicaKey{"db", 0}
	defer n.catchUps.set(k, false)
	if err := n.takeWritesOver(ctx, k, l.s, []string{"OLD", "NEW"}); err != nil {
		t.Fatalf("take the writes over from an earlier version's member: %v", err)
	}
	if got := asked.Load(); got != 2 {
		t.Errorf("%d hand-over requests answered; want one to each member", got)
	}

	// A member that names more than this replica holds is waited for.
	serve("AHEAD", func(m *nats.Msg) *nats.Msg {
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Status", "200")
		r.Data = []byte(`{"DatabaseId":"new-peer","LastEtag":8}`)
		return r
	})
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := n.takeWritesOver(short, k, l.s, []string{"OLD", "AHEAD"}); err == nil {
		t.Errorf("took the writes over from a member whose last etag this replica does not hold")
	}
	if !n.catchUps.isBehind("db", 0) {
		t.Errorf("the replica serves while a member's hand-over is not held")
	}
}
