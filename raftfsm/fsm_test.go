package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func mustApply(t *testing.T, f *FSM, index uint64, c Command) Result {
	t.Helper()
	r := f.ApplyCommand(index, c)
	if r.Err != nil {
		t.Fatalf("apply %T at %d: %v", c, index, r.Err)
	}
	return r
}

func threeNodes(t *testing.T) *FSM {
	f := New()
	for i, tag := range []string{"C", "A", "B"} {
		mustApply(t, f, uint64(i+1), &AddNode{Meta: Meta{At: t0}, Node: NodeInfo{Tag: tag, HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:2"}})
	}
	return f
}

func TestCreateDatabaseSpreadsShards(t *testing.T) {
	f := threeNodes(t)
	r := mustApply(t, f, 4, &CreateDatabase{Meta: Meta{At: t0}, Name: "orders", Shards: 3, ReplicationFactor: 2})
	rec := r.Value.(*DatabaseRecord)
	want := map[int][]string{0: {"A", "B"}, 1: {"B", "C"}, 2: {"C", "A"}}
	for n, members := range want {
		got := rec.Sharding.Shards[n].Members
		if len(got) != 2 || got[0] != members[0] || got[1] != members[1] {
			t.Errorf("shard %d members = %v, want %v", n, got, members)
		}
	}
	if err := rec.Sharding.BucketRanges.Validate(); err != nil {
		t.Fatal(err)
	}
	if rec.Sharding.BucketRanges[1].BucketRangeStart != 349525 || rec.Sharding.BucketRanges[2].BucketRangeStart != 699050 {
		t.Errorf("ranges = %+v", rec.Sharding.BucketRanges)
	}
	if rec.Etag != 4 || rec.Sharding.BucketMigrations == nil {
		t.Errorf("etag %d, migrations %v", rec.Etag, rec.Sharding.BucketMigrations)
	}
}

func TestCreateDatabaseErrors(t *testing.T) {
	f := threeNodes(t)
	mustApply(t, f, 4, &CreateDatabase{Name: "db", Shards: 1, ReplicationFactor: 1})
	cases := []struct {
		cmd  *CreateDatabase
		want error
	}{
		{&CreateDatabase{Name: "db", Shards: 1, ReplicationFactor: 1}, ErrDatabaseExists},
		{&CreateDatabase{Name: "x", Shards: 0, ReplicationFactor: 1}, ErrInvalid},
		{&CreateDatabase{Name: "x", Shards: MaxShards + 1, ReplicationFactor: 1}, ErrInvalid},
		{&CreateDatabase{Name: "x", Shards: 1, ReplicationFactor: 4}, ErrInvalid},
		{&CreateDatabase{Name: "x", Shards: 1, ReplicationFactor: 0}, ErrInvalid},
		{&CreateDatabase{Name: "a$b", Shards: 1, ReplicationFactor: 1}, ErrInvalid},
		{&CreateDatabase{Name: "../etc", Shards: 1, ReplicationFactor: 1}, ErrInvalid},
		{&CreateDatabase{Name: "", Shards: 1, ReplicationFactor: 1}, ErrInvalid},
	}
	for i, c := range cases {
		before, _ := f.StateJSON()
		r := f.ApplyCommand(uint64(10+i), c.cmd)
		if !errors.Is(r.Err, c.want) {
			t.Errorf("%+v: err %v, want %v", c.cmd, r.Err, c.want)
		}
		after, _ := f.StateJSON()
		// Only the applied index may change when a command is refused.
		var b, a State
		_ = jsonUnmarshal(before, &b)
		_ = jsonUnmarshal(after, &a)
		b.Index, a.Index = 0, 0
		if !bytes.Equal(mustJSON(b), mustJSON(a)) {
			t.Errorf("%+v: refused command changed the state", c.cmd)
		}
	}
}

func TestRequestIDMakesRetriesIdempotent(t *testing.T) {
	f := threeNodes(t)
	c := &CreateDatabase{Meta: Meta{RequestID: "req-1"}, Name: "db", Shards: 2, ReplicationFactor: 1}
	mustApply(t, f, 4, c)
	r := f.ApplyCommand(5, c)
	if r.Err != nil || !r.Duplicate {
		t.Fatalf("retry: %+v", r)
	}
	rec, _ := f.Database("db")
	if rec.Etag != 4 {
		t.Fatalf("retry changed the record: etag %d", rec.Etag)
	}
}

// TestRequestFingerprintsAreRememberedWithTheirIDs: a command's
// fingerprint is kept with its request id, survives a snapshot, is not
// replaced by a retry that asks for something else, and is forgotten with
// the id. A command without one (an older proposer's) leaves the state as
// it did before fingerprints existed.
func TestRequestFingerprintsAreRememberedWithTheirIDs(t *testing.T) {
	f := threeNodes(t)
	mustApply(t, f, 4, &CreateDatabase{Meta: Meta{RequestID: "old", At: t0}, Name: "a", Shards: 1, ReplicationFactor: 1})
	if js, _ := f.StateJSON(); bytes.Contains(js, []byte("RequestFingerprints")) {
		t.Fatalf("a command without a fingerprint changed the state's form: %s", js)
	}
	if fp, ok := f.RequestFingerprint("old"); ok {
		t.Fatalf("fingerprint %q for a command that had none", fp)
	}
	mustApply(t, f, 5, &CreateDatabase{Meta: Meta{RequestID: "new", At: t0, Fingerprint: "create b"}, Name: "b", Shards: 1, ReplicationFactor: 1})
	before, _ := f.StateJSON()
	r := f.ApplyCommand(6, &CreateDatabase{Meta: Meta{RequestID: "new", At: t0, Fingerprint: "create b2"}, Name: "b", Shards: 2, ReplicationFactor: 1})
	if !r.Duplicate || r.Err != nil {
		t.Fatalf("retry with another fingerprint: %+v", r)
	}
	after, _ := f.StateJSON()
	var b, a State
	_ = jsonUnmarshal(before, &b)
	_ = jsonUnmarshal(after, &a)
	b.Index, a.Index = 0, 0
	if !bytes.Equal(mustJSON(b), mustJSON(a)) {
		t.Fatal("a retry changed the state")
	}
	g := snapshotRoundTrip(t, f)
	if fp, ok := g.RequestFingerprint("new"); !ok || fp != "create b" {
		t.Fatalf("fingerprint after a snapshot: %q %v", fp, ok)
	}
	for i := range maxRememberedRequests {
		c := &AddNode{Meta: Meta{RequestID: fmt.Sprintf("n%d", i), At: t0, Fingerprint: "add A"}, Node: NodeInfo{Tag: "A", HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:2"}}
		mustApply(t, f, uint64(10+i), c)
	}
	if _, ok := f.RequestFingerprint("new"); ok {
		t.Fatal("the fingerprint outlived its request id")
	}
	if n := len(f.state.RequestFingerprints); n != maxRememberedRequests {
		t.Fatalf("%d fingerprints remembered, want %d", n, maxRememberedRequests)
	}
}

// snapshotRoundTrip persists a snapshot of f and restores it into a new
// state machine.
func snapshotRoundTrip(t *testing.T, f *FSM) *FSM {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestSnapshotRestoreIsIdentical(t *testing.T) {
	f := threeNodes(t)
	mustApply(t, f, 4, &CreateDatabase{Meta: Meta{RequestID: "r", At: t0}, Name: "orders", Shards: 3, ReplicationFactor: 2})
	mustApply(t, f, 5, &CreateDatabase{Name: "users", Shards: 5, ReplicationFactor: 3})
	mustApply(t, f, 6, &DeleteDatabase{Name: "users"})
	mustApply(t, f, 7, &CreateDatabase{Name: "logs", Shards: 1, ReplicationFactor: 1})
	g := snapshotRoundTrip(t, f)
	a, _ := f.StateJSON()
	b, _ := g.StateJSON()
	if !bytes.Equal(a, b) {
		t.Fatalf("restored state differs:\n%s\n%s", a, b)
	}
	// The restored machine keeps applying identically.
	c := &CreateDatabase{Name: "more", Shards: 2, ReplicationFactor: 2}
	f.ApplyCommand(8, c)
	g.ApplyCommand(8, c)
	a, _ = f.StateJSON()
	b, _ = g.StateJSON()
	if !bytes.Equal(a, b) {
		t.Fatal("machines diverged after restore")
	}
}

func TestUnknownCommandPanicsUnlessIgnorable(t *testing.T) {
	f := New()
	if r := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: []byte{byte(IgnoreUnknownFlag | 0x3f), '{', '}'}}); r.(Result).Err != nil {
		t.Fatalf("ignorable command: %+v", r)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("unknown command did not panic")
		}
	}()
	f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte{0x3f, '{', '}'}})
}

func TestWatchSeesNewestIndex(t *testing.T) {
	f := threeNodes(t)
	ch, stop := f.Watch()
	defer stop()
	mustApply(t, f, 10, &CreateDatabase{Name: "a", Shards: 1, ReplicationFactor: 1})
	mustApply(t, f, 11, &CreateDatabase{Name: "b", Shards: 1, ReplicationFactor: 1})
	if got := <-ch; got != 11 {
		t.Fatalf("watch got %d, want 11", got)
	}
}

type memSink struct{ bytes.Buffer }

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }

// TestDatabasesSpreadOverTheNodes: each database's shards start where the
// previous databases' left off, so small databases do not all put their
// first replica on the first node.
func TestDatabasesSpreadOverTheNodes(t *testing.T) {
	f := threeNodes(t)
	first := map[string]int{}
	for i := range 30 {
		rec := mustApply(t, f, uint64(10+i), &CreateDatabase{Name: fmt.Sprintf("d%d", i), Shards: 1 + i%2, ReplicationFactor: 1, Spread: true}).Value.(*DatabaseRecord)
		for _, sh := range rec.Sharding.Shards {
			first[sh.Members[0]]++
		}
	}
	// 45 shards over 3 nodes.
	for _, tag := range []string{"A", "B", "C"} {
		if first[tag] != 15 {
			t.Fatalf("shards per node %v, want 15 each", first)
		}
	}
	// A log entry written before Spread replays as it first applied.
	old := mustApply(t, f, 100, &CreateDatabase{Name: "old", Shards: 1, ReplicationFactor: 1}).Value.(*DatabaseRecord)
	if m := old.Sharding.Shards[0].Members; m[0] != "A" {
		t.Fatalf("a create without Spread placed shard 0 on %v, want A as before", m)
	}
}
