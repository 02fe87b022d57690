package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/time/rate"

	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/resharding"
	"github.com/shardnode/shardnode/storage"
)

// reshardCluster gives the resharding workers what they need of the node.
type reshardCluster struct{ n *Node }

var _ resharding.Cluster = reshardCluster{}

func (c reshardCluster) NodeTag() string { return c.n.cfg.Node.Tag }

func (c reshardCluster) Record(db string) *raftfsm.DatabaseRecord { return c.n.recordOf(db) }

func (c reshardCluster) Watch() (<-chan uint64, func()) { return c.n.fsm.Watch() }

func (c reshardCluster) Propose(ctx context.Context, cmd raftfsm.Command) error {
	_, err := c.n.proposeIndex(ctx, cmd)
	return err
}

func (c reshardCluster) IsLeader() bool { return c.n.raft.r.State() == raft.Leader }

// Up reports a node heard from lately that has not announced the end of
// its drain: one that did makes no passes (see health.markStopping).
func (c reshardCluster) Up(tag string) bool {
	return c.n.health.up(tag) && !c.n.health.isStopping(tag)
}

func (c reshardCluster) Behind(db string, shard int) bool { return c.n.catchUps.isBehind(db, shard) }

func (c reshardCluster) Stopping() bool { return c.n.draining.Load() }

// sendLimiter paces the batches of the buckets this node moves out:
// resharding.max-send-bytes-per-sec at start, changed at run time through
// PUT /admin/resharding/send-limit. Its burst is one second's worth, or a
// migration batch (4 MiB) if that is more; a larger batch (the document
// that crossed the bound) waits for a whole burst.
type sendLimiter struct {
	l *rate.Limiter

	mu      sync.Mutex
	bps     int64         // 0: no limit
	changed chan struct{} // closed and replaced when the limit changes

	waited atomic.Int64 // nanoseconds batches waited, for /metrics
}

func newSendLimiter(bytesPerSec int64) *sendLimiter {
	s := &sendLimiter{l: rate.NewLimiter(rate.Inf, 4<<20), changed: make(chan struct{})}
	s.set(bytesPerSec)
	return s
}

// set changes the limit (0: none). Batches already waiting wait again by
// the new one: an operator who raises a limit set too low does not wait
// out what the old one asked.
func (s *sendLimiter) set(bytesPerSec int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bps = max(bytesPerSec, 0)
	if s.bps == 0 {
		s.l.SetLimit(rate.Inf)
	} else {
		s.l.SetBurst(int(max(s.bps, 4<<20)))
		s.l.SetLimit(rate.Limit(s.bps))
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// limit is the current limit in bytes per second, 0 for none.
func (s *sendLimiter) limit() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bps
}

// wait returns once a batch of bytes may go, or with ctx's error. A batch
// larger than the burst is paid for in pieces of at most the burst, each
// waiting for its own bytes, so every byte counts against the limit (a
// batch of two 16 MiB documents is not charged as 4 MiB). Only time spent
// waiting counts in waited: a batch that goes at once adds nothing.
func (s *sendLimiter) wait(ctx context.Context, bytes int) error {
	var start time.Time // of the first wait
	defer func() {
		if !start.IsZero() {
			s.waited.Add(int64(time.Since(start)))
		}
	}()
	for bytes > 0 {
		paid, err := s.waitPiece(ctx, bytes, &start)
		if err != nil {
			return err
		}
		bytes -= paid
	}
	return nil
}

// waitPiece waits for up to one burst of bytes and says how many it paid
// for. start is set at the first wait of the batch.
func (s *sendLimiter) waitPiece(ctx context.Context, bytes int, start *time.Time) (int, error) {
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		n := min(bytes, s.l.Burst())
		r := s.l.ReserveN(time.Now(), n)
		if !r.OK() {
			continue // the burst shrank since it was read: read it again
		}
		d := r.Delay()
		if d == 0 {
			return n, nil
		}
		if start.IsZero() {
			*start = time.Now()
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
			return n, nil
		case <-changed:
			t.Stop()
			r.Cancel() // give the bytes back, and wait by the new limit
		case <-ctx.Done():
			t.Stop()
			r.Cancel()
			return 0, fmt.Errorf("move bandwidth: %w", ctx.Err())
		}
	}
}

func (c reshardCluster) ThrottleSend(ctx context.Context, bytes int) error {
	return c.n.sendLimit.wait(ctx, bytes)
}

