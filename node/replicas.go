package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/replication"
	"github.com/shardnode/shardnode/resharding"
	"github.com/shardnode/shardnode/storage"
)

// replicaKey names one shard replica.
type replicaKey struct {
	db    string
	shard int
}

// replicaSet opens and closes this node's shard replicas so that they
// follow the database records: a replica exists here exactly when the
// record lists this node among the shard's members.
type replicaSet struct {
	dir   string
	tag   string
	cache *pebble.Cache
	docs  *storage.DocCache // nil: no document cache
	// compactions grants the replicas' compactions (nil: Pebble's own
	// scheduler per replica).
	compactions *storage.Compactions
	logger      *slog.Logger

	// memtableBudget is divided among the replicas a reconcile wants (see
	// memTableSize).
	memtableBudget int64

	transport replication.Transport
	// newAgent starts the resharding agent of a newly opened replica.
	newAgent func(db string, shard int, s *storage.Store) io.Closer

	mu         sync.RWMutex
	stores     map[replicaKey]*storage.Store
	reps       map[replicaKey]*replication.Replicator
	agents     map[replicaKey]io.Closer
	fences     map[replicaKey]*writeFence
	purged     map[replicaKey]uint64 // highest ConfirmationIndex whose purge began
	failed     map[replicaKey]string // why a wanted replica did not open (retried)
	reconciled uint64                // raft index the set last reconciled to
	// settled is the raft index whose removals and peer changes are done:
	// only replicas that index adds may still be opening. A node follows
	// the cluster (freshness) once settled, so opening the many replicas
	// of a new database does not hold up writes to the others.
	settled uint64
	changed chan struct{} // closed and replaced when either index moves
	// placed is the placement (see placement) the last reconcile left
	// wholly done: no error, nothing left for a replay to reach. A record
	// change that keeps it (most are: migration steps, range flips) needs
	// no directory scan and no marker reads, which cost a resharding node
	// ~6% of its CPU when every step reconciled in full.
	placed string
}

// memTableSize is the write buffer of each of n replicas: its share of the
// node's budget, between 2 MiB and 32 MiB (where bulk loads stop gaining;
// see storage.PebbleOptions). Pebble reserves about 1.1 times it on disk
// for each write-ahead log, so a node of hundreds of replicas with 32 MiB
// each reserved tens of gigabytes for logs of a few bytes. A replica keeps
// the size it opened with until it opens again.
func memTableSize(budget int64, n int) uint64 {
	size := budget / int64(max(n, 1))
	return uint64(min(max(size, 2<<20), 32<<20))
}

// openParallel is how many replicas a reconcile opens at once: opening one
// is mostly file creation and syncs (~55 ms here), and a database of
// hundreds of shards opened one at a time took seconds.
const openParallel = 8

func newReplicaSet(dir, tag string, cache *pebble.Cache, docs *storage.DocCache, memtableBudget int64, transport replication.Transport, logger *slog.Logger) *replicaSet {
	return &replicaSet{dir: dir, tag: tag, cache: cache, docs: docs, memtableBudget: memtableBudget, transport: transport, logger: logger,
		stores: map[replicaKey]*storage.Store{}, reps: map[replicaKey]*replication.Replicator{}, agents: map[replicaKey]io.Closer{}, fences: map[replicaKey]*writeFence{}, purged: map[replicaKey]uint64{}, failed: map[replicaKey]string{}, changed: make(chan struct{})}
}

// fence returns the fence that client writes to a replica are inside from
// their ownership check until their commit, so a bucket's sender can wait
// out writes that passed the check before a flip.
func (rs *replicaSet) fence(db string, shard int) *writeFence {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	k := replicaKey{db, shard}
	f, ok := rs.fences[k]
	if !ok {
		f = &writeFence{}
		rs.fences[k] = f
	}
	return f
}

// notePurge records, before a purge writes anything, the raft index whose
// ownership flip it follows.
func (rs *replicaSet) notePurge(db string, shard int, index uint64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	k := replicaKey{db, shard}
	rs.purged[k] = max(rs.purged[k], index)
}

// checkView refuses a read routed with a record older than a flip whose
// purge began here: the router must see the new owner and ask it.
func (rs *replicaSet) checkView(db string, shard int, recordEtag uint64) error {
	rs.mu.RLock()
	floor := rs.purged[replicaKey{db, shard}]
	rs.mu.RUnlock()
	if recordEtag != 0 && recordEtag < floor {
		return errStaleRecord("shard %d moved buckets away at raft index %d; the request was routed with record %d", shard, floor, recordEtag)
	}
	return nil
}

