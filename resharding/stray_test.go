package resharding

import (
	"context"
	"log/slog"
	"testing"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// strayCluster is fakeCluster (this node is B, every node is up) whose
// other shard is one local store.
type strayCluster struct {
	fakeCluster
	owner *storage.Store // every replica of the other shard
}

func (f *strayCluster) ItemVersions(_ context.Context, _ string, _ int, ids []string) (map[string]string, error) {
	out := map[string]string{}
	for _, id := range ids {
		d, err := f.owner.GetItem(id)
		if err == nil && !d.Artificial() {
			out[id] = d.ChangeVector
		}
	}
	return out, nil
}

func openStore(t *testing.T, tag string) *storage.Store {
	t.Helper()
	s, err := storage.Open(storage.Options{Dir: t.TempDir(), NodeTag: tag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func write(t *testing.T, s *storage.Store, ops ...storage.Op) {
	t.Helper()
	if _, err := s.Write(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
}

func put(id, body string) storage.Op {
	return storage.Op{Kind: storage.OpPut, ID: id, Body: []byte(body)}
}

// replicate copies from's current item id to to, as replication does.
func replicate(t *testing.T, from, to *storage.Store, id string) {
	t.Helper()
	d, err := from.GetItem(id)
	if err != nil {
		t.Fatal(err)
	}
	write(t, to, storage.Op{Kind: storage.OpReplicate, ID: d.ID, Collection: d.Collection, Body: d.Body, ChangeVector: d.ChangeVector,
		LastModified: d.LastModified, Flags: d.Flags, Source: from.DatabaseID()})
}

// TestStrayCopiesTheOwnerSupersedesAreDropped: a replica that is not its
// shard's responsible one holds items in a bucket another shard owns.
// Its documents migrator purges those whose owner holds the same version,
// a newer one, or a newer tombstone, and keeps those the owner lacks or
// holds only in an older version (the responsible replica moves them once
// replication brings them there); it starts no migration itself, and it
// leaves the buckets its shard owns alone.
func TestStrayCopiesTheOwnerSupersedesAreDropped(t *testing.T) {
	mine := openStore(t, "B")  // shard 0's second member
	owner := openStore(t, "C") // shard 1
	const anchor = "$tenants/5"
	bk := bucket.ForID("tenants/5")
	write(t, mine, put("same"+anchor, `{"v":1}`), put("newer"+anchor, `{"v":1}`), put("deleted"+anchor, `{"v":1}`),
		put("missing"+anchor, `{"v":1}`), put("older"+anchor, `{"v":1}`), put("own/1", `{"v":1}`))
	for _, id := range []string{"same", "newer", "deleted", "older"} {
		replicate(t, mine, owner, id+anchor)
	}
	write(t, owner, put("newer"+anchor, `{"v":2}`), storage.Op{Kind: storage.OpDelete, ID: "deleted" + anchor})
	write(t, mine, put("older"+anchor, `{"v":2}`)) // the owner has only v1
	if bucket.ForID("own/1") == bk {
		t.Fatal("pick another id for the shard's own bucket")
	}
	// A copy that a migration brought here (the node has not applied the
	// migration's start yet, so the record shows none), which the owner
	// still holds in the same version: it is the destination's copy and
	// must stay.
	write(t, owner, put("incoming"+anchor, `{"v":1}`))
	d, _ := owner.GetItem("incoming" + anchor)
	write(t, mine, storage.Op{Kind: storage.OpMigrate, ID: d.ID, Body: d.Body, ChangeVector: d.ChangeVector, LastModified: d.LastModified,
		MigrationIndex: 42, DatabaseID: "thedb"})
	// A copy marked by a migration of another database id: kept, as it
	// cannot be told apart from one this record does not show.
	write(t, owner, put("foreign"+anchor, `{"v":1}`))
	d, _ = owner.GetItem("foreign" + anchor)
	write(t, mine, storage.Op{Kind: storage.OpMigrate, ID: d.ID, Body: d.Body, ChangeVector: d.ChangeVector, LastModified: d.LastModified,
		MigrationIndex: 5, DatabaseID: "olddb"})
	// Copies that moved into this shard by a migration the record shows
	// (index 5, the record is at 7), the bucket since moved on to the
	// owner: one as it came, one written here since (a local write keeps
	// the marker), both of which the owner holds. With three replicas such
	// a write can reach this replica from a sibling rather than from the
	// sender just before the flip, and its cleanup keeps it: it went on
	// being kept here for good.
	for _, id := range []string{"movedin", "writtenafter"} {
		write(t, owner, put(id+anchor, `{"v":1}`))
		d, _ = owner.GetItem(id + anchor)
		write(t, mine, storage.Op{Kind: storage.OpMigrate, ID: d.ID, Body: d.Body, ChangeVector: d.ChangeVector, LastModified: d.LastModified,
			MigrationIndex: 5, DatabaseID: "thedb"})
	}
	write(t, mine, put("writtenafter"+anchor, `{"v":2}`))
	for _, id := range []string{"movedin", "writtenafter"} {
		replicate(t, mine, owner, id+anchor)
	}

	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "thedb", Etag: 7, Sharding: raftfsm.Sharding{
		Shards:           map[int]*raftfsm.ShardTopology{0: {Members: []string{"A", "B"}}, 1: {Members: []string{"C"}}},
		BucketRanges:     bucket.Ranges{{BucketRangeStart: 0, ShardNumber: 0}, {BucketRangeStart: bk, ShardNumber: 1}, {BucketRangeStart: bk + 1, ShardNumber: 0}},
		BucketMigrations: map[uint32]*raftfsm.BucketMigration{},
	}}
	fc := &strayCluster{fakeCluster: fakeCluster{rec: rec}, owner: owner}
	a := &Agent{c: fc, db: "db", shard: 0, s: mine, logger: slog.New(slog.DiscardHandler)}

	for range 2 { // a second sweep changes nothing more
		a.migrateLeftovers(context.Background(), rec, false)
		for id, dropped := range map[string]bool{"same": true, "newer": true, "deleted": true, "missing": false, "older": false, "incoming": false,
			"foreign": false, "movedin": true, "writtenafter": true} {
			d, err := mine.GetItem(id + anchor)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if d.Artificial() != dropped {
				t.Errorf("%s: dropped %v, want %v", id, d.Artificial(), dropped)
			}
		}
		if _, err := mine.Get("own/1"); err != nil {
			t.Errorf("the shard's own document: %v", err)
		}
		if len(fc.proposed) != 0 {
			t.Errorf("a replica that is not responsible proposed %v", fc.proposed)
		}
	}
	if st, _ := mine.BucketStats(bk); st.DocumentsCount != 4 {
		t.Errorf("bucket %d counts %d documents here, want 4 (missing, older, incoming, foreign)", bk, st.DocumentsCount)
	}

	// A replica whose shard receives a bucket sweeps nothing meanwhile.
	rec.Etag++
	other := bk + 100
	rec.Sharding.BucketMigrations[other] = &raftfsm.BucketMigration{Bucket: other, SourceShard: 1, DestinationShard: 0, Status: raftfsm.MigrationMoving}
	write(t, mine, put("later"+anchor, `{"v":1}`))
	replicate(t, mine, owner, "later"+anchor)
	a.migrateLeftovers(context.Background(), rec, false)
	if d, _ := mine.GetItem("later" + anchor); d.Artificial() {
		t.Error("a copy was dropped while the shard received a bucket")
	}
	delete(rec.Sharding.BucketMigrations, other)

	// A bucket a migration covers is left to it.
	write(t, mine, put("again"+anchor, `{"v":1}`))
	replicate(t, mine, owner, "again"+anchor)
	rec.Etag++
	rec.Sharding.BucketMigrations[bk] = &raftfsm.BucketMigration{Bucket: bk, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoving}
	a.migrateLeftovers(context.Background(), rec, false)
	if d, _ := mine.GetItem("again" + anchor); d.Artificial() {
		t.Error("a copy in a migrating bucket was dropped")
	}
}

// TestArrivalsOfAnUnseenMigrationStartNoLeftoversMigration: the
// responsible replica of a destination shard whose node has not applied a
// migration's start yet holds the arriving copies in a bucket its record
// gives to the source. Its documents migrator proposes no migration for
// them (raft refused it, and the log told of a leftover that was none),
// but it moves an item that came otherwise, in that bucket or another.
func TestArrivalsOfAnUnseenMigrationStartNoLeftoversMigration(t *testing.T) {
	mine := openStore(t, "B") // shard 0, the destination
	src := openStore(t, "C")  // shard 1, the source
	arriving, stray := bucket.ForID("tenants/5"), bucket.ForID("tenants/6")
	if arriving == stray {
		t.Fatal("pick other anchors")
	}
	lo, hi := min(arriving, stray), max(arriving, stray)
	migrate := func(id string, index uint64) {
		t.Helper()
		write(t, src, put(id, `{"v":1}`))
		d, _ := src.GetItem(id)
		write(t, mine, storage.Op{Kind: storage.OpMigrate, ID: d.ID, Body: d.Body, ChangeVector: d.ChangeVector, LastModified: d.LastModified,
			MigrationIndex: index, DatabaseID: "thedb"})
	}
	migrate("a$tenants/5", 9) // the migration started at index 9
	migrate("b$tenants/5", 9)

	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "thedb", Etag: 7, Sharding: raftfsm.Sharding{
		Shards: map[int]*raftfsm.ShardTopology{0: {Members: []string{"B"}}, 1: {Members: []string{"C"}}},
		BucketRanges: bucket.Ranges{{BucketRangeStart: 0, ShardNumber: 0}, {BucketRangeStart: lo, ShardNumber: 1}, {BucketRangeStart: lo + 1, ShardNumber: 0},
			{BucketRangeStart: hi, ShardNumber: 1}, {BucketRangeStart: hi + 1, ShardNumber: 0}},
		BucketMigrations: map[uint32]*raftfsm.BucketMigration{},
	}}
	fc := &strayCluster{fakeCluster: fakeCluster{rec: rec}, owner: src}
	a := &Agent{c: fc, db: "db", shard: 0, s: mine, logger: slog.New(slog.DiscardHandler)}
	started := func() []uint32 {
		var out []uint32
		for _, c := range fc.proposed {
			if s, ok := c.(*raftfsm.StartBucketMigration); ok && s.Leftovers {
				out = append(out, s.Bucket)
			}
		}
		return out
	}

	a.migrateLeftovers(context.Background(), rec, false)
	if got := started(); len(got) != 0 {
		t.Fatalf("arrivals of a migration the record does not show started leftovers migrations of buckets %v", got)
	}

	// A document written into a bucket the shard does not own, as a write
	// racing a flip is: a leftover, moved.
	write(t, mine, put("c$tenants/6", `{"v":1}`))
	a.migrateLeftovers(context.Background(), rec, false)
	if got := started(); len(got) != 1 || got[0] != stray {
		t.Fatalf("leftovers migrations of buckets %v, want [%d]", got, stray)
	}

	// In the bucket of the arrivals, an item that did not come by the
	// unseen migration (one by a migration the record shows, index 5)
	// is a leftover as well.
	fc.proposed = nil
	rec.Etag++
	rec.Sharding.BucketMigrations[stray] = &raftfsm.BucketMigration{Bucket: stray, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationMoving, Leftovers: true}
	// It came from a replica of the source that the owner's replicas do
	// not hold it from: the owner lacks it.
	elsewhere := openStore(t, "D")
	write(t, elsewhere, put("d$tenants/5", `{"v":1}`))
	d, _ := elsewhere.GetItem("d$tenants/5")
	write(t, mine, storage.Op{Kind: storage.OpMigrate, ID: d.ID, Body: d.Body, ChangeVector: d.ChangeVector, LastModified: d.LastModified,
		MigrationIndex: 5, DatabaseID: "thedb"})
	delete(rec.Sharding.BucketMigrations, stray)
	rec.Etag++
	a.clean = sweptState{}
	write(t, mine, storage.Op{Kind: storage.OpPurge, ID: "c$tenants/6"})
	a.migrateLeftovers(context.Background(), rec, false)
	if got := started(); len(got) != 1 || got[0] != arriving {
		t.Fatalf("leftovers migrations of buckets %v, want [%d]", got, arriving)
	}
}

// TestLeftoversTheOwnerHoldsAreDroppedNotMoved: the responsible replica
// finds items in a bucket another shard owns. Those the owner holds in the
// same version are dropped and start no migration; one the owner lacks is
// moved.
func TestLeftoversTheOwnerHoldsAreDroppedNotMoved(t *testing.T) {
	mine := openStore(t, "B") // shard 0, responsible
	owner := openStore(t, "C")
	b := bucket.ForID("tenants/7")
	for _, id := range []string{"a$tenants/7", "b$tenants/7"} {
		write(t, owner, put(id, `{"v":1}`))
		replicate(t, owner, mine, id) // a copy the purge kept
	}
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "thedb", Etag: 7, Sharding: raftfsm.Sharding{
		Shards:           map[int]*raftfsm.ShardTopology{0: {Members: []string{"B"}}, 1: {Members: []string{"C"}}},
		BucketRanges:     bucket.Ranges{{BucketRangeStart: 0, ShardNumber: 0}, {BucketRangeStart: b, ShardNumber: 1}, {BucketRangeStart: b + 1, ShardNumber: 0}},
		BucketMigrations: map[uint32]*raftfsm.BucketMigration{},
	}}
	fc := &strayCluster{fakeCluster: fakeCluster{rec: rec}, owner: owner}
	a := &Agent{c: fc, db: "db", shard: 0, s: mine, logger: slog.New(slog.DiscardHandler)}
	a.migrateLeftovers(context.Background(), rec, false)
	if len(fc.proposed) != 0 {
		t.Fatalf("copies the owner holds started %v", fc.proposed)
	}
	for _, id := range []string{"a$tenants/7", "b$tenants/7"} {
		if _, err := mine.Get(id); err != storage.ErrNotFound {
			t.Fatalf("%s, which the owner holds, is still here: %v", id, err)
		}
	}
	write(t, mine, put("c$tenants/7", `{"v":1}`)) // the owner lacks it
	a.migrateLeftovers(context.Background(), rec, false)
	if len(fc.proposed) != 1 {
		t.Fatalf("a copy the owner lacks started %v, want one migration", fc.proposed)
	}
	if s, ok := fc.proposed[0].(*raftfsm.StartBucketMigration); !ok || !s.Leftovers || s.Bucket != b || s.DestinationShard != 1 {
		t.Fatalf("proposed %+v, want a leftovers migration of bucket %d to shard 1", fc.proposed[0], b)
	}
}