func (c reshardCluster) SendLimit() int64 { return c.n.sendLimit.limit() }

// sendLimitBody is the body of GET and PUT /admin/resharding/send-limit.
type sendLimitBody struct {
	Node           string `json:"Node,omitempty"`
	BytesPerSecond *int64 `json:"BytesPerSecond"`
}

// handleGetSendLimit answers this node's move bandwidth.
func (n *Node) handleGetSendLimit(w http.ResponseWriter, _ *http.Request) {
	v := n.sendLimit.limit()
	writeJSON(w, http.StatusOK, sendLimitBody{Node: n.cfg.Node.Tag, BytesPerSecond: &v})
}

// handlePutSendLimit changes this node's move bandwidth until it stops
// (the config key sets it at start).
func (n *Node) handlePutSendLimit(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, 4<<10)
	if err != nil {
		writeError(w, err)
		return
	}
	var req sendLimitBody
	if err := decodeJSON(body, &req); err != nil {
		writeError(w, err)
		return
	}
	switch {
	case req.BytesPerSecond == nil:
		writeError(w, badRequest(`"BytesPerSecond" is missing (0 removes the limit)`))
		return
	case *req.BytesPerSecond < 0:
		writeError(w, badRequest(`"BytesPerSecond" is %d: it must be 0 (no limit) or positive`, *req.BytesPerSecond))
		return
	case req.Node != "" && req.Node != n.cfg.Node.Tag:
		writeError(w, badRequest(`"Node" is %q, but this is node %s: the limit is each node's own, set it on that node`, req.Node, n.cfg.Node.Tag))
		return
	}
	old := n.sendLimit.limit()
	n.sendLimit.set(*req.BytesPerSecond)
	n.logger.Info("move bandwidth changed", "bytes_per_sec", *req.BytesPerSecond, "was", old)
	n.handleGetSendLimit(w, r)
}

