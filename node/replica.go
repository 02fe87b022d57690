package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/document"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/replication"
	"github.com/shardnode/shardnode/resharding"
	"github.com/shardnode/shardnode/rql"
	"github.com/shardnode/shardnode/storage"
)

// shardReplica is one replica of a shard as the API uses it: on this node,
// or on another node reached over the bus. Both behave the same, so a
// handler never knows where its shard lives.
type shardReplica interface {
	node() string
	get(ctx context.Context, ids []string, recordEtag uint64) ([]*storage.Document, error)
	// write applies client writes. routed is the etag of the record the
	// router chose this shard by: a replica whose own record is older
	// trusts it (see guardWrites).
	write(ctx context.Context, ops []storage.Op, wc writeConcern, routed uint64) ([]storage.Result, error)
	query(ctx context.Context, q queryArgs) (queryAnswer, error)
	// list returns the replica's first candidates of a document listing
	// (see api_list.go).
	list(ctx context.Context, a listArgs) ([]listKey, error)
	stats(ctx context.Context) (replicaStats, error)
	bucket(ctx context.Context, b uint32, maxIDs int) (bucketInfo, error)
	rangeStats(ctx context.Context, from, to uint32) ([]storage.BucketStats, error)
	// itemVersions returns the change vector of each of ids the replica
	// holds, tombstones included (artificial ones are not held).
	itemVersions(ctx context.Context, ids []string) (map[string]string, error)
	conflicts(ctx context.Context, limit int) ([]storage.Conflict, error)
	// migrate stores a migration batch; a remote replica sends it as
	// encoded, once for all the replicas it goes to.
	migrate(ctx context.Context, b *resharding.Batch, encoded func() ([][]byte, error)) error
}

// queryArgs is a query as sent to one shard.
type queryArgs struct {
	Query  string         `json:"Query"`
	Params map[string]any `json:"Params,omitempty"`
	// Owners, when set, limits results to the buckets these ranges give to
	// the shard: the router's view of ownership, the same for every shard
	// it asks, so a document on two shards during a move counts once.
	Owners bucket.Ranges `json:"Owners,omitempty"`
	// RecordEtag is the etag of the record Owners came from.
	RecordEtag uint64 `json:"RecordEtag,omitempty"`
	// Keep, when above 0, asks for only the first Keep matches in the
	// query's order (its offset plus its limit): no shard's part of a page
	// lies beyond them. Below 0 it asks for none, only the count (limit 0);
	// a node that predates that sends every match, and the router cuts.
	Keep int `json:"Keep,omitempty"`
}

// queryAnswer is one shard's part of a query's answer: its matches, or
// the first Keep of them in the query's order, and how many it has in all.
type queryAnswer struct {
	Docs  []*storage.Document
	Total int
}

// wireQueryAnswer is a queryAnswer on the bus (op shard.query.top).
type wireQueryAnswer struct {
	Docs  []*wireDoc `json:"Docs"`
	Total int        `json:"Total"`
}

// replicaStats are one replica's figures.
type replicaStats struct {
	storage.Stats
	DatabaseID  string                   `json:"DatabaseId"`
	Node        string                   `json:"Node"`
	Replication []replication.PeerStatus `json:"Replication"`
}

// bucketInfo is one bucket on one replica.
type bucketInfo struct {
	Stats storage.BucketStats `json:"Stats"`
	IDs   []string            `json:"Ids"`
}

// localReplica serves a replica held by this node.
type localReplica struct {
	n     *Node
	db    string
	shard int
	s     *storage.Store
	rep   *replication.Replicator
	// routed marks a replica reached by a request routed through the
	// database (not "{db}${n}"): its client reads and writes are refused
	// while it catches up with its peers (see catchUps).
	routed bool
}

// servesClients refuses a routed client request while this node is
// starting (its replicas may not follow the current records yet) or the
// replica catches up with its peers.
func (l *localReplica) servesClients() error {
	if l.routed && (!l.n.ready.Load() || l.n.catchUps.isBehind(l.db, l.shard)) {
		return errCatchingUp(l.n, l.db, l.shard)
	}
	return nil
}

// servesReads is servesClients for a routed read, which a node that
// could not confirm lately that it follows the cluster does not answer at
// once. Requests that queued while the node stood still (a SIGSTOP, a
// long pause) run the moment it resumes, before its freshness loop found
// out and marked its replicas behind, and would see none of the writes
// the other members took meanwhile. Such a read waits for the node's next
// confirmation (which marks the replicas behind first, and then the
// router asks another member), at most routedFreshWait; past that (a node
// cut off from the leader, or an election) it is served from what the
// replica holds, as before.
//
// A node that stops cleanly refuses routed reads (retryable) once its
// drain ended: from then on the other members take the shard's writes.
func (l *localReplica) servesReads(ctx context.Context) error {
	if err := l.servesClients(); err != nil {
		return err
	}
	if l.routed && l.n.drainedAway() {
		return l.n.errStopping(l.db, l.shard)
	}
	if l.routed && !l.n.fresh.fresh() {
		l.n.fresh.wait(ctx, routedFreshWait)
		return l.servesClients()
	}
	return nil
}

func (l *localReplica) node() string { return l.n.cfg.Node.Tag }