// errStaleRecord refuses a read routed with a record older than what the
// replica knows of its shard's buckets: the router reads again once it has
// the newer record.
func errStaleRecord(format string, args ...any) error {
	return &apiError{Status: http.StatusConflict, Type: "StaleRecord", Msg: fmt.Sprintf(format, args...)}
}

// forEachAgent calls fn for what runs beside each open replica (see
// newAgent), under the set's read lock: fn must not block.
func (rs *replicaSet) forEachAgent(fn func(k replicaKey, a io.Closer)) {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	for k, a := range rs.agents {
		fn(k, a)
	}
}

// agentOf returns the resharding agent of this node's replica of db's
// shard, or nil.
func (rs *replicaSet) agentOf(db string, shard int) *resharding.Agent {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	if ac, ok := rs.agents[replicaKey{db, shard}].(agentCloser); ok {
		return ac.a
	}
	return nil
}

// getWithReplicator returns the local replica and its replicator.
func (rs *replicaSet) getWithReplicator(db string, shard int) (*storage.Store, *replication.Replicator, bool) {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	k := replicaKey{db, shard}
	s, ok := rs.stores[k]
	return s, rs.reps[k], ok
}

// detached is a replica taken out of the set, closed once rs.mu is
// released: closing a store waits for the reads in flight on it, and a
// read can need rs.mu (checkView), so closing under the lock deadlocks.
type detached struct {
	agent io.Closer
	rep   *replication.Replicator
	store *storage.Store
}

// detach takes replica k out of the set; rs.mu is held. New requests for
// it find no open replica from here on.
func (rs *replicaSet) detach(k replicaKey) detached {
	d := detached{agent: rs.agents[k], rep: rs.reps[k], store: rs.stores[k]}
	delete(rs.agents, k)
	delete(rs.reps, k)
	delete(rs.stores, k)
	return d
}

// close stops the replica's resharding agent and replication, then closes
// its store; rs.mu must not be held.
func (d detached) close() error {
	if d.agent != nil {
		_ = d.agent.Close()
	}
	if d.rep != nil {
		d.rep.Close()
	}
	if d.store == nil {
		return nil
	}
	return d.store.Close()
}

// peersOf lists the other members of a shard.
func (rs *replicaSet) peersOf(members []string) []string {
	var out []string
	for _, m := range members {
		if m != rs.tag {
			out = append(out, m)
		}
	}
	return out
}

func (rs *replicaSet) shardDir(db string, shard int) string {
	return filepath.Join(rs.dir, db, "shard-"+strconv.Itoa(shard))
}

// markerName holds the raft index that created the database, so a replica
// left behind by a deleted database is never mistaken for a new one with
// the same name.
const markerName = "record-created-index"

// placement describes what of records decides which replicas this node
// holds and where their peers are: each database's name and creation
// index, and each shard's members.
func placement(records []*raftfsm.DatabaseRecord) string {
	var b strings.Builder
	for _, r := range records {
		b.WriteString(r.DatabaseName)
		b.WriteByte('@')
		b.WriteString(strconv.FormatUint(r.CreatedIndex, 10))
		shards := slices.Sorted(maps.Keys(r.Sharding.Shards))
		for _, n := range shards {
			b.WriteByte(' ')
			b.WriteString(strconv.Itoa(n))
			b.WriteByte(':')
			b.WriteString(strings.Join(r.Sharding.Shards[n].Members, ","))
		}
		b.WriteByte(';')
	}
	return b.String()
}

