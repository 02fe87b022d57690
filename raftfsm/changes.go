package raftfsm

import (
	"cmp"
	"maps"
	"slices"
)

// ChangeKind says what a Change reports.
type ChangeKind string

// Kinds of Change.
const (
	// ChangeMigration is one step of a bucket migration: its Step is the
	// new status, "FinalPass" when the sender recorded its last pass,
	// "Completed" when the migration left the record, or "Error" when a
	// step failed again.
	ChangeMigration ChangeKind = "migration"
	// ChangeOperation is a change of a resharding operation's progress.
	ChangeOperation ChangeKind = "operation"
	// ChangeDeleted means the database was deleted.
	ChangeDeleted ChangeKind = "deleted"
)

// Change is one resharding step of one database, as the command at Index
// made it. The FSM derives changes as each command applies, so a watcher
// that wakes after several commands still sees every step, in order (one
// server-sent event each), rather than the difference between the first
// and last record. Everything a Change points to is immutable.
type Change struct {
	// Index is the raft index of the command.
	Index uint64
	// Database names the database.
	Database string
	// Kind says what changed.
	Kind ChangeKind
	// Step is a migration's new step (ChangeMigration).
	Step string
	// Migration is the migration as of Index (ChangeMigration).
	Migration *BucketMigration
	// Operation is the operation as of Index (ChangeOperation), and
	// Migrations its migrations in flight then.
	Operation  *ReshardingOperation
	Migrations []*BucketMigration
}

// maxChanges bounds the journal of changes the FSM keeps for watchers.
const maxChanges = 8192

// maxJournalMigrations bounds the migration entries the journal's
// operation changes list (Change.Migrations) in all. With a source node
// down every moved bucket waits for its cleanup, and each operation
// change lists them all: at 10,000 waiting, a full journal held some
// 20 million pointers, 160 MB on every node. A watcher behind what the
// journal holds is told it may have missed changes.
const maxJournalMigrations = 1 << 20

// journal is the FSM's recent changes and the record versions they were
// derived from; it is not part of the replicated state (a restore starts a
// new journal).
type journal struct {
	seen    map[string]*DatabaseRecord // the record version changes were derived up to
	changes []Change                   // oldest first, at most maxChanges
	// listed counts the Migrations of changes, at most
	// maxJournalMigrations.
	listed int
	// complete is the lowest index after which the journal holds every
	// change: a watcher that last saw an older index may have missed some.
	complete uint64
}

func newJournal(s *State) *journal {
	j := &journal{seen: make(map[string]*DatabaseRecord, len(s.Databases)), complete: s.Index}
	for name, r := range s.Databases {
		j.seen[name] = r
	}
	return j
}

// record derives the changes the command at index made to the state.
func (j *journal) record(index uint64, s *State) {
	for name, cur := range s.Databases {
		if prev, ok := j.seen[name]; !ok || prev != cur {
			if ok {
				j.add(DiffRecords(index, prev, cur))
			}
			j.seen[name] = cur
		}
	}
	for name := range j.seen {
		if _, ok := s.Databases[name]; !ok {
			delete(j.seen, name)
			j.add([]Change{{Index: index, Database: name, Kind: ChangeDeleted}})
		}
	}
}

func (j *journal) add(cs []Change) {
	if len(cs) == 0 {
		return
	}
	j.changes = append(j.changes, cs...)
	for _, c := range cs {
		j.listed += len(c.Migrations)
	}
	over := 0 // the oldest changes to drop; the newest is always kept
	for over < len(j.changes)-1 && (len(j.changes)-over > maxChanges || j.listed > maxJournalMigrations) {
		j.listed -= len(j.changes[over].Migrations)
		over++
	}
	if over == 0 {
		return
	}
	// Indexes up to the last dropped one may be incomplete now.
	j.complete = max(j.complete, j.changes[over-1].Index)
	// Dropped from the front of a slice that grows at the back: the
	// backing array is reused until the free space at its front is as
	// large as what it holds, then the changes are copied to a new one
	// (copying on every command moved the whole journal each time).
	clear(j.changes[:over])
	j.changes = j.changes[over:]
	if cap(j.changes) > 4*len(j.changes)+64 {
		j.changes = slices.Clone(j.changes)
	}
}

