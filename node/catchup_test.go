package node

import (
	"context"
	"errors"
	"testing"

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
