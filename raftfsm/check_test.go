package raftfsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzCheckedCommandApplies: any entry that Check lets into the log
// applies without a panic (at worst as an error every node returns alike),
// on a state with nodes, a database and a move in flight. Entries Check
// refuses never reach the log.
func FuzzCheckedCommandApplies(f *testing.F) {
	seeds := []Command{
		&CreateDatabase{Name: "x", Shards: 2, ReplicationFactor: 2},
		&CreateDatabase{Name: "x", Shards: -1, ReplicationFactor: 1 << 30},
		&DeleteDatabase{Name: "db"},
		&AddNode{Node: NodeInfo{Tag: "D", HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:2"}},
		&RemoveNode{Tag: "B", Candidates: []string{"A", "Z"}},
		&StartBucketMigration{Database: "db", Bucket: 7, SourceShard: 0, DestinationShard: 1},
		&StartBucketMigration{Database: "db", Bucket: 1 << 31, SourceShard: -3, DestinationShard: 99},
		&SourceMigrationSendCompleted{Database: "db", Bucket: 7, MigrationIndex: 5, LastSourceChangeVector: "A:1-x"},
		&DestinationMigrationConfirm{Database: "db", Bucket: 7, MigrationIndex: 5, Node: "B"},
		&SourceMigrationCleanup{Database: "db", Bucket: 7, MigrationIndex: 5, Node: "A"},
		&MoveEmptyBuckets{Database: "db", Spans: []BucketSpan{{From: 10, To: 5}}, DestinationShard: 1},
		&ReportMigrationError{Database: "db", Bucket: 7, MigrationIndex: 5, Error: "x"},
		&StartResharding{Database: "db", FromBucket: 0, ToBucket: 1<<20 - 1, ToShard: 2},
		&AddShard{Database: "db", Members: []string{"A", "A", "Q"}},
		&CancelResharding{Database: "db", OperationID: "nope"},
	}
	for _, c := range seeds {
		data, err := Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("garbage"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := Check(data); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Check refused with an error that is not ErrInvalid: %v", err)
			}
			return
		}
		fsm := threeNodes(t)
		mustApply(t, fsm, 4, &CreateDatabase{Name: "db", Shards: 3, ReplicationFactor: 2})
		mustApply(t, fsm, 5, &StartBucketMigration{Database: "db", Bucket: 7, SourceShard: 0, DestinationShard: 1})
		fsm.Apply(&raft.Log{Index: 6, Type: raft.LogCommand, Data: data})
	})
}

// TestCreateDatabaseIDMustFitChangeVectors: a database id goes into moved
// documents' change vectors; one that cannot be written there is refused
// (it once made every node storing a moved document panic), and an empty
// one gets an id derived from the entry's index, the same on every node.
func TestCreateDatabaseIDMustFitChangeVectors(t *testing.T) {
	f := threeNodes(t)
	for _, id := range []string{"x, A:1-y|z", "a b", strings.Repeat("x", 65)} {
		r := f.ApplyCommand(4, &CreateDatabase{Name: "db", Shards: 1, ReplicationFactor: 1, DatabaseID: id})
		if !errors.Is(r.Err, ErrInvalid) {
			t.Errorf("DatabaseId %q: %v, want ErrInvalid", id, r.Err)
		}
	}
	mustApply(t, f, 5, &CreateDatabase{Name: "db", Shards: 1, ReplicationFactor: 1})
	if rec, _ := f.Database("db"); rec.DatabaseID != "db5" {
		t.Fatalf("empty DatabaseId became %q", rec.DatabaseID)
	}
}
