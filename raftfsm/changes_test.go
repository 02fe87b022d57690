package raftfsm

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func steps(cs []Change) string {
	var out []string
	for _, c := range cs {
		switch c.Kind {
		case ChangeMigration:
			out = append(out, fmt.Sprintf("%d:%d:%s", c.Index, c.Migration.Bucket, c.Step))
		default:
			out = append(out, fmt.Sprintf("%d:%s", c.Index, c.Kind))
		}
	}
	return strings.Join(out, " ")
}

// TestChangesListEveryStep: a watcher that looks only after a whole
// migration applied still gets each step, in order, with its own index.
func TestChangesListEveryStep(t *testing.T) {
	f := migrationFixture(t)
	const b = 10
	mustApply(t, f, 5, &StartBucketMigration{Database: "db", Bucket: b, SourceShard: 0, DestinationShard: 2})
	mustApply(t, f, 6, &SourceMigrationSendCompleted{Database: "db", Bucket: b, MigrationIndex: 5, LastSourceChangeVector: "A:3-x"})
	mustApply(t, f, 7, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 5, Node: "C"})
	mustApply(t, f, 8, &DestinationMigrationConfirm{Database: "db", Bucket: b, MigrationIndex: 5, Node: "A"})
	mustApply(t, f, 9, &SourceMigrationCleanup{Database: "db", Bucket: b, MigrationIndex: 5, Node: "A"})
	mustApply(t, f, 10, &SourceMigrationCleanup{Database: "db", Bucket: b, MigrationIndex: 5, Node: "B"})
	got, _, complete := f.Changes("db", 4)
	if want := "5:10:Moving 6:10:Moved 8:10:OwnershipTransferred 10:10:Completed"; steps(got) != want || !complete {
		t.Fatalf("changes %q (complete %v), want %q", steps(got), complete, want)
	}
	if got, _, _ := f.Changes("db", 6); steps(got) != "8:10:OwnershipTransferred 10:10:Completed" {
		t.Fatalf("changes after 6: %q", steps(got))
	}
	if got, through, _ := f.Changes("other", 0); len(got) != 0 || through != 10 {
		t.Fatalf("another database's changes: %q through %d, want none through 10", steps(got), through)
	}
	mustApply(t, f, 11, &DeleteDatabase{Name: "db"})
	if got, _, _ := f.Changes("db", 10); steps(got) != "11:deleted" {
		t.Fatalf("after delete: %q", steps(got))
	}
}

// TestChangesAfterRestoreAreIncomplete: a restore starts a new journal, and
// a watcher from before it is told it may have missed steps.
func TestChangesAfterRestoreAreIncomplete(t *testing.T) {
	f := migrationFixture(t)
	mustApply(t, f, 5, &StartBucketMigration{Database: "db", Bucket: 10, SourceShard: 0, DestinationShard: 2})
	b, err := f.StateJSON()
	if err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(nopCloser{bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}
	if _, _, complete := g.Changes("db", 4); complete {
		t.Fatal("a journal started by a restore at 5 claims to be complete after 4")
	}
	mustApply(t, g, 6, &SourceMigrationSendCompleted{Database: "db", Bucket: 10, MigrationIndex: 5, LastSourceChangeVector: "A:3-x"})
	if got, _, complete := g.Changes("db", 5); steps(got) != "6:10:Moved" || !complete {
		t.Fatalf("after restore: %q %v", steps(got), complete)
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func TestJournalDropsOldestAndSaysSo(t *testing.T) {
	j := newJournal(newState())
	for i := 1; i <= maxChanges+10; i++ {
		j.add([]Change{{Index: uint64(i), Database: "db", Kind: ChangeOperation}})
	}
	f := &FSM{state: newState(), journal: j}
	if _, _, complete := f.Changes("db", 5); complete {
		t.Fatal("changes after 5 claimed complete after 10 were dropped")
	}
	got, _, complete := f.Changes("db", 10)
	if !complete || len(got) != maxChanges || got[0].Index != 11 {
		t.Fatalf("after 10: %d changes from %d, complete %v", len(got), got[0].Index, complete)
	}
}

// TestJournalBoundsTheMigrationsItLists: operation changes that list many
// migrations each (a source node down, every moved bucket waiting) push
// the oldest changes out before the journal is full by count, and a
// watcher behind them is told so; the newest change always stays.
func TestJournalBoundsTheMigrationsItLists(t *testing.T) {
	j := newJournal(newState())
	migs := make([]*BucketMigration, maxJournalMigrations/4)
	for i := 1; i <= 10; i++ {
		j.add([]Change{{Index: uint64(i), Database: "db", Kind: ChangeOperation, Migrations: migs}})
		if j.listed > maxJournalMigrations {
			t.Fatalf("after %d: %d migrations listed", i, j.listed)
		}
	}
	f := &FSM{state: newState(), journal: j}
	got, _, complete := f.Changes("db", 6)
	if !complete || len(got) != 4 || got[0].Index != 7 {
		t.Fatalf("after 6: %d changes, complete %v", len(got), complete)
	}
	if _, _, complete := f.Changes("db", 5); complete {
		t.Fatal("changes after 5 claimed complete after 6 was dropped")
	}
	j.add([]Change{{Index: 11, Database: "db", Kind: ChangeOperation, Migrations: make([]*BucketMigration, 2*maxJournalMigrations)}})
	if got, _, complete := f.Changes("db", 10); !complete || len(got) != 1 || got[0].Index != 11 {
		t.Fatalf("a change over the bound alone: %d changes, complete %v", len(got), complete)
	}
}
