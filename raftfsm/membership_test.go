package raftfsm

import (
	"errors"
	"slices"
	"testing"
)

func fourNodes(t *testing.T) *FSM {
	f := threeNodes(t)
	mustApply(t, f, 4, &AddNode{Meta: Meta{At: t0}, Node: NodeInfo{Tag: "D", HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:2"}})
	return f
}

// TestRemoveNodeReplacesItsReplicas: every shard the removed node held gets
// another member, the least loaded one, and never one it already has.
func TestRemoveNodeReplacesItsReplicas(t *testing.T) {
	f := fourNodes(t)
	mustApply(t, f, 5, &CreateDatabase{Meta: Meta{At: t0}, Name: "db", Shards: 4, ReplicationFactor: 2})
	before, _ := f.Record("db")
	mustApply(t, f, 6, &RemoveNode{Meta: Meta{At: t0}, Tag: "B"})
	rec, _ := f.Record("db")
	load := map[string]int{}
	for n, sh := range rec.Sharding.Shards {
		if len(sh.Members) != 2 || slices.Contains(sh.Members, "B") || sh.Members[0] == sh.Members[1] {
			t.Fatalf("shard %d members %v (before %v)", n, sh.Members, before.Sharding.Shards[n].Members)
		}
		for _, m := range sh.Members {
			load[m]++
		}
	}
	if max(load["A"], load["C"], load["D"])-min(load["A"], load["C"], load["D"]) > 1 {
		t.Fatalf("replicas spread unevenly: %v", load)
	}
	if rec.Etag != 6 {
		t.Fatalf("record etag %d, want 6", rec.Etag)
	}
	if _, ok := f.state.Nodes["B"]; ok {
		t.Fatal("node still in the cluster")
	}
}

// TestRemoveNodeRefusesTheOnlyReplica: removing the sole holder of a
// shard's data changes nothing.
func TestRemoveNodeRefusesTheOnlyReplica(t *testing.T) {
	f := fourNodes(t)
	mustApply(t, f, 5, &CreateDatabase{Meta: Meta{At: t0}, Name: "db", Shards: 2, ReplicationFactor: 1})
	rec, _ := f.Record("db")
	owner := rec.Sharding.Shards[0].Members[0]
	if r := f.ApplyCommand(6, &RemoveNode{Meta: Meta{At: t0}, Tag: owner}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("removing the only replica's node: %v", r.Err)
	}
	if recAfter, _ := f.Record("db"); recAfter != rec {
		t.Fatal("a refused removal replaced the record")
	}
	if _, ok := f.state.Nodes[owner]; !ok {
		t.Fatal("a refused removal removed the node")
	}
}

// TestRemoveNodeUnblocksMigrations: a migration waiting for the removed
// node's confirmation (destination) or cleanup (source) goes on without
// it, or with its replacement.
func TestRemoveNodeUnblocksMigrations(t *testing.T) {
	f := migrationFixture(t) // shards 0: A,B  1: B,C  2: C,A
	const b = 10
	mustApply(t, f, 5, &StartBucketMigration{Database: "db", Bucket: b, SourceShard: 0, DestinationShard: 2})
	mustApply(t, f, 6, &SourceMigrationSendCompleted{Database: "db", Bucket: b, MigrationIndex: 5, LastSourceChangeVector: "A:3-x"})
	mustApply(t, f, 7, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 5, Node: "A"})
	// C never confirms: it is removed. With three nodes, shard 2 gets B.
	mustApply(t, f, 8, &RemoveNode{Meta: Meta{At: t0}, Tag: "C"})
	rec, _ := f.Record("db")
	if got := rec.Sharding.Shards[2].Members; !slices.Equal(got, []string{"A", "B"}) {
		t.Fatalf("shard 2 members %v, want [A B]", got)
	}
	if m := rec.Sharding.BucketMigrations[b]; m.Status != MigrationMoved || rec.ShardOf(b) != 0 {
		t.Fatalf("flipped before the replacement confirmed: %+v", m)
	}
	mustApply(t, f, 9, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 5, Node: "B"})
	rec, _ = f.Record("db")
	if rec.ShardOf(b) != 2 {
		t.Fatal("no flip after the replacement confirmed")
	}
	// Source cleanup: A cleans up; B (a source member) is removed next,
	// which is allowed only while shard 1 keeps a replica elsewhere.
	mustApply(t, f, 10, &SourceMigrationCleanup{Database: "db", Bucket: b, MigrationIndex: 5, Node: "A"})
	mustApply(t, f, 11, &AddNode{Meta: Meta{At: t0}, Node: NodeInfo{Tag: "E", HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:2"}})
	mustApply(t, f, 12, &RemoveNode{Meta: Meta{At: t0}, Tag: "B"})
	rec, _ = f.Record("db")
	if got := rec.Sharding.Shards[0].Members; !slices.Equal(got, []string{"A", "E"}) {
		t.Fatalf("shard 0 members %v, want [A E]", got)
	}
	if _, ok := rec.Sharding.BucketMigrations[b]; !ok {
		t.Fatal("migration left before the replacement source member cleaned up")
	}
	mustApply(t, f, 13, &SourceMigrationCleanup{Database: "db", Bucket: b, MigrationIndex: 5, Node: "E"})
	rec, _ = f.Record("db")
	if _, ok := rec.Sharding.BucketMigrations[b]; ok {
		t.Fatal("migration still in the record after every source member cleaned up")
	}
}

// TestRemoveNodeWithoutReplacementSettles: when no node can take the
// replica, the shard shrinks and a migration waiting only for the removed
// member completes its step.
func TestRemoveNodeWithoutReplacementSettles(t *testing.T) {
	f := migrationFixture(t)
	const b = 10
	mustApply(t, f, 5, &StartBucketMigration{Database: "db", Bucket: b, SourceShard: 0, DestinationShard: 2})
	mustApply(t, f, 6, &SourceMigrationSendCompleted{Database: "db", Bucket: b, MigrationIndex: 5, LastSourceChangeVector: "A:3-x"})
	mustApply(t, f, 7, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 5, Node: "A"})
	// Candidates exclude B (the proposer saw it down): no replacement.
	mustApply(t, f, 8, &RemoveNode{Meta: Meta{At: t0}, Tag: "C", Candidates: []string{"A"}})
	rec, _ := f.Record("db")
	if got := rec.Sharding.Shards[2].Members; !slices.Equal(got, []string{"A"}) {
		t.Fatalf("shard 2 members %v, want [A]", got)
	}
	if m := rec.Sharding.BucketMigrations[b]; m.Status != MigrationOwnershipTransferred || rec.ShardOf(b) != 2 || m.ConfirmationIndex != 8 {
		t.Fatalf("migration %+v, owner %d", m, rec.ShardOf(b))
	}
}

// TestNodesIndexFollowsTheNodeList: NodesIndex is the index of the latest
// command that changed the node list (a node added, given new addresses,
// or removed), not of one that re-registers a node as it was or touches
// only databases; it survives a snapshot.
func TestNodesIndexFollowsTheNodeList(t *testing.T) {
	f := threeNodes(t)
	at := func(want uint64, what string) {
		t.Helper()
		if _, got := f.NodesAndIndex(); got != want {
			t.Fatalf("%s: NodesIndex %d, want %d", what, got, want)
		}
	}
	at(3, "three nodes added")
	mustApply(t, f, 4, &AddNode{Meta: Meta{At: t0}, Node: NodeInfo{Tag: "C", HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:2"}})
	at(3, "a node re-registered as it was")
	mustApply(t, f, 5, &AddNode{Meta: Meta{At: t0}, Node: NodeInfo{Tag: "C", HttpUrl: "http://127.0.0.1:9", RaftAddr: "127.0.0.1:2"}})
	at(5, "a node re-registered with a new HTTP URL")
	mustApply(t, f, 6, &CreateDatabase{Meta: Meta{At: t0}, Name: "db", Shards: 2, ReplicationFactor: 2})
	at(5, "a database created")
	if r := f.ApplyCommand(7, &RemoveNode{Meta: Meta{At: t0}, Tag: "Q"}); !errors.Is(r.Err, ErrNodeNotFound) {
		t.Fatalf("removing an unknown node: %v", r.Err)
	}
	at(5, "a refused removal")
	mustApply(t, f, 8, &RemoveNode{Meta: Meta{At: t0}, Tag: "B"})
	at(8, "a node removed")
	if _, got := snapshotRoundTrip(t, f).NodesAndIndex(); got != 8 {
		t.Fatalf("NodesIndex %d after a snapshot, want 8", got)
	}
}

// TestAddNodeKeepsTheFirstDataDirectoryID: the first id registered for a
// tag holds. A registration with another id is refused and changes
// nothing; one without an id (a node from before ids) keeps the recorded
// one; after a removal the tag is free for any id. The id survives a
// snapshot.
func TestAddNodeKeepsTheFirstDataDirectoryID(t *testing.T) {
	f := threeNodes(t)
	id1, id2 := "11111111111111111111111111111111", "22222222222222222222222222222222"
	node := func(id, raft string) *AddNode {
		return &AddNode{Meta: Meta{At: t0}, Node: NodeInfo{Tag: "D", HttpUrl: "http://127.0.0.1:1", RaftAddr: raft, ID: id}}
	}
	recorded := func(f *FSM) NodeInfo {
		for _, m := range f.Nodes() {
			if m.Tag == "D" {
				return m
			}
		}
		return NodeInfo{}
	}
	mustApply(t, f, 4, node("", "127.0.0.1:2"))
	mustApply(t, f, 5, node(id1, "127.0.0.1:2")) // the member from before ids registers its id
	if r := f.ApplyCommand(6, node(id2, "127.0.0.1:3")); !errors.Is(r.Err, ErrNodeIDConflict) {
		t.Fatalf("another data directory under D: %v, want ErrNodeIDConflict", r.Err)
	}
	if got := recorded(f); got.ID != id1 || got.RaftAddr != "127.0.0.1:2" {
		t.Fatalf("after the refused registration D is %+v", got)
	}
	mustApply(t, f, 7, node("", "127.0.0.1:4"))
	if got := recorded(f); got.ID != id1 || got.RaftAddr != "127.0.0.1:4" {
		t.Fatalf("after a registration without an id D is %+v", got)
	}
	if got := recorded(snapshotRoundTrip(t, f)); got.ID != id1 {
		t.Fatalf("after a snapshot D is %+v", got)
	}
	mustApply(t, f, 8, &RemoveNode{Meta: Meta{At: t0}, Tag: "D"})
	mustApply(t, f, 9, node(id2, "127.0.0.1:3"))
	if got := recorded(f); got.ID != id2 {
		t.Fatalf("after D's removal and a new join D is %+v", got)
	}
}