func (c reshardCluster) SendBatch(ctx context.Context, b *resharding.Batch) error {
	rec := c.n.recordOf(b.DB)
	if rec == nil {
		return fmt.Errorf("database %q is gone", b.DB)
	}
	topo, ok := rec.Sharding.Shards[b.Shard]
	if !ok {
		return notFound("ShardDoesNotExist", "database %q has no shard %d", b.DB, b.Shard)
	}
	var up []string
	for _, m := range topo.Members {
		if c.n.health.up(m) {
			up = append(up, m)
		}
	}
	encoded := c.n.migrationParts(b)
	if len(up) == 0 { // try them all in turn, as for a write
		return c.n.onShard(ctx, target{rec: rec, shard: -1}, b.Shard, false, func(ctx context.Context, rep shardReplica) error {
			return rep.migrate(ctx, b, encoded)
		})
	}
	// Every reachable replica stores the batch at once: each confirms from
	// its own commits instead of waiting for intra-shard replication to
	// bring the whole bucket from the one that got it.
	errs := make([]error, len(up))
	var wg sync.WaitGroup
	for i, tag := range up {
		wg.Go(func() {
			errs[i] = c.n.attempt(ctx, b.DB, b.Shard, tag, false, 0, func(ctx context.Context, rep shardReplica) error {
				return rep.migrate(ctx, b, encoded)
			})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			return nil // the others get the items by replication
		}
	}
	return fmt.Errorf("migration batch of bucket %d to shard %d: no replica stored it: %w", b.Bucket, b.Shard, errors.Join(errs...))
}

func (c reshardCluster) Failpoint(ctx context.Context, name string) {
	d, ok := c.n.failpoints[name]
	if !ok {
		return
	}
	c.n.logger.Warn("failpoint: pausing", "failpoint", name, "for", d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (c reshardCluster) WaitReady(ctx context.Context) error {
	select {
	case <-c.n.readyCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c reshardCluster) MigratorInterval() time.Duration {
	return time.Duration(c.n.cfg.Resharding.MigratorIntervalMs) * time.Millisecond
}

func (c reshardCluster) MaxAwaitingCleanup() int {
	return int(c.n.cfg.Resharding.MaxAwaitingCleanup)
}

func (c reshardCluster) NotePurge(db string, shard int, index uint64) {
	c.n.replicas.notePurge(db, shard, index)
}

func (c reshardCluster) ObserveLastPass(t resharding.LastPassTimings) {
	if rec := c.n.recordOf(t.DB); rec != nil {
		c.n.passTotals.record(t.DB, rec.CreatedIndex, t.Total)
		c.n.passFences.record(t.DB, rec.CreatedIndex, t.FencePeers)
		c.n.passOwnFences.record(t.DB, rec.CreatedIndex, t.FenceWrites)
		c.n.passSends.record(t.DB, rec.CreatedIndex, t.Send)
	}
	h := c.n.metrics.lastPassSeconds
	h.WithLabelValues(t.DB, "fence_writes").Observe(t.FenceWrites.Seconds())
	h.WithLabelValues(t.DB, "fence_peers").Observe(t.FencePeers.Seconds())
	h.WithLabelValues(t.DB, "send").Observe(t.Send.Seconds())
	h.WithLabelValues(t.DB, "total").Observe(t.Total.Seconds())
}

func (c reshardCluster) FenceWrites(ctx context.Context, db string, shard int) error {
	if err := c.n.replicas.fence(db, shard).wait(ctx); err != nil {
		return fmt.Errorf("wait for the writes to shard %d of %q that passed the write guard: %w", shard, db, err)
	}
	return nil
}

func (c reshardCluster) WaitAllApplied(ctx context.Context, index uint64) error {
	return c.n.waitAllApplied(ctx, index)
}

func (c reshardCluster) RangeStats(ctx context.Context, db string, shard int, from, to uint32) ([]storage.BucketStats, error) {
	rec := c.n.recordOf(db)
	if rec == nil {
		return nil, fmt.Errorf("database %q is gone", db)
	}
	var out []storage.BucketStats
	err := c.n.onShard(ctx, target{rec: rec, shard: -1}, shard, true, func(ctx context.Context, rep shardReplica) error {
		var err error
		out, err = rep.rangeStats(ctx, from, to)
		return err
	})
	return out, err
}

func (c reshardCluster) ItemVersions(ctx context.Context, db string, shard int, ids []string) (map[string]string, error) {
	rec := c.n.recordOf(db)
	if rec == nil {
		return nil, fmt.Errorf("database %q is gone", db)
	}
	var out map[string]string
	err := c.n.onShard(ctx, target{rec: rec, shard: -1}, shard, true, func(ctx context.Context, rep shardReplica) error {
		var err error
		out, err = rep.itemVersions(ctx, ids)
		return err
	})
	return out, err
}

// waitAllApplied returns once this node and every reachable node applied
// index: from then on every router sends the bucket's requests to its new
// owner. A node that is down applies the index before it serves again.
func (n *Node) waitAllApplied(ctx context.Context, index uint64) error {
	if err := n.waitApplied(ctx, index); err != nil {
		return err
	}
	for _, m := range n.fsm.Nodes() {
		if m.Tag == n.cfg.Node.Tag || !n.health.up(m.Tag) {
			continue
		}
		err := n.call(ctx, m.Tag, "node.applied", appliedRequest{Index: index}, nil)
		if err != nil && !errors.Is(err, errUnreachable) {
			return fmt.Errorf("node %s applying index %d: %w", m.Tag, index, err)
		}
	}
	return nil
}

// sendProgressRequest asks a node what its sender of a migration has sent.
type sendProgressRequest struct {
	DB             string `json:"Db"`
	Shard          int    `json:"Shard"`
	Bucket         uint32 `json:"Bucket"`
	MigrationIndex uint64 `json:"MigrationIndex"`
}

// sendProgressReply is its answer; Sending is false when the node does not
// send that migration.
type sendProgressReply struct {
	Sending bool `json:"Sending"`
	resharding.SendProgress
}

// sendProgress asks tag (this node, or another over the bus) what it has
// sent of m; false when it does not send m or does not answer in time.
func (n *Node) sendProgress(ctx context.Context, tag, db string, m *raftfsm.BucketMigration) (resharding.SendProgress, bool) {
	req := sendProgressRequest{DB: db, Shard: m.SourceShard, Bucket: m.Bucket, MigrationIndex: m.MigrationIndex}
	if tag == n.cfg.Node.Tag {
		r := n.localSendProgress(req)
		return r.SendProgress, r.Sending
	}
	ctx, cancel := context.WithTimeout(ctx, sendProgressWait)
	defer cancel()
	var r sendProgressReply
	if err := n.call(ctx, tag, "migration.progress", req, &r); err != nil {
		return resharding.SendProgress{}, false
	}
	return r.SendProgress, r.Sending
}

// sendProgressWait bounds how long a view of the migrations waits for a
// sender's progress.
const sendProgressWait = 500 * time.Millisecond

func (n *Node) localSendProgress(req sendProgressRequest) sendProgressReply {
	a := n.replicas.agentOf(req.DB, req.Shard)
	if a == nil {
		return sendProgressReply{}
	}
	p, ok := a.SendProgress(req.Bucket, req.MigrationIndex)
	return sendProgressReply{Sending: ok, SendProgress: p}
}

func (n *Node) registerMigrationRPC() {
	n.rpcHandlers["migration.progress"] = func(ctx context.Context, data []byte) (any, error) {
		var req sendProgressRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return nil, badRequest("decode send progress request: %v", err)
		}
		return n.localSendProgress(req), nil
	}
	n.rpcHandlers["migration.batch"] = func(ctx context.Context, data []byte) (any, error) {
		b, err := resharding.DecodeBatch(data)
		if err != nil {
			return nil, badRequest("decode migration batch: %v", err)
		}
		b.LastPass = rpcHeader(ctx, lastPassHeader)
		l, err := n.local(b.DB, b.Shard)
		if err != nil {
			return nil, err
		}
		return struct{}{}, l.migrate(ctx, b, nil)
	}
}

// reshardRequest is POST /databases/{db}/resharding's body.
type reshardRequest struct {
	// Wider than a bucket, so that a negative one gets the range's
	// message, not the decoder's.
	FromBucket *int64 `json:"FromBucket"`
	ToBucket   *int64 `json:"ToBucket"`
	ToShard    *int   `json:"ToShard"`
}

func (n *Node) handleStartResharding(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	if t.shard >= 0 {
		writeError(w, badRequest("reshard the database %q, not one shard replica", t.rec.DatabaseName))
		return
	}
	body, err := readBody(r, 64<<10)
	if err != nil {
		writeError(w, err)
		return
	}
	var req reshardRequest
	if err := decodeJSON(body, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.FromBucket == nil || req.ToBucket == nil || req.ToShard == nil {
		var missing []string
		for name, v := range map[string]bool{"FromBucket": req.FromBucket == nil, "ToBucket": req.ToBucket == nil, "ToShard": req.ToShard == nil} {
			if v {
				missing = append(missing, strconv.Quote(name))
			}
		}
		slices.Sort(missing)
		writeError(w, badRequest(`missing %s: give "FromBucket", "ToBucket" and "ToShard"`, strings.Join(missing, ", ")))
		return
	}
	if *req.FromBucket < 0 || *req.FromBucket > *req.ToBucket || *req.ToBucket > 1<<20-1 {
		writeError(w, badRequest("bucket range FromBucket %d to ToBucket %d: need 0 <= FromBucket <= ToBucket <= %d", *req.FromBucket, *req.ToBucket, 1<<20-1))
		return
	}
	if *req.ToShard < 0 {
		writeError(w, badRequest("ToShard %d: shard numbers are 0 or more (shards: %v)", *req.ToShard, t.rec.ShardNumbers()))
		return
	}
	if _, ok := t.rec.Sharding.Shards[*req.ToShard]; !ok {
		writeError(w, notFound("ShardDoesNotExist", "database %q has no shard %d (shards: %v)", t.rec.DatabaseName, *req.ToShard, t.rec.ShardNumbers()))
		return
	}
	// A client retrying with the same Request-Id gets the same operation.
	from, to := uint32(*req.FromBucket), uint32(*req.ToBucket) // checked above
	id := newOperationID()
	if rid := r.Header.Get("Request-Id"); rid != "" {
		id = operationIDFor(t.rec.DatabaseName, rid)
	}
	cmd := &raftfsm.StartResharding{Meta: raftfsm.Meta{At: time.Now().UTC(), RequestID: r.Header.Get("Request-Id")}, Database: t.rec.DatabaseName,
		OperationID: id, FromBucket: from, ToBucket: to, ToShard: *req.ToShard, AwaitsRange: true, SettledTotal: true}
	if _, err := n.proposeIndex(r.Context(), cmd); err != nil {
		writeError(w, err)
		return
	}
	// A retry finds its operation; an id reused for another range or
	// shard finds one that is not this request's, or none.
	if rid := r.Header.Get("Request-Id"); rid != "" {
		rec := n.recordOf(t.rec.DatabaseName)
		var op *raftfsm.ReshardingOperation
		if rec != nil {
			op = rec.Sharding.Resharding[id]
		}
		if op == nil {
			// The state machine skipped the command as a retry, and no
			// operation of this id is left: the id named another command,
			// or this very one, whose operation finished and was pruned.
			// Nothing tells which.
			writeError(w, operationGone(r, t.rec.DatabaseName, id))
			return
		}
		if op.FromBucket != from || op.ToBucket != to || op.ToShard != *req.ToShard {
			writeError(w, requestIDReused(r))
			return
		}
	}
	n.logger.Info("resharding started", "db", t.rec.DatabaseName, "operation", id, "from", *req.FromBucket, "to", *req.ToBucket, "shard", *req.ToShard)
	writeJSON(w, http.StatusAccepted, map[string]string{"OperationId": id})
}

// operationGone is the answer to a resharding request whose Request-Id
// the state machine took for a retry when the record has no operation of
// that id: a 409 RequestIdReused, since nothing was applied, that does
// not claim the id named another command (it may have started this very
// move, whose operation finished and was pruned).
func operationGone(r *http.Request, db, id string) error {
	return &apiError{Status: http.StatusConflict, Type: "RequestIdReused",
		Msg: fmt.Sprintf("Request-Id %q was already used, and the operation it would have started (operation %s) is not in the record of %q, so this request was not applied. "+
			"If the id was sent first with this same move, that operation ran and, once finished, was pruned (a record keeps the last %d finished operations); "+
			"otherwise the id named another command. To move these buckets again, send a new id",
			r.Header.Get("Request-Id"), id, db, raftfsm.MaxFinishedOperations)}
}

// operationView is an operation with its live migrations, as the API shows
// it.
type operationView struct {
	*raftfsm.ReshardingOperation
	Current []migrationView `json:"CurrentBuckets"`
	// MoreBuckets counts by status the migrations in flight past the first
	// maxCurrentShown of Current (absent when there are none). With a
	// source node down, every bucket flipped since waits for its cleanup:
	// an operation's every event carried them all, half a megabyte per
	// bucket moved with a thousand waiting.
	MoreBuckets map[raftfsm.MigrationStatus]int `json:"MoreBuckets,omitempty"`
	Alerts      []string                        `json:"Alerts,omitempty"`
	// CleanupHold is set while the operation starts no new bucket because
	// resharding.max-awaiting-cleanup moved buckets of the database wait
	// for their source cleanup: its progress stands still for as long, and
	// a rate measured over the hold says nothing of the time left.
	CleanupHold *cleanupHoldView `json:"CleanupHold,omitempty"`
}

// cleanupHoldView is an operation's cleanup hold (see resharding.CleanupHold).
type cleanupHoldView struct {
	// Waiting counts the database's migrations in OwnershipTransferred.
	Waiting int `json:"Waiting"`
	// Limit is resharding.max-awaiting-cleanup.
	Limit int `json:"Limit"`
}

// maxCurrentShown bounds an operation view's CurrentBuckets. The record
// (GET /admin/databases/{db}) and the resharding list's BucketMigrations
// show every migration.
const maxCurrentShown = 100

// sortMigrations orders migration views as a move goes through them:
// the buckets moving now first, then those waiting on confirmations, then
// on cleanups; by bucket within a status.
func sortMigrations(ms []migrationView) {
	slices.SortFunc(ms, func(a, b migrationView) int {
		return cmp.Or(cmp.Compare(stepRank(a.Status), stepRank(b.Status)), cmp.Compare(a.Bucket, b.Bucket))
	})
}

// stepRank orders migration statuses as a move goes through them.
func stepRank(s raftfsm.MigrationStatus) int {
	switch s {
	case raftfsm.MigrationMoving:
		return 0
	case raftfsm.MigrationMoved:
		return 1
	default:
		return 2
	}
}

// migrationView adds what a reader needs to spot a stuck step.
type migrationView struct {
	*raftfsm.BucketMigration
	InStatusFor string `json:"InStatusFor"`
	// Stuck: in one status for more than StuckAfter, and, in Moving, with
	// no batch stored for as long (a large or paced bucket that moves on
	// is not stuck).
	Stuck bool `json:"Stuck"`
	// Sent is, for a bucket in Moving for more than sentShownAfter, what
	// its sender has sent so far (absent when the sender does not answer).
	Sent *sentView `json:"Sent,omitempty"`
	// WaitingFor names the nodes the step waits for (see waitingFor).
	WaitingFor []string `json:"WaitingFor,omitempty"`
	waitsTo    string   // what WaitingFor's nodes are to do, for alerts
}

// viewMigration is m as the API shows it; shards is the topology of m's
// database (nil if unknown).
func (n *Node) viewMigration(ctx context.Context, db string, shards map[int]*raftfsm.ShardTopology, m *raftfsm.BucketMigration) migrationView {
	d := time.Since(m.StatusSince)
	waits, what := n.waitingFor(shards, m)
	v := migrationView{BucketMigration: m, InStatusFor: d.Round(time.Millisecond).String(), Stuck: d > resharding.StuckAfter, WaitingFor: waits, waitsTo: what}
	// Only a long Moving step asks its sender: short ones (nearly all)
	// cost no round trip, and the event stream views every step.
	if m.Status == raftfsm.MigrationMoving && d > sentShownAfter && len(waits) == 1 {
		if p, ok := n.sendProgress(ctx, waits[0], db, m); ok {
			quiet := sendQuietFor(p, time.Now())
			v.Sent = &sentView{Node: waits[0], Documents: p.Documents, Bytes: p.Bytes, Since: p.Started.UTC(), LastStoredAgo: quiet.Round(time.Millisecond).String()}
			v.Stuck = v.Stuck && quiet > resharding.StuckAfter
		}
	}
	return v
}

// sendQuietFor is how long a sender has made no progress at now: since
// the destination stored its last batch, or since it started before the
// first.
func sendQuietFor(p resharding.SendProgress, now time.Time) time.Duration {
	last := p.Started
	if p.LastStored.After(last) {
		last = p.LastStored
	}
	return now.Sub(last)
}

// sentShownAfter is how long a bucket is in Moving before its view shows
// what its sender has sent.
const sentShownAfter = 2 * time.Second

// sentView is what a bucket's sender has sent of it so far.
type sentView struct {
	// Node is the sending node.
	Node string `json:"Node"`
	// Documents and Bytes the destination stored.
	Documents int64 `json:"Documents"`
	Bytes     int64 `json:"Bytes"`
	// Since is when this sender started (a replaced sender starts over).
	Since time.Time `json:"Since"`
	// LastStoredAgo is how long ago the destination stored its last batch
	// (or the sender started, before the first).
	LastStoredAgo string `json:"LastStoredAgo"`
}

// waitingFor names the nodes m's step waits for, and says for what: in
// Moving the sender (the first source member this node sees up, the one
// the agents choose; every member when none is up), in Moved the
// destination members that have not confirmed, in OwnershipTransferred
// the source members whose cleanup is not recorded.
func (n *Node) waitingFor(shards map[int]*raftfsm.ShardTopology, m *raftfsm.BucketMigration) (nodes []string, what string) {
	members := func(shard int) []string {
		if t := shards[shard]; t != nil {
			return t.Members
		}
		return nil
	}
	switch m.Status {
	case raftfsm.MigrationMoving:
		src := members(m.SourceShard)
		for _, tag := range src {
			if n.health.up(tag) {
				return []string{tag}, "to send"
			}
		}
		if len(src) > 0 {
			return slices.Clone(src), "to send (none is up)"
		}
	case raftfsm.MigrationMoved:
		for _, tag := range members(m.DestinationShard) {
			if !slices.Contains(m.ConfirmedDestinations, tag) {
				nodes = append(nodes, tag)
			}
		}
		return nodes, "to confirm"
	case raftfsm.MigrationOwnershipTransferred:
		for _, tag := range members(m.SourceShard) {
			if !slices.Contains(m.ConfirmedSourceCleanup, tag) {
				nodes = append(nodes, tag)
			}
		}
		return nodes, "to clean up"
	}
	return nil, ""
}

func (n *Node) viewOperation(ctx context.Context, rec *raftfsm.DatabaseRecord, op *raftfsm.ReshardingOperation) operationView {
	return n.viewOperationOf(ctx, rec.DatabaseName, rec.Sharding.Shards, op, raftfsm.OperationMigrations(rec, op.ID))
}

// viewOperationOf is the view of op whose migrations in flight are migs;
// shards is the database's topology, which names the nodes a stuck step
// waits for.
func (n *Node) viewOperationOf(ctx context.Context, db string, shards map[int]*raftfsm.ShardTopology, op *raftfsm.ReshardingOperation, migs []*raftfsm.BucketMigration) operationView {
	v := operationView{ReshardingOperation: op, Current: []migrationView{}}
	var stuck []migrationView
	for _, m := range migs {
		mv := n.viewMigration(ctx, db, shards, m)
		v.Current = append(v.Current, mv)
		if m.Failures > 0 {
			v.Alerts = append(v.Alerts, fmt.Sprintf("bucket %d (%s) failing: %s", m.Bucket, m.Status, m.LastError))
		}
		if mv.Stuck {
			stuck = append(stuck, mv)
		}
	}
	v.Alerts = append(v.Alerts, stuckAlerts(stuck)...)
	if h := n.cleanupHold(db, op); h != nil {
		v.CleanupHold = h
		v.Alerts = append(v.Alerts, h.alert())
	}
	if len(v.Current) > maxCurrentShown {
		// The buckets moving now first, then those waiting on confirmations,
		// then on cleanups.
		sortMigrations(v.Current)
		v.MoreBuckets = map[raftfsm.MigrationStatus]int{}
		for _, mv := range v.Current[maxCurrentShown:] {
			v.MoreBuckets[mv.Status]++
		}
		v.Current = v.Current[:maxCurrentShown:maxCurrentShown]
	}
	return v
}

// cleanupHold returns the hold of a running operation of db that starts
// no new bucket because the database has as many moved buckets waiting for
// their source cleanup as resharding.max-awaiting-cleanup allows (the
// driver on the raft leader holds it then; this node reads the bound from
// its own configuration, which a cluster is expected to share), or nil.
func (n *Node) cleanupHold(db string, op *raftfsm.ReshardingOperation) *cleanupHoldView {
	if op.Status != raftfsm.OperationRunning {
		return nil
	}
	rec := n.recordOf(db)
	if rec == nil {
		return nil
	}
	limit := int(n.cfg.Resharding.MaxAwaitingCleanup)
	waiting, hold := resharding.CleanupHold(rec, limit)
	if !hold {
		return nil
	}
	return &cleanupHoldView{Waiting: waiting, Limit: limit}
}

// alert says why the operation starts no new bucket, and what lifts it.
func (h *cleanupHoldView) alert() string {
	return fmt.Sprintf("no new bucket starts: %d moved buckets of the database wait for their source cleanup (resharding.max-awaiting-cleanup is %d); the move goes on as they complete: bring their source nodes back, or remove them from the cluster", h.Waiting, h.Limit)
}

// stuckAlerts returns the alerts of the stuck migrations views, in the
// order of their first bucket: one per bucket, except that buckets stuck
// in the same status waiting for the same nodes share one. With a source
// node down, every bucket flipped since waits for its cleanup: a range
// move listed hundreds of alerts that said the same thing.
func stuckAlerts(views []migrationView) []string {
	type group struct {
		status      raftfsm.MigrationStatus
		waits       []string
		what        string
		buckets     []uint32
		shortest    string
		least, most time.Duration
		longest     string
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, mv := range views {
		key := string(mv.Status) + "\x00" + strings.Join(mv.WaitingFor, ",") + "\x00" + mv.waitsTo
		d := time.Since(mv.StatusSince)
		g := byKey[key]
		if g == nil {
			g = &group{status: mv.Status, waits: mv.WaitingFor, what: mv.waitsTo, least: d, shortest: mv.InStatusFor, most: d, longest: mv.InStatusFor}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.buckets = append(g.buckets, mv.Bucket)
		if d < g.least {
			g.least, g.shortest = d, mv.InStatusFor
		}
		if d > g.most {
			g.most, g.longest = d, mv.InStatusFor
		}
	}
	out := make([]string, 0, len(groups))
	for _, g := range groups {
		var alert string
		if len(g.buckets) == 1 {
			alert = fmt.Sprintf("bucket %d stuck in %s for %s", g.buckets[0], g.status, g.longest)
		} else {
			alert = fmt.Sprintf("%d buckets stuck in %s for %s to %s", len(g.buckets), g.status, g.shortest, g.longest)
		}
		if len(g.waits) > 0 {
			alert += fmt.Sprintf(", waiting for %s %s %s", plural(len(g.waits), "node", "nodes"), strings.Join(g.waits, ", "), g.what)
		}
		if len(g.buckets) > 1 {
			alert += " (" + bucketList(g.buckets, stuckAlertBuckets) + ")"
		}
		out = append(out, alert)
	}
	return out
}

// stuckAlertBuckets is how many buckets an alert for several names.
const stuckAlertBuckets = 5

// bucketList names up to limit of buckets, sorted: "buckets 3, 4, 9 and
// 120 more".
func bucketList(buckets []uint32, limit int) string {
	buckets = slices.Clone(buckets)
	slices.Sort(buckets)
	var b strings.Builder
	b.WriteString("buckets ")
	for i, bk := range buckets[:min(len(buckets), limit)] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d", bk)
	}
	if len(buckets) > limit {
		fmt.Fprintf(&b, " and %d more", len(buckets)-limit)
	}
	return b.String()
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (n *Node) handleListResharding(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := []operationView{}
	for _, op := range t.rec.Sharding.Resharding {
		out = append(out, n.viewOperation(r.Context(), t.rec, op))
	}
	sortOperations(out)
	migs := []migrationView{}
	for _, m := range t.rec.Sharding.BucketMigrations {
		migs = append(migs, n.viewMigration(r.Context(), t.rec.DatabaseName, t.rec.Sharding.Shards, m))
	}
	sortMigrations(migs)
	writeJSON(w, http.StatusOK, map[string]any{"Operations": out, "BucketMigrations": migs})
}

// errNoOperation is the 404 for a resharding operation id that db's
// record does not hold, in the same words for every endpoint.
func errNoOperation(db, id string) error {
	return notFound("OperationNotFound", "no resharding operation %q in %q", id, db)
}

func (n *Node) handleGetResharding(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	op, ok := t.rec.Sharding.Resharding[r.PathValue("id")]
	if !ok {
		writeError(w, errNoOperation(t.rec.DatabaseName, r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, n.viewOperation(r.Context(), t.rec, op))
}

// handleCancelResharding stops an operation from starting more bucket
// migrations; the one in flight finishes (see raftfsm.CancelResharding).
func (n *Node) handleCancelResharding(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	if t.shard >= 0 {
		writeError(w, badRequest("cancel through the database %q, not one shard replica", t.rec.DatabaseName))
		return
	}
	id := r.PathValue("id")
	if t.rec.Sharding.Resharding[id] == nil {
		writeError(w, errNoOperation(t.rec.DatabaseName, id))
		return
	}
	if err := n.propose(r.Context(), &raftfsm.CancelResharding{Meta: raftfsm.Meta{At: time.Now().UTC(), RequestID: r.Header.Get("Request-Id")}, Database: t.rec.DatabaseName, OperationID: id}); err != nil {
		writeError(w, err)
		return
	}
	rec := n.recordOf(t.rec.DatabaseName)
	var op *raftfsm.ReshardingOperation
	if rec != nil {
		op = rec.Sharding.Resharding[id]
	}
	if op == nil {
		writeError(w, errNoOperation(t.rec.DatabaseName, id))
		return
	}
	n.logger.Info("resharding cancelled", "db", rec.DatabaseName, "operation", id, "done", op.BucketsDone, "total", op.BucketsTotal)
	writeJSON(w, http.StatusOK, n.viewOperation(r.Context(), rec, op))
}

// addShardRequest is POST /admin/databases/{db}/shards' body.
type addShardRequest struct {
	Members []string `json:"Members"`
}

func (n *Node) handleAddShard(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	if t.shard >= 0 {
		writeError(w, badRequest("add a shard to the database %q, not to one of its shards", t.rec.DatabaseName))
		return
	}
	body, err := readBody(r, 64<<10)
	if err != nil {
		writeError(w, err)
		return
	}
	var req addShardRequest
	if err := decodeJSON(body, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := n.propose(r.Context(), &raftfsm.AddShard{Meta: raftfsm.Meta{At: time.Now().UTC(), RequestID: r.Header.Get("Request-Id")}, Database: t.rec.DatabaseName, Members: req.Members, TrackIndex: true}); err != nil {
		writeError(w, err)
		return
	}
	rec := n.recordOf(t.rec.DatabaseName)
	if id := r.Header.Get("Request-Id"); id != "" {
		if index, ok := n.fsm.RequestIndex(id); ok && !addedShardAt(rec, index, req.Members) {
			// The id was taken for a retry of another command: nothing
			// was added.
			writeError(w, requestIDReused(r))
			return
		}
	}
	writeJSON(w, http.StatusCreated, rec)
}

// addedShardAt reports whether rec has a shard with these members that the
// command at index added.
func addedShardAt(rec *raftfsm.DatabaseRecord, index uint64, members []string) bool {
	if rec == nil {
		return false
	}
	for _, s := range rec.Sharding.Shards {
		if s.AddedIndex == index && slices.Equal(s.Members, members) {
			return true
		}
	}
	return false
}