func (l *localReplica) get(ctx context.Context, ids []string, recordEtag uint64) ([]*storage.Document, error) {
	if err := l.servesReads(ctx); err != nil {
		return nil, err
	}
	if l.routed {
		// Routed by a newer record that could decide the read (a flip to
		// this shard not applied here yet): read by it, as writes do.
		if rec := l.n.recordOf(l.db); rec != nil && recordEtag > rec.Etag && recordDecides(rec, l.shard, ids, readID) {
			if err := l.n.waitRecord(ctx, l.db, recordEtag, maxRecordWait); err != nil {
				return nil, err
			}
		}
		// A bucket arriving here may still lack writes its source
		// acknowledged before it applied the flip: read it once the
		// source's last pass is in, as writes wait for it.
		l.n.waitFlipSettled(ctx, l.db, func(rec *raftfsm.DatabaseRecord) bool {
			_, ok := flipUnsettled(rec, l.shard, ids, readID, l)
			return ok
		})
	}
	out := make([]*storage.Document, len(ids))
	// Read, then check the purge floor: a purge raises the floor before it
	// writes, so a read that the check lets through came before the purge.
	for i, id := range ids {
		d, err := l.s.Get(id)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	if err := l.n.replicas.checkView(l.db, l.shard, recordEtag); err != nil {
		return nil, err
	}
	if l.routed && recordEtag != 0 {
		// Routed by a record older than this node's, which no longer gives
		// the bucket to this shard: the new owner may hold writes acknowledged
		// since the flip (it takes them once the last pass is in), which this
		// replica would not show. The router reads again with its newer
		// record (an explorer read a value older than its own acknowledged
		// write so, through a node that had not applied a flip yet).
		if rec := l.n.recordOf(l.db); rec != nil && rec.Etag > recordEtag {
			for _, id := range ids {
				if owner := rec.ShardOf(bucket.ForID(id)); owner != l.shard {
					return nil, errStaleRecord("shard %d no longer owns the bucket of %q (shard %d does, record etag %d); the read was routed with record %d", l.shard, id, owner, rec.Etag, recordEtag)
				}
			}
		}
	}
	return out, nil
}

func (l *localReplica) write(ctx context.Context, ops []storage.Op, wc writeConcern, routed uint64) ([]storage.Result, error) {
	if err := l.servesClients(); err != nil {
		return nil, l.handOff(ctx, err)
	}
	if l.routed && !l.n.fresh.fresh() {
		// This node has not confirmed lately that it follows the cluster:
		// a leader election (writes pause for it anyway), or this node
		// stood still or was cut off, and the router may have given up on
		// this write long ago (a 504) while other members took newer ones.
		// Wait a moment for the next confirmation: coming back from a
		// stall, the node marks its replicas behind before it confirms,
		// and the check below then refuses.
		if !l.n.fresh.wait(ctx, routedFreshWait) {
			// The router sends the write to another member, which may
			// take it: this replica is behind from now on, and serves
			// again only after its node confirmed it follows the cluster
			// and it caught up (see refusedWhileStale).
			l.n.refusedWhileStale(l.db, l.shard)
			return nil, l.handOff(ctx, errCatchingUp(l.n, l.db, l.shard))
		}
		if err := l.servesClients(); err != nil {
			return nil, l.handOff(ctx, err)
		}
	}
	if l.routed && routed > 0 {
		// The router chose this shard by a record newer than this node's
		// (typically a flip this node has not applied yet): decide by that
		// record, once applied here. With a barrier after each flip,
		// followers apply within milliseconds.
		if rec := l.n.recordOf(l.db); rec != nil && routed > rec.Etag && recordDecides(rec, l.shard, ops, opID) {
			if err := l.n.waitRecord(ctx, l.db, routed, maxRecordWait); err != nil {
				return nil, err
			}
		}
	}
	res, last, err := l.commit(ctx, ops, routed, (*passQueued)(l))
	if errors.Is(err, storage.ErrNotCovered) {
		// The last pass it was let in behind did not get in first after
		// all (a pass sent in parts, or failed): wait for it as reads do.
		res, last, err = l.commit(ctx, ops, routed, l)
	}
	if err != nil || wc.Replicas <= 1 {
		return res, err
	}
	if last == 0 {
		return res, nil // nothing changed: nothing to wait for
	}
	wctx, cancel := context.WithTimeout(ctx, wc.Timeout)
	defer cancel()
	changes := make([]replication.Written, 0, len(res))
	for _, r := range res {
		if r.Etag == 0 {
			continue
		}
		cv, err := changevector.Parse(r.ChangeVector)
		if err != nil {
			return nil, fmt.Errorf("change vector of %q: %w", r.ID, err)
		}
		changes = append(changes, replication.Written{Etag: r.Etag, ID: r.ID, Version: cv.Version})
	}
	if have, err := l.rep.WaitReplicas(wctx, changes, wc.Replicas); err != nil {
		if errors.Is(err, replication.ErrSuperseded) {
			// Not a success: the documents hold the winner now (before,
			// the peer's ack counted and both concurrent writes were
			// acknowledged, with waitForReplicas=2 too). Not a failure
			// either: a later write on this side, taken on top of this
			// one before the side learned of the loss, may still win and
			// carry it (seen: an If-Match increment answered 409 here
			// that the counter ended up holding). So the outcome is
			// unknown, as for a timeout.
			return nil, &apiError{Status: http.StatusGatewayTimeout, Type: "ConcurrentWriteWon",
				Msg: fmt.Sprintf("the write is durable on node %s, but %v; the documents hold the winner for now, and this write is in /databases/%s/conflicts, but a later write taken on top of it may still win and carry it: it may or may not have been applied", l.node(), err, l.db)}
		}
		return nil, &apiError{Status: http.StatusGatewayTimeout, Type: "ReplicationTimeout",
			Msg: fmt.Sprintf("the write is durable on node %s but only %d of the %d replicas asked for (waitForReplicas) held it within %v", l.node(), have, wc.Replicas, wc.Timeout)}
	}
	return res, nil
}

// commit takes a write, once decided here, into the store: a routed
// write into a bucket arriving here waits for the source's last pass as
// held counts it in (see flipUnsettled), then is checked inside the
// replica's fence and written. It returns the highest etag written.
func (l *localReplica) commit(ctx context.Context, ops []storage.Op, routed uint64, held passHolder) ([]storage.Result, uint64, error) {
	if l.routed {
		waited := l.n.waitFlipSettled(ctx, l.db, func(rec *raftfsm.DatabaseRecord) bool {
			_, ok := flipUnsettled(rec, l.shard, ops, opID, held)
			return ok
		})
		if waited > 0 {
			if rec := l.n.recordOf(l.db); rec != nil {
				l.n.holds.record(l.db, rec.CreatedIndex, waited)
			}
		}
	}
	fence := l.n.replicas.fence(l.db, l.shard)
	g := fence.enter()
	if l.n.draining.Load() { // checked inside the fence: the drain waits for writes that passed
		fence.exit(g)
		return nil, 0, l.n.refuseWhileStopping(ctx, l.db, l.shard)
	}
	if l.routed {
		// Checked again right before the write: it may have waited above
		// (for a confirmation, the router's record, a last pass) while
		// this replica was found behind its peers, or its node stopped
		// confirming that it follows the cluster, and routers sent the
		// shard's other writes to another member meanwhile. Taken now, it
		// would be based on versions that member has replaced (an
		// explorer: If-Match increments acknowledged twice after a raft
		// leader was killed). Not waited for here: a sender's fence
		// waits for the writes inside.
		if err := l.servesClients(); err != nil {
			fence.exit(g)
			return nil, 0, l.handOff(ctx, err)
		}
		if !l.n.fresh.fresh() {
			fence.exit(g)
			l.n.refusedWhileStale(l.db, l.shard)
			return nil, 0, l.handOff(ctx, errCatchingUp(l.n, l.db, l.shard))
		}
		// Checked inside the fence too: a hand-over waits for the writes
		// that passed, and answers an etag that covers them.
		if err := l.n.handingOver(l.db, l.shard); err != nil {
			fence.exit(g)
			return nil, 0, err
		}
		// And as the fence of a bucket's sender asked (see
		// FenceSourceReplicas): it answers once the writes that passed
		// have committed.
		if err := l.n.sourceFences.refuse(l.db, l.shard, ops, func() *raftfsm.DatabaseRecord { return l.n.recordOf(l.db) }); err != nil {
			fence.exit(g)
			return nil, 0, err
		}
		// And as the resharding driver asked before flipping empty
		// buckets in bulk (see opSpanLease).
		if err := l.n.spanLeases.refuse(l.db, l.shard, ops, func() *raftfsm.DatabaseRecord { return l.n.recordOf(l.db) }); err != nil {
			fence.exit(g)
			return nil, 0, err
		}
	}
	covers, err := l.n.guardWrites(l.db, l.shard, ops, routed, held)
	if err != nil {
		fence.exit(g)
		return nil, 0, err
	}
	res, err := l.s.WriteCovered(ctx, covers, ops)
	var last uint64
	for _, r := range res {
		last = max(last, r.Etag)
	}
	if err == nil && last > 0 && l.rep != nil {
		l.rep.Wrote(last) // before the fence lets a hand-off look
	}
	fence.exit(g)
	return res, last, err
}

// handOffWait bounds how long a replica that refuses a routed write waits
// for its peers to hold the client writes it took (see handOff).
const handOffWait = time.Second

// handOff returns err, a refusal after which the router sends the write to
// the shard's next member, once that member may take it: once every peer
// not known down holds each client write this replica took, those still
// committing included. Without this, a replica that lost its confirmation
// (a raft leader killed) or was found behind while a write of its own was
// committing refused the next write, and the other member took it before
// replication brought it that write: both took a write based on the same
// version, and both were acknowledged, with waitForReplicas=2 too (an
// explorer: If-Match increments acknowledged twice after leader kills).
// When the peers do not catch up within handOffWait, the write is refused
// with ShardPeersBehind, which the router does not pass on.
func (l *localReplica) handOff(ctx context.Context, err error) error {
	if l.rep == nil || !l.routed {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, handOffWait)
	defer cancel()
	why := "the writes it was committing did not finish"
	if l.n.replicas.fence(l.db, l.shard).wait(wctx) == nil {
		behind := l.rep.WaitWrites(wctx, l.n.health.knownDown)
		if len(behind) == 0 {
			return err
		}
		why = fmt.Sprintf("members %v do not hold every write it took", behind)
	}
	return &apiError{Status: http.StatusServiceUnavailable, Type: "ShardPeersBehind",
		Msg: fmt.Sprintf("shard %d of %q: the replica on node %s stopped taking writes (%v), and within %v %s; the write was not applied: retry shortly", l.shard, l.db, l.node(), err, handOffWait, why)}
}

func (l *localReplica) query(ctx context.Context, a queryArgs) (queryAnswer, error) {
	if err := l.servesReads(ctx); err != nil {
		return queryAnswer{}, err
	}
	q, err := rql.Parse(a.Query, a.Params)
	if err != nil {
		return queryAnswer{}, badRequest("%v", err)
	}
	if err := l.settleScan(ctx, a.Owners, a.RecordEtag); err != nil {
		return queryAnswer{}, err
	}
	top := newQueryTop(q, a.Keep)
	var derr error
	check := func() error { return l.n.replicas.checkView(l.db, l.shard, a.RecordEtag) }
	err = l.s.ScanChecked(check, func(d *storage.Document) bool {
		if !q.InCollection(d.Collection) {
			return true
		}
		if a.Owners != nil && a.Owners.ShardOf(d.Bucket) != l.shard {
			return true
		}
		m, err := docMap(d)
		if err != nil {
			derr = err
			return false
		}
		if q.Matches(m) {
			top.add(queryHit{doc: d, m: m, shard: l.shard})
		}
		return true
	})
	if err == nil {
		err = derr
	}
	if err == nil {
		err = l.ownersCurrent(a.Owners, a.RecordEtag)
	}
	if err != nil {
		return queryAnswer{}, err
	}
	return queryAnswer{Docs: top.docs(), Total: top.total}, nil
}

// settleScan readies a routed scan (a query, a listing) that keeps the
// buckets owners, the router's ranges from its record at recordEtag, give
// this shard. It waits until this node applied that record, then until
// the source's last pass is in for every such bucket arriving here, as
// point reads do: before it, the scan would miss writes the source
// acknowledged before it applied the flip, which the source no longer
// shows either (a query missed a create acknowledged just before a flip).
// Buckets flipped after the router's record are the source's in owners,
// so a stream of moves does not hold the scan. It fails only when ctx
// ends.
func (l *localReplica) settleScan(ctx context.Context, owners bucket.Ranges, recordEtag uint64) error {
	if !l.routed || owners == nil {
		return nil
	}
	if rec := l.n.recordOf(l.db); rec != nil && recordEtag > rec.Etag {
		// Only a bucket the router's record gives this shard and this
		// node's does not (a flip not applied here yet) is decided by the
		// newer record: for one both give it, this node's record shows
		// the move and whether its last pass is in. Waiting for every
		// newer record held scans behind each migration step a follower
		// had not heard committed yet (p99 82-88 ms in
		// TestQueriesSeeAcknowledgedCreatesDuringBackAndForthMoves).
		if _, gained := owners.Lost(rec.Sharding.BucketRanges, l.shard); gained {
			if err := l.n.waitRecord(ctx, l.db, recordEtag, maxRecordWait); err != nil {
				return err
			}
		}
	}
	l.n.waitFlipSettled(ctx, l.db, func(rec *raftfsm.DatabaseRecord) bool {
		for b := range rec.Sharding.BucketMigrations {
			if arriving(rec, l.shard, b, l) && owners.ShardOf(b) == l.shard {
				return true
			}
		}
		return false
	})
	return nil
}

// ownersCurrent checks, after a routed scan, that this node's record, when
// newer than the router's, still gives this shard every bucket owners
// (the router's ranges) do: past a flip the new owner takes the bucket's
// writes, which this replica would not show. The router then runs the
// scan again on the newer record (StaleRecord), as for point reads.
func (l *localReplica) ownersCurrent(owners bucket.Ranges, recordEtag uint64) error {
	if !l.routed || owners == nil || recordEtag == 0 {
		return nil
	}
	rec := l.n.recordOf(l.db)
	if rec == nil || rec.Etag <= recordEtag {
		return nil
	}
	if b, ok := owners.Lost(rec.Sharding.BucketRanges, l.shard); ok {
		return errStaleRecord("shard %d no longer owns bucket %d (shard %d does, record etag %d); the scan was routed with record %d", l.shard, b, rec.ShardOf(b), rec.Etag, recordEtag)
	}
	return nil
}

// docMap decodes a document for query evaluation.
func docMap(d *storage.Document) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(d.Body, &m); err != nil {
		// Writes refuse numbers beyond float64's range, but a document
		// stored before they did may hold one: it compares as ±Inf rather
		// than failing every query that reads it.
		if m, err = decodeLenient(d.Body); err != nil {
			return nil, fmt.Errorf("document %q: %w", d.ID, err)
		}
	}
	if m == nil {
		m = map[string]any{}
	}
	meta := map[string]any{"@id": d.ID, "@change-vector": d.ChangeVector,
		// As reads show it: fixed width, so string order is time order.
		"@last-modified": string(document.AppendTime(nil, d.LastModified))}
	if d.Collection != "" {
		meta["@collection"] = d.Collection // none: missing, so null in a query, as reads omit it
	}
	m["@metadata"] = meta
	return m, nil
}

