package resharding

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// fakeCluster is a Cluster of one source replica: a fixed record, batches
// that take sendDelay to store, and the commands proposed.
type fakeCluster struct {
	rec       *raftfsm.DatabaseRecord
	sendDelay time.Duration

	mu       sync.Mutex
	proposed []raftfsm.Command
}

func (c *fakeCluster) NodeTag() string                                { return "B" }
func (c *fakeCluster) Record(string) *raftfsm.DatabaseRecord          { return c.rec }
func (c *fakeCluster) Watch() (<-chan uint64, func())                 { return make(chan uint64), func() {} }
func (c *fakeCluster) IsLeader() bool                                 { return false }
func (c *fakeCluster) Up(string) bool                                 { return true }
func (c *fakeCluster) Behind(string, int) bool                        { return false }
func (c *fakeCluster) Stopping() bool                                 { return false }
func (c *fakeCluster) WaitAllApplied(context.Context, uint64) error   { return nil }
func (c *fakeCluster) NotePurge(string, int, uint64)                  {}
func (c *fakeCluster) FenceWrites(context.Context, string, int) error { return nil }
func (c *fakeCluster) Failpoint(context.Context, string)              {}
func (c *fakeCluster) WaitReady(context.Context) error                { return nil }
func (c *fakeCluster) MigratorInterval() time.Duration                { return time.Hour }
func (c *fakeCluster) RangeStats(context.Context, string, int, uint32, uint32) ([]storage.BucketStats, error) {
	return nil, nil
}

func (c *fakeCluster) ItemVersions(context.Context, string, int, []string) (map[string]string, error) {
	return nil, nil
}

func (c *fakeCluster) Propose(_ context.Context, cmd raftfsm.Command) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.proposed = append(c.proposed, cmd)
	return nil
}

func (c *fakeCluster) SendBatch(ctx context.Context, _ *Batch) error {
	select {
	case <-time.After(c.sendDelay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestReplacingSenderCountsOnlyItsLastPass: a sender that takes over
// after the flip (the first one died before recording its last pass)
// sends the whole bucket again, but its recorded pass counts only what
// it sent after that snapshot: here nothing, however long the snapshot's
// batches take to store.
func TestReplacingSenderCountsOnlyItsLastPass(t *testing.T) {
	st, err := storage.Open(storage.Options{Dir: t.TempDir(), NodeTag: "B"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const docs = 3 * batchItems
	var ops []storage.Op
	for i := 0; i < docs; i++ {
		ops = append(ops, storage.Op{Kind: storage.OpPut, ID: fmt.Sprintf("orders/%d$tenants/7", i), Collection: "Orders", Body: []byte(`{"n":1}`)})
	}
	if _, err := st.Write(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	b := bucket.ForID("tenants/7")
	m := raftfsm.BucketMigration{Bucket: b, SourceShard: 0, DestinationShard: 1, Status: raftfsm.MigrationOwnershipTransferred,
		MigrationIndex: 7, Documents: docs, SentByNode: "A"}
	rec := &raftfsm.DatabaseRecord{DatabaseName: "db", DatabaseID: "dbid"}
	rec.Sharding.BucketMigrations = map[uint32]*raftfsm.BucketMigration{b: &m}
	c := &fakeCluster{rec: rec, sendDelay: 200 * time.Millisecond}
	a := &Agent{c: c, db: "db", shard: 0, s: st, logger: slog.New(slog.DiscardHandler)}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.send(ctx, m); err != nil {
		t.Fatalf("send: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.proposed) != 1 {
		t.Fatalf("proposed %d commands, want one final pass: %+v", len(c.proposed), c.proposed)
	}
	p, ok := c.proposed[0].(*raftfsm.SourceMigrationFinalPass)
	if !ok {
		t.Fatalf("proposed %T, want a final pass", c.proposed[0])
	}
	if p.Documents != 0 {
		t.Fatalf("the replacing sender's last pass counts %d documents, want 0 (its snapshot re-sent the %d the migration counted)", p.Documents, docs)
	}
}
