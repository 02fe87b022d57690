package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// TestWriteGuardNamesOwnerAndWaitsForNewerRecord checks the write guard's
// two sides: a refusal names the owning shard and the record that says
// so, and a write routed by a record newer than the replica's is not let
// in on the router's word.
func TestWriteGuardNamesOwnerAndWaitsForNewerRecord(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3, "ReplicationFactor": 1}`)
	rec := n.recordOf("shop")
	if rec == nil {
		t.Fatal("no record for shop")
	}
	id := "users/1"
	owner := rec.ShardOf(bucket.ForID(id))
	other := (owner + 1) % 3
	ops := []storage.Op{{Kind: storage.OpPut, ID: id}}

	if _, err := n.guardWrites("shop", owner, ops, 0, nil); err != nil {
		t.Fatalf("owner refused: %v", err)
	}
	for _, routed := range []uint64{0, rec.Etag} {
		_, err := n.guardWrites("shop", other, ops, routed, nil)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Type != "BucketNotOwned" || ae.Owner == nil {
			t.Fatalf("non-owner routed by etag %d: %v, want BucketNotOwned naming the owner", routed, err)
		}
		if ae.Owner.Shard != owner || ae.Owner.RecordEtag != rec.Etag {
			t.Fatalf("refusal names %+v, want shard %d at etag %d", *ae.Owner, owner, rec.Etag)
		}
	}
	// A router whose record is newer than this node's chose this shard by
	// a later committed state this node has not applied: the write waited
	// for it (localReplica.write) and the guard, which sees it did not
	// arrive, refuses it as catching up instead of trusting the router.
	_, err := n.guardWrites("shop", other, ops, rec.Etag+1, nil)
	var ae *apiError
	if !errors.As(err, &ae) || ae.Type != "ShardCatchingUp" || !servesSoon(err) {
		t.Fatalf("write routed by a record this node lacks: %v, want a ShardCatchingUp the router waits out", err)
	}
}

// TestRerouteIsCountedAndTimed: a write routed by a record older than the
// shard's (a flip it had not applied yet) is refused, goes on to the owner
// the refusal names, lands there, and is counted in the database's
// statistics with the delay; a write routed by the current record is not.
func TestRerouteIsCountedAndTimed(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/shop", `{"Shards": 3, "ReplicationFactor": 1}`)
	rec := n.recordOf("shop")
	id := "users/1"
	b := bucket.ForID(id)
	owner := rec.ShardOf(b)
	// What a router that has not applied the latest flip believes.
	stale := rec.Clone()
	stale.Etag = rec.Etag - 1
	stale.Sharding.BucketRanges = stale.Sharding.BucketRanges.Move(b, (owner+1)%3)

	ctx := context.Background()
	put := func(tgt target, v string) {
		t.Helper()
		ops := []storage.Op{{Kind: storage.OpPut, ID: id, Body: []byte(`{"v":"` + v + `"}`)}}
		if _, err := n.writeOps(ctx, tgt, ops, writeConcern{}); err != nil {
			t.Fatalf("write %s: %v", v, err)
		}
	}
	reroutes := func() RerouteStats {
		t.Helper()
		var st struct{ Reroutes RerouteStats }
		if err := json.Unmarshal(c.must(200, "GET", "/databases/shop/stats", "").Body, &st); err != nil {
			t.Fatal(err)
		}
		return st.Reroutes
	}
	put(target{rec: rec, shard: -1}, "current")
	if r := reroutes(); r.WritesRerouted != 0 || r.Node != "A" {
		t.Fatalf("a write routed by the current record counted: %+v", r)
	}
	put(target{rec: stale, shard: -1}, "stale")
	r := reroutes()
	if r.WritesRerouted != 1 || r.Window != 1 || r.DelayMaxMs <= 0 || r.DelayP99Ms != r.DelayMaxMs {
		t.Fatalf("after a rerouted write: %+v", r)
	}
	got := c.must(200, "GET", "/databases/shop$"+strconv.Itoa(owner)+"/docs?id="+id, "").json(t)
	if doc := got["Results"].([]any)[0].(map[string]any); doc["v"] != "stale" {
		t.Fatalf("the rerouted write is not on the owner, shard %d: %v", owner, doc)
	}
}

// TestAttemptAsksAnUnreachableMemberAgainWhileRoutesConnect: a node that
// just started finds members unreachable (no responders) until its bus
// routes connect; a request then asks the same member again instead of
// passing on to the next one, which would take the shard's writes while
// the other routers send them to the first. Once the node has run for
// peerReachWait, or the member is known down, it passes on at once.
func TestAttemptAsksAnUnreachableMemberAgainWhileRoutesConnect(t *testing.T) {
	cfg := config.Default()
	ctx := context.Background()
	unreachableTwice := func(calls *int) func(context.Context, shardReplica) error {
		return func(context.Context, shardReplica) error {
			if *calls++; *calls <= 2 {
				return fmt.Errorf("shard.write to node Z: %w", errUnreachable)
			}
			return nil
		}
	}

	young := &Node{cfg: &cfg, health: newHealth(cfg.Node.Tag), started: time.Now()}
	calls := 0
	if err := young.attempt(ctx, "db", 0, "Z", false, 0, unreachableTwice(&calls)); err != nil || calls != 3 {
		t.Fatalf("just started: %v after %d calls, want success on the third", err, calls)
	}

	settled := &Node{cfg: &cfg, health: newHealth(cfg.Node.Tag), started: time.Now().Add(-peerReachWait)}
	calls = 0
	if err := settled.attempt(ctx, "db", 0, "Z", false, 0, unreachableTwice(&calls)); !errors.Is(err, errUnreachable) || calls != 1 {
		t.Fatalf("routes settled: %v after %d calls, want unreachable after one", err, calls)
	}

	young.health.heard("Z", "z1")
	young.health.markDown("Z")
	calls = 0
	if err := young.attempt(ctx, "db", 0, "Z", false, 0, unreachableTwice(&calls)); !errors.Is(err, errUnreachable) || calls != 1 {
		t.Fatalf("member known down: %v after %d calls, want unreachable after one", err, calls)
	}
}

// TestArrivingWriteAsksTheSameMemberAgain: a member refusing a write
// because its bucket arrives (the source's last pass is not in) has the
// router wait and ask it again, not pass the write to the next member,
// which waits for the same pass: both would then hold the bucket's writes
// and commit them on the same version once it came in. A read refused so
// goes on to the next member, as reads do. So does a write refused with
// AskAgain (a span lease about to flip empty buckets), even through the
// bus, whereas one refused as leaving without it (a sender's lease: the
// sender takes it) goes on to the next member.
func TestArrivingWriteAsksTheSameMemberAgain(t *testing.T) {
	cfg := config.Default()
	n := &Node{cfg: &cfg, health: newHealth(cfg.Node.Tag), started: time.Now().Add(-peerReachWait), fresh: newFreshness()}
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", Sharding: raftfsm.Sharding{Shards: map[int]*raftfsm.ShardTopology{0: {Members: []string{"Y", "Z"}}}}}
	tgt := target{rec: rec, shard: -1}
	run := func(read bool, refusal func() error) []string {
		var asked []string
		err := n.onShard(context.Background(), tgt, 0, read, func(_ context.Context, r shardReplica) error {
			asked = append(asked, r.(*remoteReplica).tag)
			if len(asked) < 3 {
				return refusal()
			}
			return nil
		})
		if err != nil {
			t.Fatalf("read %v: %v after asking %v", read, err, asked)
		}
		return asked
	}
	arriving := func() error { return errBucketArriving("db", 0, 7) }
	if asked := run(false, arriving); !slices.Equal(asked, []string{"Y", "Y", "Y"}) {
		t.Errorf("a write refused as arriving asked %v, want Y again and again", asked)
	}
	if asked := run(true, arriving); !slices.Equal(asked, []string{"Y", "Z", "Y"}) {
		t.Errorf("a read refused as arriving asked %v, want Y, then Z, then Y", asked)
	}
	// The refusal as a remote member's answer carries it: through respond
	// and call's decoding of the headers.
	wire := func(err error) error {
		m := nats.NewMsg("")
		setReplyError(m, err)
		return replyError(m)
	}
	leased := func() error {
		return &apiError{Status: http.StatusServiceUnavailable, Type: "BucketLeaving", AskAgain: true, Msg: "leaving in one step"}
	}
	if asked := run(false, func() error { return wire(leased()) }); !slices.Equal(asked, []string{"Y", "Y", "Y"}) {
		t.Errorf("a write refused by a span lease asked %v, want Y again and again", asked)
	}
	sent := func() error { return wire(errBucketLeaving("db", 0, 7, "Z")) }
	if asked := run(false, sent); !slices.Equal(asked, []string{"Y", "Z", "Y"}) {
		t.Errorf("a write refused as leaving to its sender asked %v, want Y, then Z, then Y", asked)
	}
}