// decodeLenient decodes a JSON object as json.Unmarshal does, except that a
// number beyond float64's range becomes ±Inf instead of an error.
func decodeLenient(body []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	var conv func(v any) any
	conv = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			f, _ := strconv.ParseFloat(string(x), 64) // ±Inf past the range
			return f
		case map[string]any:
			for k, e := range x {
				x[k] = conv(e)
			}
		case []any:
			for i, e := range x {
				x[i] = conv(e)
			}
		}
		return v
	}
	conv(m)
	return m, nil
}

func (l *localReplica) stats(context.Context) (replicaStats, error) {
	return replicaStats{Stats: l.s.Stats(), DatabaseID: l.s.DatabaseID(), Node: l.node(), Replication: l.rep.Status()}, nil
}

func (l *localReplica) bucket(_ context.Context, b uint32, maxIDs int) (bucketInfo, error) {
	st, err := l.s.BucketStats(b)
	if err != nil {
		return bucketInfo{}, err
	}
	info := bucketInfo{Stats: st, IDs: []string{}}
	if maxIDs <= 0 || st.DocumentsCount == 0 {
		return info, nil
	}
	err = l.s.IterateBucketsMeta(b, b, func(d *storage.Document) bool {
		if !d.Deleted() {
			info.IDs = append(info.IDs, d.ID)
		}
		return len(info.IDs) < maxIDs
	})
	return info, err
}

