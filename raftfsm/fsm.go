package raftfsm

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// Result is what Apply returns for every entry: the command's value or its
// business error.
type Result struct {
	// Value is the command's result (e.g. the new record), or nil.
	Value any
	// Err is the command's business error, or nil.
	Err error
	// Duplicate reports that the request id was already applied, so this
	// entry changed nothing.
	Duplicate bool
}

// FSM is the raft.FSM over State. Readers get copies; watchers are told
// the index of each applied entry.
type FSM struct {
	mu       sync.RWMutex
	state    *State
	journal  *journal
	watchers map[chan uint64]struct{}
}

// New returns an FSM with an empty state.
func New() *FSM {
	s := newState()
	return &FSM{state: s, journal: newJournal(s), watchers: map[chan uint64]struct{}{}}
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.mu.Lock()
	res := f.apply(l.Index, l.Data)
	f.state.Index = l.Index
	f.journal.record(l.Index, f.state)
	f.mu.Unlock()
	f.notify(l.Index)
	return res
}

// apply runs one command against the state; f.mu is held.
func (f *FSM) apply(index uint64, data []byte) Result {
	if len(data) == 0 {
		return Result{Err: fmt.Errorf("%w: empty log entry", ErrInvalid)}
	}
	t := CommandType(data[0])
	fn, ok := handlers[t]
	if !ok {
		if t&IgnoreUnknownFlag != 0 {
			return Result{}
		}
		panic(fmt.Sprintf("raftfsm: unknown command type %d at index %d: refusing to diverge", t, index))
	}
	var meta Meta
	if err := json.Unmarshal(data[1:], &meta); err != nil {
		return Result{Err: fmt.Errorf("%w: decode command %d: %v", ErrInvalid, t, err)}
	}
	if _, seen := f.state.Requests[meta.RequestID]; seen && meta.RequestID != "" {
		return Result{Duplicate: true}
	}
	v, err := fn(f.state, index, data[1:])
	if err == nil {
		f.state.remember(meta.RequestID, index, meta.Fingerprint)
	}
	return Result{Value: v, Err: err}
}

// ApplyCommand applies a command directly (no raft) at index: for tests and
// for replaying a log without a running node.
func (f *FSM) ApplyCommand(index uint64, c Command) Result {
	data, err := Encode(c)
	if err != nil {
		return Result{Err: err}
	}
	r, _ := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(Result)
	return r
}

// Watch returns a channel that receives applied indexes (coalesced: a slow
// reader sees the latest) and a function that stops the watch.
func (f *FSM) Watch() (<-chan uint64, func()) {
	ch := make(chan uint64, 1)
	f.mu.Lock()
	f.watchers[ch] = struct{}{}
	f.mu.Unlock()
	return ch, func() {
		f.mu.Lock()
		delete(f.watchers, ch)
		f.mu.Unlock()
	}
}

func (f *FSM) notify(index uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for ch := range f.watchers {
		select {
		case ch <- index:
		default:
			select { // replace the stale value with the newest
			case <-ch:
			default:
			}
			select {
			case ch <- index:
			default:
			}
		}
	}
}

// AppliedIndex is the raft index of the last applied entry.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Index
}

// Database returns a copy of the named record.
func (f *FSM) Database(name string) (*DatabaseRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.state.Databases[name]
	if !ok {
		return nil, false
	}
	return r.Clone(), true
}

// Record returns the named record without copying it: records in the state
// are immutable (every command that changes one replaces it with a new
// value), so the hot path reads them for free. Callers must not modify it.
func (f *FSM) Record(name string) (*DatabaseRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.state.Databases[name]
	return r, ok
}

// RecordAt returns the named record as Record does, with the last applied
// index, read together: the record reflects every command up to index, so
// a watcher that starts from it has nothing of the database to catch up
// on before index.
func (f *FSM) RecordAt(name string) (rec *DatabaseRecord, index uint64, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	rec, ok = f.state.Databases[name]
	return rec, f.state.Index, ok
}

// Records returns every record without copying (see Record), sorted by
// name. Callers must not modify them.
func (f *FSM) Records() []*DatabaseRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*DatabaseRecord, 0, len(f.state.Databases))
	for _, r := range f.state.Databases {
		out = append(out, r)
	}
	sortRecords(out)
	return out
}

// Databases returns copies of all records, sorted by name.
func (f *FSM) Databases() []*DatabaseRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*DatabaseRecord, 0, len(f.state.Databases))
	for _, r := range f.state.Databases {
		out = append(out, r.Clone())
	}
	sortRecords(out)
	return out
}

// RequestIndex returns the raft index of the command that a Request-Id
// was first applied with, while the state remembers it.
func (f *FSM) RequestIndex(id string) (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	i, ok := f.state.Requests[id]
	return i, ok
}

// RequestFingerprint returns the Meta.Fingerprint of the command that a
// Request-Id was first applied with; false when the state does not
// remember the id, or its command carried no fingerprint (it was proposed
// by an older version).
func (f *FSM) RequestFingerprint(id string) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fp, ok := f.state.RequestFingerprints[id]
	return fp, ok
}

// Nodes returns the cluster members sorted by tag.
func (f *FSM) Nodes() []NodeInfo {
	nodes, _ := f.NodesAndIndex()
	return nodes
}

// NodesAndIndex returns the cluster members sorted by tag, and the raft
// index of the latest change to them (State.NodesIndex), read together.
func (f *FSM) NodesAndIndex() ([]NodeInfo, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]NodeInfo, 0, len(f.state.Nodes))
	for _, n := range f.state.Nodes {
		out = append(out, *n)
	}
	sortNodes(out)
	return out, f.state.NodesIndex
}

// Snapshot implements raft.FSM: it serialises the state under the read lock
// (the state is small control data) and leaves the writing to Persist.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := json.Marshal(f.state)
	if err != nil {
		return nil, fmt.Errorf("snapshot state: %w", err)
	}
	return &snapshot{data: b}, nil
}

// Restore implements raft.FSM: it decodes into a fresh state and swaps it
// in.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s := newState()
	if err := json.NewDecoder(rc).Decode(s); err != nil {
		return fmt.Errorf("restore state: %w", err)
	}
	for _, r := range s.Databases {
		if r.Sharding.BucketMigrations == nil {
			r.Sharding.BucketMigrations = map[uint32]*BucketMigration{}
		}
		if r.Sharding.Resharding == nil {
			r.Sharding.Resharding = map[string]*ReshardingOperation{}
		}
	}
	f.mu.Lock()
	f.state = s
	f.journal = newJournal(s)
	f.mu.Unlock()
	f.notify(s.Index)
	return nil
}

// StateJSON returns the canonical JSON of the whole state (for tests and
// debugging).
func (f *FSM) StateJSON() ([]byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return json.Marshal(f.state)
}

type snapshot struct{ data []byte }

// Persist implements raft.FSMSnapshot.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.data); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *snapshot) Release() {}