// reconcile makes the open replicas match records (the state at index).
func (rs *replicaSet) reconcile(index uint64, records []*raftfsm.DatabaseRecord) error {
	placed := placement(records)
	rs.mu.Lock()
	if placed == rs.placed && len(rs.failed) == 0 {
		rs.settled = max(rs.settled, index)
		rs.reconciled = index
		close(rs.changed)
		rs.changed = make(chan struct{})
		rs.mu.Unlock()
		return nil
	}
	rs.placed = ""
	rs.mu.Unlock()
	complete := true // nothing left for a later index
	want := map[replicaKey]*raftfsm.DatabaseRecord{}
	for _, r := range records {
		for n, t := range r.Sharding.Shards {
			if slices.Contains(t.Members, rs.tag) {
				want[replicaKey{r.DatabaseName, n}] = r
			}
		}
	}
	var errs []error
	rs.mu.Lock()
	gone := map[replicaKey]detached{}
	for k := range rs.stores {
		if _, ok := want[k]; !ok {
			gone[k] = rs.detach(k)
		}
	}
	rs.mu.Unlock()
	for k, d := range gone {
		if err := d.close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s$%d: %w", k.db, k.shard, err))
		}
		if err := os.RemoveAll(rs.shardDir(k.db, k.shard)); err != nil {
			errs = append(errs, err)
		}
		rs.logger.Debug("dropped shard replica", "db", k.db, "shard", k.shard)
	}
	logByDB(rs.logger, "dropped shard replicas", gone)
	// Remove what no record asks for (databases deleted while we were down).
	// A directory created at a raft index beyond the one being reconciled
	// belongs to the future of a log still replaying: keep it.
	byDB := map[string]*raftfsm.DatabaseRecord{}
	for _, r := range records {
		byDB[r.DatabaseName] = r
	}
	entries, _ := os.ReadDir(rs.dir)
	for _, e := range entries {
		created, ok := rs.readMarker(e.Name())
		if ok && created > index {
			complete = false
			continue
		}
		r, ok := byDB[e.Name()]
		if !ok || r.CreatedIndex != created {
			var stale []detached
			rs.mu.Lock()
			for k := range rs.stores {
				if k.db == e.Name() {
					stale = append(stale, rs.detach(k))
				}
			}
			rs.mu.Unlock()
			for _, d := range stale {
				_ = d.close()
			}
			if err := os.RemoveAll(filepath.Join(rs.dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	var open []replicaKey
	marked := map[string]error{}
	for k, r := range want {
		if _, rep, ok := rs.getWithReplicator(k.db, k.shard); ok {
			rep.SetPeers(rs.peersOf(r.Sharding.Shards[k.shard].Members))
			continue
		}
		if created, ok := rs.readMarker(k.db); ok && created > index {
			complete = false
			continue // a later incarnation's data: the replay will get there
		}
		err, done := marked[k.db]
		if !done {
			err = rs.writeMarker(r)
			marked[k.db] = err
			if err != nil {
				errs = append(errs, err)
			}
		}
		if err == nil {
			open = append(open, k)
		}
	}
	rs.mu.Lock()
	for k := range rs.failed {
		if _, ok := want[k]; !ok {
			delete(rs.failed, k) // no longer wanted: nothing to open
		}
	}
	rs.settled = max(rs.settled, index)
	close(rs.changed)
	rs.changed = make(chan struct{})
	rs.mu.Unlock()

	var emu sync.Mutex // guards errs and opened
	opened := map[replicaKey]bool{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, openParallel)
	for _, k := range open {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := rs.open(k, want[k], memTableSize(rs.memtableBudget, len(want)))
			rs.mu.Lock()
			if err != nil {
				rs.failed[k] = err.Error()
			} else {
				delete(rs.failed, k)
			}
			rs.mu.Unlock()
			emu.Lock()
			defer emu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("open %s$%d: %w", k.db, k.shard, err))
			} else {
				opened[k] = true
			}
		}()
	}
	wg.Wait()
	logByDB(rs.logger, "opened shard replicas", opened)
	rs.mu.Lock()
	rs.reconciled = index
	if complete && len(errs) == 0 && len(rs.failed) == 0 {
		rs.placed = placed
	}
	close(rs.changed)
	rs.changed = make(chan struct{})
	rs.mu.Unlock()
	return errors.Join(errs...)
}

// open opens the replica k of record r, with a write buffer of memTable
// bytes, and starts its replicator and resharding agent.
func (rs *replicaSet) open(k replicaKey, r *raftfsm.DatabaseRecord, memTable uint64) error {
	s, err := storage.Open(storage.Options{Dir: rs.shardDir(k.db, k.shard), NodeTag: rs.tag, Cache: rs.cache, DocCache: rs.docs, Compactions: rs.compactions, MemTableSize: memTable, Logger: rs.logger})
	if err != nil {
		return err
	}
	rep := replication.New(s, k.db, k.shard, rs.transport, rs.logger)
	rep.SetPeers(rs.peersOf(r.Sharding.Shards[k.shard].Members))
	rs.mu.Lock()
	rs.stores[k] = s
	rs.reps[k] = rep
	// The purge floor lives in memory: after a restart, start it at the
	// record this replica opened with, so a router holding an older
	// record (which may predate a purge done before the restart)
	// refreshes before reading here.
	rs.purged[k] = max(rs.purged[k], r.Etag)
	rs.mu.Unlock()
	if rs.newAgent != nil {
		ag := rs.newAgent(k.db, k.shard, s)
		rs.mu.Lock()
		rs.agents[k] = ag
		rs.mu.Unlock()
	}
	rs.logger.Debug("opened shard replica", "db", k.db, "shard", k.shard, "database_id", s.DatabaseID())
	return nil
}