func (l *localReplica) rangeStats(_ context.Context, from, to uint32) ([]storage.BucketStats, error) {
	out := []storage.BucketStats{}
	err := l.s.RangeStats(from, to, func(st storage.BucketStats) error {
		out = append(out, st)
		return nil
	})
	return out, err
}

func (l *localReplica) itemVersions(_ context.Context, ids []string) (map[string]string, error) {
	if err := l.servesClients(); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		d, err := l.s.GetItem(id)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !d.Artificial() {
			out[id] = d.ChangeVector
		}
	}
	return out, nil
}

func (l *localReplica) conflicts(_ context.Context, limit int) ([]storage.Conflict, error) {
	return l.s.Conflicts(limit)
}

func (l *localReplica) migrate(ctx context.Context, b *resharding.Batch, _ func() ([][]byte, error)) error {
	note := func() {
		if err := l.n.noteLastPass(lastPassNotice{DB: b.DB, Shard: b.Shard, Bucket: b.Bucket, MigrationIndex: b.MigrationIndex, ChangeVector: b.LastPass}); err != nil {
			l.n.logger.Warn("last pass of a migration batch", "db", b.DB, "bucket", b.Bucket, "err", err)
		}
	}
	var queued func()
	if b.LastPass != "" {
		// The sender's last pass, queued for the store: the bucket's
		// writes may follow it into the queue (see passQueued), and
		// share its commit.
		queued = note
	}
	if err := resharding.ApplyBatch(ctx, l.s, b, queued); err != nil {
		return err
	}
	if b.LastPass != "" {
		// The end of the sender's last pass, stored: the bucket's
		// requests may come in (see lastPasses) without waiting for the
		// sender's next message, or for the record. The batch is stored
		// either way: a notice that does not parse only loses the head
		// start.
		note()
	}
	return nil
}

