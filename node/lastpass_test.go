package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/replication"
	"github.com/shardnode/shardnode/resharding"
	"github.com/shardnode/shardnode/storage"
)

// TestLastPassSettlesABucketOnlyWhereItIsStored: a sender's notice of its
// last pass lets a moving bucket's requests in on a destination replica
// whose copy covers the pass, and only for that migration into that shard;
// a replica that lacks part of the pass (a batch it missed, which comes by
// replication) keeps waiting for the record.
func TestLastPassSettlesABucketOnlyWhereItIsStored(t *testing.T) {
	s, err := storage.Open(storage.Options{Dir: t.TempDir(), NodeTag: "C"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := []string{"orders/1$tenants/9", "orders/2$tenants/9"}
	b := bucket.ForID(ids[0])
	for _, id := range ids {
		if _, err := s.Write(context.Background(), []storage.Op{{Kind: storage.OpPut, ID: id, Body: []byte(`{"n":1}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.BucketStats(b)
	if err != nil {
		t.Fatal(err)
	}
	held, err := changevector.ParseVector(st.ChangeVector)
	if err != nil || len(held) == 0 {
		t.Fatalf("bucket version %q: %v", st.ChangeVector, err)
	}
	// A pass that sent one item more than this replica stored.
	more := changevector.Merge(held, changevector.Vector{{Tag: held[0].Tag, Etag: held[0].Etag + 1, DBID: held[0].DBID}})

	m := &raftfsm.BucketMigration{Bucket: b, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationOwnershipTransferred, MigrationIndex: 7}
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db"}
	rec.Sharding.BucketMigrations = map[uint32]*raftfsm.BucketMigration{b: m}
	lp := newLastPasses()
	l := &localReplica{n: &Node{lastPasses: lp}, db: "db", shard: 1, s: s}
	unsettled := func() bool {
		_, ok := flipUnsettled(rec, 1, ids, readID, l)
		return ok
	}
	never := func(lastPassKey) bool { return false }

	if !unsettled() {
		t.Fatal("a bucket arriving with no last pass heard of is settled")
	}
	lp.note(lastPassKey{"db", 1, b, 6}, held, never) // an earlier migration of the bucket
	lp.note(lastPassKey{"db", 2, b, 7}, held, never) // another shard
	lp.note(lastPassKey{"dx", 1, b, 7}, held, never) // another database
	lp.note(lastPassKey{"db", 1, b, 7}, more, never) // this one, not all stored here
	if !unsettled() {
		t.Fatal("the bucket is settled by a pass this replica does not hold all of, or by another migration's")
	}
	// A write counts the noted pass in before it is stored, on the
	// condition its commit checks: here it fails, the replica lacking
	// part of the pass, and nothing is written.
	ops := []storage.Op{{Kind: storage.OpPut, ID: ids[0], Body: []byte(`{"n":2}`)}, {Kind: storage.OpPut, ID: ids[1], Body: []byte(`{"n":2}`)}}
	q := (*passQueued)(l)
	if _, ok := flipUnsettled(rec, 1, ops, opID, q); ok {
		t.Fatal("a write does not follow a noted pass")
	}
	covers := passConditions(rec, 1, ops, q)
	if len(covers) != 1 || covers[0].Bucket != b || changevector.Compare(covers[0].Version, more) != changevector.Equal {
		t.Fatalf("conditions %+v, want bucket %d covering %s", covers, b, more)
	}
	if _, err := s.WriteCovered(context.Background(), covers, ops); !errors.Is(err, storage.ErrNotCovered) {
		t.Fatalf("a write behind a pass this replica lacks part of: %v, want ErrNotCovered", err)
	}
	if got := passConditions(rec, 1, ops, l); len(got) != 0 {
		t.Fatalf("a replica that waits for the pass to be stored asks for conditions %+v", got)
	}
	woken := lp.changed()
	lp.note(lastPassKey{"db", 1, b, 7}, held, never)
	select {
	case <-woken:
	default:
		t.Fatal("a note did not wake the requests waiting for one")
	}
	if unsettled() {
		t.Fatal("the bucket is not settled by a last pass this replica holds")
	}
	if _, err := s.WriteCovered(context.Background(), passConditions(rec, 1, ops, q), ops); err != nil {
		t.Fatalf("a write behind a pass this replica holds: %v", err)
	}
	// Without the notice path (no holder), only the record settles it.
	if _, ok := flipUnsettled(rec, 1, ids, readID, nil); !ok {
		t.Fatal("the record alone settles a bucket whose last pass it lacks")
	}
	// The documents migrator's moves are never held.
	m.Leftovers = true
	if _, ok := flipUnsettled(rec, 1, ids, readID, nil); ok {
		t.Fatal("a documents-migrator move holds requests")
	}
}

// TestLastPassesForgetSettledMigrations: the notes are bounded; past
// lastPassesKept, those whose record has the pass (stale) go first.
func TestLastPassesForgetSettledMigrations(t *testing.T) {
	lp := newLastPasses()
	v, err := changevector.ParseVector("A:1-" + changevector.NewDatabaseID())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * lastPassesKept {
		lp.note(lastPassKey{"db", 1, uint32(i), uint64(i + 1)}, v, func(k lastPassKey) bool { return k.bucket%2 == 0 })
	}
	lp.mu.Lock()
	n := len(lp.m)
	lp.mu.Unlock()
	if n > 2*lastPassesKept {
		t.Fatalf("%d notes kept, want at most %d", n, 2*lastPassesKept)
	}
	for i := range lastPassesKept / 2 {
		k := lastPassKey{"db", 1, uint32(2 * i), uint64(2*i + 1)}
		lp.mu.Lock()
		_, kept := lp.m[k]
		lp.mu.Unlock()
		if kept {
			t.Fatalf("note %+v kept, though stale", k)
		}
	}
}

// TestMigrationBatchEndingTheLastPassSettlesTheBucket: the batch that ends
// a sender's last pass (Batch.LastPass) settles the bucket on the replica
// that stores it, before any notice or record; other batches do not.
func TestMigrationBatchEndingTheLastPassSettlesTheBucket(t *testing.T) {
	s, err := storage.Open(storage.Options{Dir: t.TempDir(), NodeTag: "C"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := &Node{lastPasses: newLastPasses(), logger: slog.New(slog.DiscardHandler)}
	l := &localReplica{n: n, db: "db", shard: 1, s: s}
	id := "orders/1$tenants/9"
	b := bucket.ForID(id)
	dbid := changevector.NewDatabaseID()
	m := &raftfsm.BucketMigration{Bucket: b, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationOwnershipTransferred, MigrationIndex: 7}
	item := func(etag int) replication.Item {
		return replication.Item{ID: id, Collection: "Orders", ChangeVector: fmt.Sprintf("A:%d-%s", etag, dbid), LastModified: time.Now().UTC(), Body: []byte(`{"n":1}`)}
	}
	batch := &resharding.Batch{DB: "db", Shard: 1, Bucket: b, MigrationIndex: 7, DatabaseID: "srcdb", Items: []replication.Item{item(3)}}
	if err := l.migrate(context.Background(), batch, nil); err != nil {
		t.Fatal(err)
	}
	if n.lastPasses.stored("db", 1, m, s) {
		t.Fatal("a batch that does not end the last pass settled the bucket")
	}
	end := *batch
	end.Items = nil
	end.LastPass = fmt.Sprintf("A:3-%s", dbid)
	if err := l.migrate(context.Background(), &end, nil); err != nil {
		t.Fatal(err)
	}
	if !n.lastPasses.stored("db", 1, m, s) {
		t.Fatal("the stored end of the last pass did not settle the bucket")
	}
	// An end that claims more than the replica holds settles nothing.
	ahead := end
	ahead.MigrationIndex, m.MigrationIndex = 8, 8
	ahead.LastPass = fmt.Sprintf("A:4-%s", dbid)
	if err := l.migrate(context.Background(), &ahead, nil); err != nil {
		t.Fatal(err)
	}
	if n.lastPasses.stored("db", 1, m, s) {
		t.Fatal("a last pass this replica does not hold all of settled the bucket")
	}
}
