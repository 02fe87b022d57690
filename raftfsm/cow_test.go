package raftfsm

import (
	"bytes"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestRecordVersionsNeverChange: a command's new record version shares the
// bucket ranges and the unchanged migration entries with the version
// before it, so no command may change anything an earlier version, or a
// change in the journal, points to. Random sequences of resharding
// commands (most of them valid for the state they meet, some stale,
// some removing a node) are applied; every version of the record and
// every journal change is kept with its JSON as it was when it appeared,
// and each must still marshal to that JSON at the end. A clone handed
// out (FSM.Database) is the caller's to change.
func TestRecordVersionsNeverChange(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := New()
		index := uint64(0)
		apply := func(c Command) Result {
			index++
			return f.ApplyCommand(index, c)
		}
		for _, tag := range []string{"A", "B", "C", "D"} {
			apply(&AddNode{Meta: Meta{At: t0}, Node: NodeInfo{Tag: tag, HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:2"}})
		}
		if r := apply(&CreateDatabase{Meta: Meta{At: t0}, Name: "db", Shards: 3, ReplicationFactor: 2}); r.Err != nil {
			rt.Fatal(r.Err)
		}
		if r := apply(&StartResharding{Meta: Meta{At: t0}, Database: "db", OperationID: "op", FromBucket: 0, ToBucket: 40, ToShard: 2}); r.Err != nil {
			rt.Fatal(r.Err)
		}
		type version struct {
			rec  *DatabaseRecord
			json []byte
		}
		var versions []version
		var changes []Change
		var changeJSON [][]byte
		keep := func() {
			rec, ok := f.Record("db")
			if !ok {
				rt.Fatal("the database is gone")
			}
			versions = append(versions, version{rec, mustJSON(rec)})
			cs, _, _ := f.Changes("db", index-1)
			for _, c := range cs {
				changes = append(changes, c)
				changeJSON = append(changeJSON, mustJSON(c))
			}
		}
		keep()
		removed := false
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for range steps {
			rec, _ := f.Record("db")
			b := uint32(rapid.IntRange(0, 40).Draw(rt, "bucket"))
			m := rec.Sharding.BucketMigrations[b]
			var c Command
			switch k := rapid.IntRange(0, 9).Draw(rt, "kind"); {
			case m == nil && k < 7:
				src := rec.ShardOf(b)
				dst := (src + 1 + rapid.IntRange(0, 1).Draw(rt, "dst")) % 3
				c = &StartBucketMigration{Meta: Meta{At: t0}, Database: "db", Bucket: b, SourceShard: src, DestinationShard: dst, OperationID: "op"}
			case m == nil && k < 9:
				c = &MoveEmptyBuckets{Meta: Meta{At: t0}, Database: "db", SourceShard: rec.ShardOf(b), DestinationShard: (rec.ShardOf(b) + 1) % 3,
					Spans: []BucketSpan{{From: b, To: min(b+uint32(rapid.IntRange(0, 3).Draw(rt, "span")), 40)}}, OperationID: "op"}
			case m == nil:
				if !removed {
					removed = true
					c = &RemoveNode{Meta: Meta{At: t0}, Tag: rapid.SampledFrom([]string{"A", "B", "C"}).Draw(rt, "removed"), Candidates: []string{"A", "B", "C", "D"}}
				} else {
					continue
				}
			case k == 0:
				c = &ReportMigrationError{Meta: Meta{At: t0}, Database: "db", Bucket: b, MigrationIndex: m.MigrationIndex, Error: fmt.Sprintf("error %d", index)}
			case m.Status == MigrationMoving:
				c = &SourceMigrationSendCompleted{Meta: Meta{At: t0}, Database: "db", Bucket: b, MigrationIndex: m.MigrationIndex,
					LastSourceChangeVector: fmt.Sprintf("A:%d-x", index), SentThrough: map[string]uint64{"x": index}, SentBy: "x", SentByNode: "A", Documents: 1, Bytes: 10}
			case m.Status == MigrationMoved:
				members := rec.Sharding.Shards[m.DestinationShard].Members
				c = &DestinationMigrationConfirm{Meta: Meta{At: t0}, Database: "db", Bucket: b, MigrationIndex: m.MigrationIndex,
					Node: rapid.SampledFrom(members).Draw(rt, "confirmer")}
			case m.FinalPass == nil && k < 4:
				c = &SourceMigrationFinalPass{Meta: Meta{At: t0}, Database: "db", Bucket: b, MigrationIndex: m.MigrationIndex,
					Pass: MigrationPass{ChangeVector: fmt.Sprintf("A:%d-x", index), SentThrough: map[string]uint64{"x": index}, SentBy: "x", Node: "A"}, Documents: 1, Bytes: 10}
			default:
				members := rec.Sharding.Shards[m.SourceShard].Members
				c = &SourceMigrationCleanup{Meta: Meta{At: t0}, Database: "db", Bucket: b, MigrationIndex: m.MigrationIndex,
					Node: rapid.SampledFrom(members).Draw(rt, "cleaner")}
			}
			if rapid.IntRange(0, 9).Draw(rt, "stale") == 0 {
				// A retry of a step already taken, or one for a migration
				// that has moved on: refused or a no-op, and either way it
				// changes no earlier version.
				if sm, ok := c.(*SourceMigrationCleanup); ok {
					sm.MigrationIndex++
				}
			}
			before := f.state.Databases["db"]
			apply(c)
			// The diff from the entries the command touched is the diff
			// of every entry.
			if after := f.state.Databases["db"]; after != before {
				full := *after
				full.touched = nil
				if got, want := mustJSON(DiffRecords(index, before, after)), mustJSON(DiffRecords(index, before, &full)); !bytes.Equal(got, want) {
					rt.Fatalf("after %T: the diff of the touched entries\n%s\nis not the diff of all\n%s", c, got, want)
				}
			}
			keep()
			if err := f.state.Databases["db"].Sharding.BucketRanges.Validate(); err != nil {
				rt.Fatalf("after %T: %v", c, err)
			}
		}
		for i, v := range versions {
			if got := mustJSON(v.rec); !bytes.Equal(got, v.json) {
				rt.Fatalf("version %d of %d (etag %d) changed after it was replaced:\nthen %s\nnow  %s", i, len(versions), v.rec.Etag, v.json, got)
			}
		}
		for i, c := range changes {
			if got := mustJSON(c); !bytes.Equal(got, changeJSON[i]) {
				rt.Fatalf("journal change %d (index %d, %s %s) changed:\nthen %s\nnow  %s", i, c.Index, c.Kind, c.Step, changeJSON[i], got)
			}
		}
		// A copy handed out is deep: changing it changes no version.
		cp, _ := f.Database("db")
		for _, m := range cp.Sharding.BucketMigrations {
			m.ConfirmedDestinations = append(m.ConfirmedDestinations[:0], "Z")
			m.SentThrough = nil
			if m.FinalPass != nil {
				m.FinalPass.SentThrough["x"] = 0
			}
		}
		if len(cp.Sharding.BucketRanges) > 0 {
			cp.Sharding.BucketRanges[0].ShardNumber = 99
		}
		last := versions[len(versions)-1]
		if got := mustJSON(last.rec); !bytes.Equal(got, last.json) {
			rt.Fatalf("changing a copy from FSM.Database changed the record:\nthen %s\nnow  %s", last.json, got)
		}
	})
}

// BenchmarkCommandWithManyMigrations measures one command on a record
// holding many migrations that wait for a source node's cleanup, as a
// range move leaves them while that node is down.
func BenchmarkCommandWithManyMigrations(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			f := New()
			index := uint64(0)
			apply := func(c Command) {
				index++
				if r := f.ApplyCommand(index, c); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			for _, tag := range []string{"A", "B", "C"} {
				apply(&AddNode{Meta: Meta{At: t0}, Node: NodeInfo{Tag: tag, HttpUrl: "http://127.0.0.1:1", RaftAddr: "127.0.0.1:2"}})
			}
			apply(&CreateDatabase{Meta: Meta{At: t0}, Name: "db", Shards: 3, ReplicationFactor: 2})
			// Shard 0 is on A and B; B never cleans up.
			var starts []uint64
			for i := range n {
				bk := uint32(2 * i)
				apply(&StartBucketMigration{Meta: Meta{At: t0}, Database: "db", Bucket: bk, SourceShard: 0, DestinationShard: 2})
				mi := index
				starts = append(starts, mi)
				apply(&SourceMigrationSendCompleted{Meta: Meta{At: t0}, Database: "db", Bucket: bk, MigrationIndex: mi, LastSourceChangeVector: "A:1-x",
					SentThrough: map[string]uint64{"x": 1, "y": 2}, SentBy: "x", SentByNode: "A"})
				rec, _ := f.Record("db")
				for _, node := range rec.Sharding.Shards[2].Members {
					apply(&DestinationMigrationConfirm{Meta: Meta{At: t0}, Database: "db", Bucket: bk, MigrationIndex: mi, Node: node})
				}
				apply(&SourceMigrationCleanup{Meta: Meta{At: t0}, Database: "db", Bucket: bk, MigrationIndex: mi, Node: "A"})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				// An error report on one of them: a command that changes
				// one entry.
				apply(&ReportMigrationError{Meta: Meta{At: t0}, Database: "db", Bucket: uint32(2 * (i % n)), MigrationIndex: starts[i%n], Error: "x"})
			}
		})
	}
}