// busMessageSlack leaves room in a bus message for the request's headers.
const busMessageSlack = 4 << 10

// busDocumentSlack is what a message carrying one document needs beyond the
// document: headers and the batch's framing (id, change vector, fields).
const busDocumentSlack = 64 << 10

func (r *remoteReplica) migrate(ctx context.Context, b *resharding.Batch, encoded func() ([][]byte, error)) error {
	parts, err := encoded()
	if err != nil {
		return err
	}
	var headers map[string]string
	if b.LastPass != "" {
		headers = map[string]string{lastPassHeader: b.LastPass}
	}
	for _, data := range parts {
		if _, err := r.n.callRawWith(ctx, r.tag, "migration.batch", data, headers); err != nil {
			return err
		}
	}
	return nil
}

// migrationParts returns b's encoding for the bus, made at its first call
// and shared by the sends to every replica. An external NATS may allow
// less than a batch (1 MiB by default): the batch goes in parts. A failure
// fails the whole batch, which the sender sends again; items already
// stored are no-ops then.
func (n *Node) migrationParts(b *resharding.Batch) func() ([][]byte, error) {
	return sync.OnceValues(func() ([][]byte, error) { return encodeMigrationParts(b, n.bus.nc.MaxPayload()-busMessageSlack) })
}

// encodeMigrationParts encodes b as one message, or as several of at most
// limit bytes each (halving the items until they fit; a single item that
// does not fit goes alone), in item order.
func encodeMigrationParts(b *resharding.Batch, limit int64) ([][]byte, error) {
	data, err := b.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("encode migration batch: %w", err)
	}
	if int64(len(data)) <= limit || len(b.Items) <= 1 {
		return [][]byte{data}, nil
	}
	half := len(b.Items) / 2
	var parts [][]byte
	for _, items := range [][]replication.Item{b.Items[:half], b.Items[half:]} {
		part := *b
		part.Items = items
		p, err := encodeMigrationParts(&part, limit)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p...)
	}
	return parts, nil
}

// remoteReplica reaches a replica on another node over the bus.
type remoteReplica struct {
	n     *Node
	tag   string
	db    string
	shard int
}

// shardRequest is the envelope of every shard op sent to another node.
type shardRequest struct {
	DB          string        `json:"Db"`
	Shard       int           `json:"Shard"`
	IDs         []string      `json:"Ids,omitempty"`
	Ops         []wireOp      `json:"Ops,omitempty"`
	WaitFor     int           `json:"WaitFor,omitempty"`
	WaitTimeout time.Duration `json:"WaitTimeout,omitempty"`
	Query       *queryArgs    `json:"Query,omitempty"`
	Bucket      uint32        `json:"Bucket,omitempty"`
	From        uint32        `json:"From,omitempty"`
	To          uint32        `json:"To,omitempty"`
	Limit       int           `json:"Limit,omitempty"`
	RecordEtag  uint64        `json:"RecordEtag,omitempty"` // the router's record (reads refuse stale views, writes trust a newer one)
}

// wireDoc is a document on the bus: its body stays raw JSON.
type wireDoc struct {
	ID           string          `json:"Id"`
	Collection   string          `json:"Collection,omitempty"`
	ChangeVector string          `json:"ChangeVector"`
	LastModified time.Time       `json:"LastModified"`
	Etag         uint64          `json:"Etag"`
	Bucket       uint32          `json:"Bucket"`
	Flags        storage.Flags   `json:"Flags,omitempty"`
	Body         json.RawMessage `json:"Body,omitempty"`
}

func toWire(d *storage.Document) *wireDoc {
	if d == nil {
		return nil
	}
	return &wireDoc{d.ID, d.Collection, d.ChangeVector, d.LastModified, d.Etag, d.Bucket, d.Flags, d.Body}
}

// wireDocs converts a replica's answer for the bus.
func wireDocs(docs []*storage.Document, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return toWireDocs(docs), nil
}

func toWireDocs(docs []*storage.Document) []*wireDoc {
	out := make([]*wireDoc, len(docs))
	for i, d := range docs {
		out[i] = toWire(d)
	}
	return out
}

func fromWireDocs(docs []*wireDoc) []*storage.Document {
	out := make([]*storage.Document, len(docs))
	for i, d := range docs {
		out[i] = fromWire(d)
	}
	return out
}

func fromWire(w *wireDoc) *storage.Document {
	if w == nil {
		return nil
	}
	return &storage.Document{ID: w.ID, Collection: w.Collection, ChangeVector: w.ChangeVector, LastModified: w.LastModified, Etag: w.Etag, Bucket: w.Bucket, Flags: w.Flags, Body: w.Body}
}