// logByDB logs msg once per database of keys, with its shards: a database
// of a thousand shards took a thousand lines.
func logByDB[V any](logger *slog.Logger, msg string, keys map[replicaKey]V) {
	byDB := map[string][]int{}
	for k := range keys {
		byDB[k.db] = append(byDB[k.db], k.shard)
	}
	for db, shards := range byDB {
		slices.Sort(shards)
		logger.Info(msg, "db", db, "count", len(shards), "shards", shardList(shards))
	}
}

// shardList writes sorted shard numbers as ranges: "0-3,7".
func shardList(shards []int) string {
	var b strings.Builder
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(shards[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(shards[j]))
		}
		i = j + 1
	}
	return b.String()
}

// readMarker returns the creation index recorded in db's directory.
func (rs *replicaSet) readMarker(db string) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(rs.dir, db, markerName))
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

func (rs *replicaSet) markerMatches(r *raftfsm.DatabaseRecord) bool {
	v, ok := rs.readMarker(r.DatabaseName)
	return ok && v == r.CreatedIndex
}

func (rs *replicaSet) writeMarker(r *raftfsm.DatabaseRecord) error {
	if rs.markerMatches(r) {
		return nil
	}
	dir := filepath.Join(rs.dir, r.DatabaseName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("database dir %s: %w", dir, err)
	}
	tmp := filepath.Join(dir, markerName+".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(r.CreatedIndex, 10)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, markerName))
}

// openReplica is one open replica of this node, for /metrics and the
// clean stop's drain.
type openReplica struct {
	key   replicaKey
	store *storage.Store
	rep   *replication.Replicator // nil: a shard of one replica
}

// local lists the open replicas.
func (rs *replicaSet) local() []openReplica {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	out := make([]openReplica, 0, len(rs.stores))
	for k, s := range rs.stores {
		out = append(out, openReplica{key: k, store: s, rep: rs.reps[k]})
	}
	return out
}

// failures returns how many wanted replicas failed to open at the last
// attempt, and one of the errors.
func (rs *replicaSet) failures() (int, string) {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	last := ""
	for k, e := range rs.failed {
		last = fmt.Sprintf("%s$%d: %s", k.db, k.shard, e)
		break
	}
	return len(rs.failed), last
}

// openError is why replica db$shard failed to open, if it did.
func (rs *replicaSet) openError(db string, shard int) string {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	return rs.failed[replicaKey{db, shard}]
}

// waitSettled blocks until the set's removals and peer changes reached at
// least index (replicas that index adds may still be opening).
func (rs *replicaSet) waitSettled(ctx context.Context, index uint64) error {
	return rs.wait(ctx, index, true)
}

// waitFor blocks until the set reconciled to at least index.
func (rs *replicaSet) waitFor(ctx context.Context, index uint64) error {
	return rs.wait(ctx, index, false)
}

func (rs *replicaSet) wait(ctx context.Context, index uint64, settledEnough bool) error {
	for {
		rs.mu.RLock()
		// settled moves first, to the same indexes as reconciled.
		done := rs.reconciled >= index
		if settledEnough {
			done = rs.settled >= index
		}
		ch := rs.changed
		rs.mu.RUnlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for local replicas at raft index %d: %w", index, ctx.Err())
		}
	}
}

func (rs *replicaSet) closeAll() error {
	rs.mu.Lock()
	all := map[replicaKey]detached{}
	for k := range rs.stores {
		all[k] = rs.detach(k)
	}
	rs.placed = "" // what was open is not any more
	rs.mu.Unlock()
	var errs []error
	for k, d := range all {
		if err := d.close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s$%d: %w", k.db, k.shard, err))
		}
	}
	return errors.Join(errs...)
}
