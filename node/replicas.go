package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	dir    string
	tag    string
	cache  *pebble.Cache
	docs   *storage.DocCache // nil: no document cache
	logger *slog.Logger

	transport replication.Transport
	// newAgent starts the resharding agent of a newly opened replica.
	newAgent func(db string, shard int, s *storage.Store) io.Closer

	mu         sync.RWMutex
	stores     map[replicaKey]*storage.Store
	reps       map[replicaKey]*replication.Replicator
	agents     map[replicaKey]io.Closer
	fences     map[replicaKey]*writeFence
	purged     map[replicaKey]uint64 // highest ConfirmationIndex whose purge began
	reconciled uint64                // raft index the set last reconciled to
	changed    chan struct{}         // closed and replaced at each reconcile
}

func newReplicaSet(dir, tag string, cache *pebble.Cache, docs *storage.DocCache, transport replication.Transport, logger *slog.Logger) *replicaSet {
	return &replicaSet{dir: dir, tag: tag, cache: cache, docs: docs, transport: transport, logger: logger,
		stores: map[replicaKey]*storage.Store{}, reps: map[replicaKey]*replication.Replicator{}, agents: map[replicaKey]io.Closer{}, fences: map[replicaKey]*writeFence{}, purged: map[replicaKey]uint64{}, changed: make(chan struct{})}
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
		return &apiError{Status: http.StatusConflict, Type: "StaleRecord",
			Msg: fmt.Sprintf("shard %d moved buckets away at raft index %d; the request was routed with record %d", shard, floor, recordEtag)}
	}
	return nil
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

// reconcile makes the open replicas match records (the state at index).
func (rs *replicaSet) reconcile(index uint64, records []*raftfsm.DatabaseRecord) error {
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
		rs.logger.Info("dropped shard replica", "db", k.db, "shard", k.shard)
	}
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
	for k, r := range want {
		if _, rep, ok := rs.getWithReplicator(k.db, k.shard); ok {
			rep.SetPeers(rs.peersOf(r.Sharding.Shards[k.shard].Members))
			continue
		}
		if created, ok := rs.readMarker(k.db); ok && created > index {
			continue // a later incarnation's data: the replay will get there
		}
		if err := rs.writeMarker(r); err != nil {
			errs = append(errs, err)
			continue
		}
		s, err := storage.Open(storage.Options{Dir: rs.shardDir(k.db, k.shard), NodeTag: rs.tag, Cache: rs.cache, DocCache: rs.docs, Logger: rs.logger})
		if err != nil {
			errs = append(errs, err)
			continue
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
		rs.logger.Info("opened shard replica", "db", k.db, "shard", k.shard, "database_id", s.DatabaseID())
	}
	rs.mu.Lock()
	rs.reconciled = index
	close(rs.changed)
	rs.changed = make(chan struct{})
	rs.mu.Unlock()
	return errors.Join(errs...)
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

// waitFor blocks until the set reconciled to at least index.
func (rs *replicaSet) waitFor(ctx context.Context, index uint64) error {
	for {
		rs.mu.RLock()
		done, ch := rs.reconciled >= index, rs.changed
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
	rs.mu.Unlock()
	var errs []error
	for k, d := range all {
		if err := d.close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s$%d: %w", k.db, k.shard, err))
		}
	}
	return errors.Join(errs...)
}