// wireOp is a client write on the bus.
type wireOp struct {
	Kind       storage.OpKind  `json:"Kind"`
	ID         string          `json:"Id"`
	Collection string          `json:"Collection,omitempty"`
	Body       json.RawMessage `json:"Body,omitempty"`
	IfMatch    string          `json:"IfMatch,omitempty"`
}

func (r *remoteReplica) node() string { return r.tag }

func (r *remoteReplica) get(ctx context.Context, ids []string, recordEtag uint64) ([]*storage.Document, error) {
	var docs []*wireDoc
	if err := r.n.call(ctx, r.tag, "shard.get", shardRequest{DB: r.db, Shard: r.shard, IDs: ids, RecordEtag: recordEtag}, &docs); err != nil {
		return nil, err
	}
	return fromWireDocs(docs), nil
}

func (r *remoteReplica) write(ctx context.Context, ops []storage.Op, wc writeConcern, routed uint64) ([]storage.Result, error) {
	req := writeRequest{DB: r.db, Shard: r.shard, WaitFor: wc.Replicas, WaitTimeout: wc.Timeout, RecordEtag: routed, Ops: ops}
	data := appendWriteRequest(make([]byte, 0, writeRequestLen(req)), req)
	raw, err := r.n.callOnce(ctx, r.tag, data)
	if isUnknownOp(err) {
		// A node of an earlier version, during a rolling upgrade: it
		// refused the op without running anything, and takes the
		// write in one copy.
		raw, err = r.n.callRaw(ctx, r.tag, opShardWriteBin, data)
	}
	if isUnknownOp(err) {
		// A node of an earlier version, during a rolling upgrade: it
		// refused the op without running anything.
		w := make([]wireOp, len(ops))
		for i, op := range ops {
			w[i] = wireOp{op.Kind, op.ID, op.Collection, op.Body, wireIfMatch(op)}
		}
		var res []storage.Result
		err := r.n.call(ctx, r.tag, "shard.write", shardRequest{DB: r.db, Shard: r.shard, Ops: w, WaitFor: wc.Replicas, WaitTimeout: wc.Timeout, RecordEtag: routed}, &res)
		return res, err
	}
	if err != nil {
		return nil, err
	}
	var res []storage.Result
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("decode %s reply from %s: %w", opShardWriteBin, r.tag, err)
	}
	return res, nil
}

// query asks with shard.query.top when only the first matches are wanted;
// a node that predates it answers shard.query with every match, which the
// router cuts as it always did.
func (r *remoteReplica) query(ctx context.Context, a queryArgs) (queryAnswer, error) {
	req := shardRequest{DB: r.db, Shard: r.shard, Query: &a}
	if a.Keep != 0 {
		var w wireQueryAnswer
		err := r.n.call(ctx, r.tag, opShardQueryTop, req, &w)
		if err == nil {
			return queryAnswer{Docs: fromWireDocs(w.Docs), Total: w.Total}, nil
		}
		if !isUnknownOp(err) {
			return queryAnswer{}, err
		}
	}
	var docs []*wireDoc
	if err := r.n.call(ctx, r.tag, "shard.query", req, &docs); err != nil {
		return queryAnswer{}, err
	}
	return queryAnswer{Docs: fromWireDocs(docs), Total: len(docs)}, nil
}

// opShardQueryTop is a query's part for one shard that answers only the
// first matches (queryArgs.Keep) and the count of all.
const opShardQueryTop = "shard.query.top"

func (r *remoteReplica) stats(ctx context.Context) (replicaStats, error) {
	var st replicaStats
	err := r.n.call(ctx, r.tag, "shard.stats", shardRequest{DB: r.db, Shard: r.shard}, &st)
	return st, err
}

func (r *remoteReplica) bucket(ctx context.Context, b uint32, maxIDs int) (bucketInfo, error) {
	var info bucketInfo
	err := r.n.call(ctx, r.tag, "shard.bucket", shardRequest{DB: r.db, Shard: r.shard, Bucket: b, Limit: maxIDs}, &info)
	return info, err
}

func (r *remoteReplica) rangeStats(ctx context.Context, from, to uint32) ([]storage.BucketStats, error) {
	var out []storage.BucketStats
	err := r.n.call(ctx, r.tag, "shard.range-stats", shardRequest{DB: r.db, Shard: r.shard, From: from, To: to}, &out)
	return out, err
}

func (r *remoteReplica) itemVersions(ctx context.Context, ids []string) (map[string]string, error) {
	var out map[string]string
	err := r.n.call(ctx, r.tag, "shard.item-versions", shardRequest{DB: r.db, Shard: r.shard, IDs: ids}, &out)
	return out, err
}

func (r *remoteReplica) conflicts(ctx context.Context, limit int) ([]storage.Conflict, error) {
	var out []storage.Conflict
	err := r.n.call(ctx, r.tag, "shard.conflicts", shardRequest{DB: r.db, Shard: r.shard, Limit: limit}, &out)
	return out, err
}