// DiffRecords lists the changes between two versions of a record, the
// later one made by the command at index.
func DiffRecords(index uint64, prev, cur *DatabaseRecord) []Change {
	var out []Change
	ev := func(m *BucketMigration, step string) {
		out = append(out, Change{Index: index, Database: cur.DatabaseName, Kind: ChangeMigration, Step: step, Migration: m})
	}
	step := func(old, m *BucketMigration) {
		switch {
		case old == nil:
			ev(m, string(m.Status))
		case m == nil:
			ev(old, "Completed")
		case old.MigrationIndex != m.MigrationIndex:
			ev(old, "Completed")
			ev(m, string(m.Status))
		case old.Status != m.Status:
			ev(m, string(m.Status))
		case old.FinalPass == nil && m.FinalPass != nil:
			ev(m, "FinalPass")
		case old.Failures != m.Failures:
			ev(m, "Error")
		}
	}
	var buckets []uint32
	if cur.touched != nil && cur.base == prev.Etag {
		// cur was made from prev, and every entry it changed is listed.
		buckets = slices.Clone(cur.touched)
	} else {
		buckets = slices.AppendSeq(slices.Collect(maps.Keys(cur.Sharding.BucketMigrations)), maps.Keys(prev.Sharding.BucketMigrations))
	}
	slices.Sort(buckets)
	for _, b := range slices.Compact(buckets) {
		if old, m := prev.Sharding.BucketMigrations[b], cur.Sharding.BucketMigrations[b]; old != nil || m != nil {
			step(old, m)
		}
	}
	for id, op := range cur.Sharding.Resharding {
		old, ok := prev.Sharding.Resharding[id]
		if !ok || old.BucketsDone != op.BucketsDone || old.DocumentsMoved != op.DocumentsMoved || old.Status != op.Status || len(old.Errors) != len(op.Errors) {
			out = append(out, Change{Index: index, Database: cur.DatabaseName, Kind: ChangeOperation, Operation: op, Migrations: OperationMigrations(cur, id)})
		}
	}
	return out
}

// OperationMigrations lists the migrations of operation id in rec, by
// bucket.
func OperationMigrations(rec *DatabaseRecord, id string) []*BucketMigration {
	var out []*BucketMigration
	for _, m := range rec.Sharding.BucketMigrations {
		if m.OperationID == id {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *BucketMigration) int { return cmp.Compare(a.Bucket, b.Bucket) })
	return out
}

// AwaitingCleanup counts rec's migrations that flipped ownership and wait
// for their source replicas' cleanup (OwnershipTransferred): each stays in
// the record until every source member has purged the bucket.
func AwaitingCleanup(rec *DatabaseRecord) int {
	n := 0
	for _, m := range rec.Sharding.BucketMigrations {
		if m.Status == MigrationOwnershipTransferred {
			n++
		}
	}
	return n
}

// Changes returns database db's changes made after index, oldest first.
// through is the last applied index when it looked: the answer holds
// every change of db up to through, so a watcher has seen the database
// as of through and asks after it next, even when db itself did not
// change (a quiet database's watcher would otherwise stay behind while
// other databases fill the journal, and find it incomplete). complete is
// false when the journal no longer reaches back to index (the watcher fell
// behind by more than maxChanges, or the FSM restored a snapshot since):
// the caller should compare records instead.
func (f *FSM) Changes(db string, after uint64) (changes []Change, through uint64, complete bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	j := f.journal
	i, _ := slices.BinarySearchFunc(j.changes, after+1, func(c Change, idx uint64) int { return cmp.Compare(c.Index, idx) })
	for _, c := range j.changes[i:] {
		if c.Database == db {
			changes = append(changes, c)
		}
	}
	return changes, f.state.Index, after >= j.complete
}

// AllChanges returns every database's changes made after index, oldest
// first; through and complete are as for Changes.
func (f *FSM) AllChanges(after uint64) (changes []Change, through uint64, complete bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	j := f.journal
	i, _ := slices.BinarySearchFunc(j.changes, after+1, func(c Change, idx uint64) int { return cmp.Compare(c.Index, idx) })
	return slices.Clone(j.changes[i:]), f.state.Index, after >= j.complete
}