// registerShardRPC installs the handlers that serve this node's replicas
// to the other nodes.
func (n *Node) registerShardRPC() {
	local := func(data []byte) (*localReplica, shardRequest, error) {
		var req shardRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return nil, req, badRequest("decode shard request: %v", err)
		}
		l, err := n.local(req.DB, req.Shard)
		if l != nil {
			l.routed = true // every client request over the bus was routed
		}
		return l, req, err
	}
	n.rpcHandlers["shard.get"] = func(ctx context.Context, data []byte) (any, error) {
		l, req, err := local(data)
		if err != nil {
			return nil, err
		}
		return wireDocs(l.get(ctx, req.IDs, req.RecordEtag))
	}
	clientWrites := func(ops []storage.Op) error {
		for i, o := range ops {
			if o.Kind != storage.OpPut && o.Kind != storage.OpDelete {
				return badRequest("op %d: kind %d is not a client write", i, o.Kind)
			}
		}
		return nil
	}
	n.rpcHandlers[opShardWriteBin] = func(ctx context.Context, data []byte) (any, error) {
		req, err := decodeWriteRequest(data)
		if err != nil {
			return nil, badRequest("decode shard write: %v", err)
		}
		if err := clientWrites(req.Ops); err != nil {
			return nil, err
		}
		l, err := n.local(req.DB, req.Shard)
		if err != nil {
			return nil, err
		}
		l.routed = true
		return l.write(ctx, req.Ops, writeConcern{Replicas: req.WaitFor, Timeout: req.WaitTimeout}, req.RecordEtag)
	}
	n.rpcHandlers[opShardWriteOnce] = n.serveWriteOnce(n.rpcHandlers[opShardWriteBin])
	// The JSON form, for writes from nodes of earlier versions.
	n.rpcHandlers["shard.write"] = func(ctx context.Context, data []byte) (any, error) {
		l, req, err := local(data)
		if err != nil {
			return nil, err
		}
		ops := make([]storage.Op, len(req.Ops))
		for i, o := range req.Ops {
			ops[i] = storage.Op{Kind: o.Kind, ID: o.ID, Collection: o.Collection, Body: o.Body}
			fromWireIfMatch(&ops[i], o.IfMatch)
		}
		if err := clientWrites(ops); err != nil {
			return nil, err
		}
		return l.write(ctx, ops, writeConcern{Replicas: req.WaitFor, Timeout: req.WaitTimeout}, req.RecordEtag)
	}
	n.rpcHandlers["shard.query"] = func(ctx context.Context, data []byte) (any, error) {
		l, req, err := local(data)
		if err != nil {
			return nil, err
		}
		if req.Query == nil {
			return nil, badRequest("shard.query without a query")
		}
		a := *req.Query
		a.Keep = 0 // an older router cuts the answer itself
		ans, err := l.query(ctx, a)
		return wireDocs(ans.Docs, err)
	}
	n.rpcHandlers[opShardQueryTop] = func(ctx context.Context, data []byte) (any, error) {
		l, req, err := local(data)
		if err != nil {
			return nil, err
		}
		if req.Query == nil {
			return nil, badRequest("%s without a query", opShardQueryTop)
		}
		ans, err := l.query(ctx, *req.Query)
		if err != nil {
			return nil, err
		}
		return wireQueryAnswer{Docs: toWireDocs(ans.Docs), Total: ans.Total}, nil
	}
	n.rpcHandlers[opShardList] = n.serveShardList
	n.rpcHandlers["shard.stats"] = func(ctx context.Context, data []byte) (any, error) {
		l, _, err := local(data)
		if err != nil {
			return nil, err
		}
		return l.stats(ctx)
	}
	n.rpcHandlers["shard.bucket"] = func(ctx context.Context, data []byte) (any, error) {
		l, req, err := local(data)
		if err != nil {
			return nil, err
		}
		return l.bucket(ctx, req.Bucket, req.Limit)
	}
	n.rpcHandlers["shard.item-versions"] = func(ctx context.Context, data []byte) (any, error) {
		l, req, err := local(data)
		if err != nil {
			return nil, err
		}
		return l.itemVersions(ctx, req.IDs)
	}
	n.rpcHandlers[opHandOver] = n.serveHandOver
	n.rpcHandlers["shard.range-stats"] = func(ctx context.Context, data []byte) (any, error) {
		l, req, err := local(data)
		if err != nil {
			return nil, err
		}
		return l.rangeStats(ctx, req.From, req.To)
	}
	n.rpcHandlers["shard.conflicts"] = func(ctx context.Context, data []byte) (any, error) {
		l, req, err := local(data)
		if err != nil {
			return nil, err
		}
		return l.conflicts(ctx, req.Limit)
	}
	n.rpcHandlers["repl.progress"] = func(ctx context.Context, data []byte) (any, error) {
		var req replication.ProgressRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return nil, badRequest("decode progress request: %v", err)
		}
		l, err := n.local(req.DB, req.Shard)
		if err != nil {
			return nil, err
		}
		return replication.ProgressReply{Etag: l.s.ReplicationProgress(req.Source), DatabaseID: l.s.DatabaseID(), BatchFormat: replication.FormatBinaryV3}, nil
	}
	n.rpcHandlers["repl.batch"] = func(ctx context.Context, data []byte) (any, error) {
		b, err := replication.DecodeBatch(data)
		if err != nil {
			return nil, badRequest("decode replication batch: %v", err)
		}
		if err := n.checkIncarnation(b.DB, rpcHeader(ctx, createdHeader)); err != nil {
			return nil, err
		}
		l, err := n.local(b.DB, b.Shard)
		if err != nil {
			return nil, err
		}
		if l.rep != nil {
			return l.rep.Apply(ctx, b)
		}
		return replication.Apply(ctx, l.s, b)
	}
}

// checkIncarnation refuses a replication batch sent by a replica of another
// database of the same name: one deleted since (its node lost touch with
// the cluster, or its batch was delayed), whose documents must not enter
// the new one; or a newer one this node has not applied yet (retryable).
// created is the sender's createdHeader; empty (an earlier version) passes.
func (n *Node) checkIncarnation(db, created string) error {
	if created == "" {
		return nil
	}
	idx, err := strconv.ParseUint(created, 10, 64)
	if err != nil {
		return badRequest("%s %q: %v", createdHeader, created, err)
	}
	rec := n.recordOf(db)
	switch {
	case rec != nil && rec.CreatedIndex == idx:
		return nil
	case rec != nil && idx < rec.CreatedIndex:
		return &apiError{Status: http.StatusGone, Type: "DatabaseRecreated",
			Msg: fmt.Sprintf("replication batch from a replica of an earlier database %q (created at raft index %d; this one was created at %d): refused", db, idx, rec.CreatedIndex)}
	default:
		return unavailable("node %s does not know database %q as created at raft index %d yet", n.cfg.Node.Tag, db, idx)
	}
}

// local returns this node's open replica of db's shard, or a retryable
// 503 when it does not hold one (yet).
func (n *Node) local(db string, shard int) (*localReplica, error) {
	s, rep, ok := n.replicas.getWithReplicator(db, shard)
	if !ok && n.shouldHold(db, shard) {
		// The record says this node holds it: the replica is opening.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = n.replicas.waitFor(ctx, n.fsm.AppliedIndex())
		cancel()
		s, rep, ok = n.replicas.getWithReplicator(db, shard)
	}
	if !ok {
		msg := fmt.Sprintf("node %s holds no open replica of shard %d of %q", n.cfg.Node.Tag, shard, db)
		if e := n.replicas.openError(db, shard); e != "" {
			msg += "; opening it failed (retried): " + e
		}
		return nil, &apiError{Status: http.StatusServiceUnavailable, Type: "ShardNotOnThisNode", Msg: msg}
	}
	return &localReplica{n: n, db: db, shard: shard, s: s, rep: rep}, nil
}

// shouldHold reports whether the current record makes this node a member
// of db's shard.
func (n *Node) shouldHold(db string, shard int) bool {
	rec := n.recordOf(db)
	if rec == nil {
		return false
	}
	t, ok := rec.Sharding.Shards[shard]
	return ok && slices.Contains(t.Members, n.cfg.Node.Tag)
}

// busTransport carries replication over the node RPC.
type busTransport struct{ n *Node }

// errStarting holds back outgoing replication until the node caught up
// with the cluster: while a restarted node replays the raft log, it may
// open a replica of a database that was deleted since (and perhaps created
// again under the same name), and what that replica sent would land in the
// new database's replicas. Reconciling to the current state drops it first.
//
// The same holds for a node that lost touch with the cluster (paused, cut
// off): it replicates again once it is current (see freshness).
func (t busTransport) errStarting() error {
	if !t.n.ready.Load() {
		return fmt.Errorf("node %s is starting: it replicates once it has caught up with the cluster: %w", t.n.cfg.Node.Tag, replication.ErrNotReady)
	}
	if !t.n.fresh.fresh() {
		return fmt.Errorf("node %s has not confirmed lately that it follows the cluster: it replicates once it has: %w", t.n.cfg.Node.Tag, replication.ErrNotReady)
	}
	return nil
}

// createdHeader carries, on a replication batch, the raft index at which
// the sender's database was created: a receiver whose database of that
// name was created later refuses the batch, which comes from a replica of
// a database deleted since.
const createdHeader = "Db-Created-Index"

func (t busTransport) Progress(ctx context.Context, peer string, req *replication.ProgressRequest) (*replication.ProgressReply, error) {
	if err := t.errStarting(); err != nil {
		return nil, err
	}
	var r replication.ProgressReply
	if err := t.n.call(ctx, peer, "repl.progress", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// MaxBatchBytes bounds a replication batch to what one bus message carries.
func (t busTransport) MaxBatchBytes() int {
	return int(t.n.bus.nc.MaxPayload()) - busMessageSlack
}

// replBatchTimeout bounds how long a replication batch waits for its
// answer: a peer stores one as it stores a write. A batch lost on the bus
// (a route cut and restored before either node counted the other down)
// is never answered, and the link stalls until this deadline before the
// sender asks the peer's progress and sends again (applying a batch twice
// changes nothing); at 30 s, a brief cut held replication, and a catch-up
// waiting for it, for 30 s.
const replBatchTimeout = writeAttemptTimeout

func (t busTransport) Send(ctx context.Context, peer string, b *replication.Batch) (*replication.ProgressReply, error) {
	if err := t.errStarting(); err != nil {
		return nil, err
	}
	rec := t.n.recordOf(b.DB)
	if rec == nil {
		return nil, fmt.Errorf("database %q is gone from node %s's records: %w", b.DB, t.n.cfg.Node.Tag, replication.ErrNotReady)
	}
	reshardCluster{t.n}.Failpoint(ctx, "replication/before-send") // tests: replication that lags
	data, err := b.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("encode replication batch: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, replBatchTimeout)
	defer cancel()
	raw, err := t.n.callRawWith(ctx, peer, "repl.batch", data, map[string]string{createdHeader: strconv.FormatUint(rec.CreatedIndex, 10)})
	if err != nil {
		return nil, err
	}
	var r replication.ProgressReply
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("decode repl.batch reply from %s: %w", peer, err)
	}
	return &r, nil
}

// retryable reports whether a failed shard request surely did not execute,
// so another replica may be tried. ShardPeersBehind did not execute
// either, but no other member may take it (see handOff).
func retryable(err error) bool {
	if errors.Is(err, errUnreachable) {
		return true
	}
	var ae *apiError
	return errors.As(err, &ae) && (ae.Type == "ShardNotOnThisNode" || ae.Status == http.StatusServiceUnavailable && ae.Type != "ShardPeersBehind")
}

// membersByPreference orders a shard's members: nodes not known to be down
// first, each group in topology order (the first healthy member serves by
// default). A node this one has not heard from yet (it just started) is
// not known down: putting it last sent a new node's first requests to a
// shard's second member while the first took the others', and If-Match
// updates accepted by both became conflicts. The result may be members
// itself: callers only read it.
func (n *Node) membersByPreference(members []string) []string {
	anyDown := false
	for _, m := range members {
		anyDown = anyDown || n.health.knownDown(m)
	}
	if !anyDown {
		return members // the usual case, in its order: nothing to copy
	}
	out := make([]string, 0, len(members))
	for _, m := range members {
		if !n.health.knownDown(m) {
			out = append(out, m)
		}
	}
	for _, m := range members {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}
