package resharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/replication"
	"github.com/shardnode/shardnode/storage"
)

// Agent advances the migrations that involve one local shard replica.
type Agent struct {
	c      Cluster
	db     string
	shard  int
	s      *storage.Store
	logger *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{} // a task ended: reconcile again

	mu       sync.Mutex
	tasks    map[taskKey]context.CancelFunc
	finished map[taskKey]bool
	wg       sync.WaitGroup
	// sending holds the senders of the migrations this agent sends now,
	// by bucket, for SendProgress.
	sending map[uint32]*sender

	lastSweep time.Time
	// clean is the state the documents migrator last swept and found
	// nothing in: a sweep of the same state would read the same
	// statistics, so it is skipped. A node of hundreds of idle replicas
	// spent ~5% of a core re-reading them every interval.
	clean sweptState
}

// sweptState is what a documents migrator sweep depends on: the
// replica's items (its last etag: every stored item, written, replicated
// or moved in, takes one) and the record (its etag: ownership and
// migrations).
type sweptState struct {
	lastEtag, recEtag uint64
}

// taskKey names one piece of work on one migration.
type taskKey struct {
	kind   string // "send", "cleanup", "confirm"
	bucket uint32
	index  uint64
}

// NewAgent starts the agent of db's shard replica s.
func NewAgent(c Cluster, db string, shard int, s *storage.Store, logger *slog.Logger) *Agent {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{c: c, db: db, shard: shard, s: s, logger: logger.With("db", db, "shard", shard, "component", "resharding"),
		cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1), tasks: map[taskKey]context.CancelFunc{}, finished: map[taskKey]bool{}}
	go a.run(ctx)
	return a
}

// Close stops the agent and every task it started, and waits for them.
func (a *Agent) Close() {
	a.cancel()
	<-a.done
}

func (a *Agent) run(ctx context.Context) {
	defer close(a.done)
	defer a.wg.Wait()
	// During a restart's log replay the records are those of the past: a
	// sweep found "leftovers" in a bucket its shard had owned again for
	// long, and a cleanup could purge by a migration the log later shows
	// finished. The agent starts once the node caught up.
	if err := a.c.WaitReady(ctx); err != nil {
		return
	}
	ch, stop := a.c.Watch()
	defer stop()
	sweep := time.NewTimer(0)
	defer sweep.Stop()
	var lastRanges bucketRangesView
	for {
		rec := a.c.Record(a.db)
		if rec == nil {
			return
		}
		if _, ok := rec.Sharding.Shards[a.shard]; !ok {
			return
		}
		waitStore, standby := a.reconcile(ctx, rec)
		// The documents migrator runs after ownership changes (at most once
		// a second: a change sooner than that is swept when the second is
		// up, not dropped until the slow sweep) and on a slow safety sweep.
		ranges := bucketRangesView{rec.Sharding.BucketRanges, len(rec.Sharding.BucketMigrations)}
		sweepNow := false
		select {
		case <-sweep.C:
			sweepNow = true
			sweep.Reset(a.c.MigratorInterval())
		default:
		}
		moved := !ranges.equal(lastRanges)
		if moved && !sweepNow {
			if wait := time.Second - time.Since(a.lastSweep); wait > 0 {
				sweep.Reset(wait)
			} else {
				sweepNow = true
			}
		}
		if sweepNow {
			lastRanges = ranges
			a.lastSweep = time.Now()
			a.migrateLeftovers(ctx, rec, moved)
		}
		var changed <-chan struct{}
		if waitStore {
			changed = a.s.Changed()
		}
		var recheck <-chan time.Time
		if standby {
			// The sender is another replica's node: notice soon when it
			// goes down (heartbeats, not the record, say so), and take
			// over its sends.
			recheck = time.After(standbyRecheck)
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-changed:
		case <-a.kick:
		case <-recheck:
		case <-sweep.C:
			sweep.Reset(0)
		}
	}
}

// standbyRecheck is how often a source replica that is not its shard's
// sender looks again whether the sender's node is still up, while a
// migration needs one: after the flip the new owner takes no writes for
// the bucket until a sender's last pass is recorded.
const standbyRecheck = 250 * time.Millisecond

// reconcile starts the tasks the record asks of this replica and stops the
// ones it no longer asks for. It reports whether a destination
// confirmation waits on local commits, and whether a migration from this
// shard needs a sender that is another replica (standby).
func (a *Agent) reconcile(ctx context.Context, rec *raftfsm.DatabaseRecord) (waitStore, standby bool) {
	want := map[taskKey]*raftfsm.BucketMigration{}
	me := a.c.NodeTag()
	// Tasks update both maps under a.mu as they end: read them under it.
	sending := func(m *raftfsm.BucketMigration) bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		_, running := a.tasks[taskKey{"send", m.Bucket, m.MigrationIndex}]
		return running
	}
	sentFinal := func(m *raftfsm.BucketMigration) bool { return a.sentHere(*m) }
	for _, m := range rec.Sharding.BucketMigrations {
		switch {
		case m.SourceShard == a.shard && m.IsActive():
			if a.responsible(rec.Sharding.Shards[a.shard].Members) {
				want[taskKey{"send", m.Bucket, m.MigrationIndex}] = m
			} else {
				standby = true
			}
		case m.SourceShard == a.shard && m.Status == raftfsm.MigrationOwnershipTransferred:
			// The sender makes one last pass after the flip (writes that
			// passed the guard just before it) and records it; cleanup
			// waits for that record. A sender that died before it is
			// replaced by the shard's responsible replica, which sends the
			// bucket again (by version: duplicates are no-ops).
			if !a.c.Stopping() && (sending(m) || sentFinal(m) || (m.FinalPass == nil && a.responsible(rec.Sharding.Shards[a.shard].Members))) {
				want[taskKey{"send", m.Bucket, m.MigrationIndex}] = m
			} else if m.FinalPass == nil {
				standby = true
			}
			if !slices.Contains(m.ConfirmedSourceCleanup, me) && !sending(m) {
				want[taskKey{"cleanup", m.Bucket, m.MigrationIndex}] = m
			}
		case m.DestinationShard == a.shard && m.Status == raftfsm.MigrationMoved && !slices.Contains(m.ConfirmedDestinations, me):
			if a.covers(m) {
				want[taskKey{"confirm", m.Bucket, m.MigrationIndex}] = m
			} else {
				waitStore = true
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, cancel := range a.tasks {
		if _, ok := want[k]; !ok {
			cancel()
			delete(a.tasks, k)
		}
	}
	for k := range a.finished {
		if _, ok := want[k]; !ok {
			delete(a.finished, k)
		}
	}
	for k, m := range want {
		if _, running := a.tasks[k]; running || a.finished[k] {
			continue
		}
		tctx, cancel := context.WithCancel(ctx)
		a.tasks[k] = cancel
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			var err error
			switch k.kind {
			case "send":
				err = a.send(tctx, *m)
			case "cleanup":
				err = a.cleanup(tctx, *m)
			case "confirm":
				err = a.confirm(tctx, *m)
			}
			a.mu.Lock()
			if a.tasks[k] != nil {
				delete(a.tasks, k)
				if err == nil {
					a.finished[k] = true
				}
			}
			a.mu.Unlock()
			cancel()
			select {
			case a.kick <- struct{}{}:
			default:
			}
			if err != nil && tctx.Err() == nil && !errors.Is(err, errStopping) {
				a.logger.Warn("migration task failed; will retry", "task", k.kind, "bucket", k.bucket, "migration", k.index, "err", err)
			}
		}()
	}
	return waitStore, standby
}

// errStopping ends a sender on a node that stops cleanly before it
// records a last pass (see responsible).
var errStopping = errors.New("this node is stopping: the shard's next member sends")

// responsible reports whether this node is the first reachable member of
// members: the replica that does the shard's single-copy work. Two nodes
// that disagree both do it, which is safe (duplicates are no-ops).
func (a *Agent) responsible(members []string) bool {
	if a.c.Stopping() {
		// Its writes go to the next member from the end of its drain on,
		// which this node's last pass would not hold: an explorer saw
		// increments acknowledged twice when a node stopping cleanly made
		// a last pass while the other member already took the bucket's
		// writes. The next member sends once this node has left.
		return false
	}
	for _, m := range members {
		if a.c.Up(m) {
			// A replica catching up is not it yet (nor is any other): the
			// member that served meanwhile may hold writes it lacks, and a
			// last pass it made would miss them while the destination then
			// took the bucket's writes (an explorer: increments acknowledged
			// twice after a restarted first member became the sender). Once
			// it caught up, the others handed their writes over to it.
			return m == a.c.NodeTag() && !a.c.Behind(a.db, a.shard)
		}
	}
	return false
}

// covers reports whether this replica's version of the bucket covers what
// the source sent.
func (a *Agent) covers(m *raftfsm.BucketMigration) bool {
	st, err := a.s.BucketStats(m.Bucket)
	if err != nil {
		return false
	}
	have, err := changevector.ParseVector(st.ChangeVector)
	if err != nil {
		return false
	}
	want, err := changevector.ParseVector(m.LastSourceChangeVector)
	if err != nil {
		return false
	}
	return have.Covers(want)
}

// confirm records this destination replica's confirmation.
func (a *Agent) confirm(ctx context.Context, m raftfsm.BucketMigration) error {
	a.c.Failpoint(ctx, "resharding/before-confirm")
	err := a.propose(ctx, &raftfsm.DestinationMigrationConfirm{Database: a.db, Bucket: m.Bucket, MigrationIndex: m.MigrationIndex, Node: a.c.NodeTag()})
	if err == nil {
		a.logger.Debug("confirmed migrated bucket", "bucket", m.Bucket, "migration", m.MigrationIndex)
	}
	return err
}

// propose retries a command until it applies, is stale (already done), or
// ctx ends.
func (a *Agent) propose(ctx context.Context, cmd raftfsm.Command) error {
	b := newBackoff()
	for {
		err := a.c.Propose(ctx, cmd)
		if err == nil || errors.Is(err, raftfsm.ErrStale) {
			return nil
		}
		if errors.Is(err, raftfsm.ErrInvalid) || errors.Is(err, raftfsm.ErrConflict) {
			return err
		}
		if !b.wait(ctx) {
			return ctx.Err()
		}
	}
}

// send streams the bucket to the destination shard: a whole-bucket pass
// from a snapshot, then the tail of the changes feed for later writes.
// When a tail pass finds nothing new while Moving, it records
// SourceMigrationSendCompleted with the merged version of everything sent.
// It keeps tailing while Moved (writes still land here), makes one last
// pass after the ownership flip and records what that pass covered
// (SourceMigrationFinalPass).
func (a *Agent) send(ctx context.Context, m raftfsm.BucketMigration) error {
	rec := a.c.Record(a.db)
	if rec == nil {
		return nil
	}
	// Only a Moving bucket's sends are throttled: after that, writes into
	// the bucket wait for them (a sender that starts after the flip sends
	// the snapshot again before the last pass).
	s := &sender{a: a, m: m, dbid: rec.DatabaseID, inflight: make(chan struct{}, maxInflightBatches),
		throttle: m.Status == raftfsm.MigrationMoving, started: time.Now()}
	defer s.wg.Wait() // no send outlives the task
	a.mu.Lock()
	if a.sending == nil {
		a.sending = map[uint32]*sender{}
	}
	a.sending[m.Bucket] = s
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		if a.sending[m.Bucket] == s {
			delete(a.sending, m.Bucket)
		}
		a.mu.Unlock()
	}()
	feed := a.s.LastEtag()
	err := a.s.IterateBuckets(m.Bucket, m.Bucket, func(d *storage.Document) bool {
		s.add(d)
		if s.full() {
			s.err = s.flush(ctx)
		}
		return s.err == nil
	})
	if err == nil {
		err = s.err
	}
	if err == nil {
		err = s.flush(ctx)
	}
	if err != nil {
		return err
	}
	if m.Status != raftfsm.MigrationMoving {
		// A sender that starts after Moved replaces one that died: its
		// snapshot sends again what the migration already counted. Wait
		// until the snapshot is stored, so none of its batches still in
		// flight is counted below as the last pass's (up to
		// maxInflightBatches batches were added to DocumentsMoved twice).
		if err := s.drain(); err != nil {
			return err
		}
	}
	a.logger.Debug("sent bucket's snapshot", "bucket", m.Bucket, "migration", m.MigrationIndex)
	ch, stop := a.c.Watch()
	defer stop()
	completed := m.Status == raftfsm.MigrationMoved
	// The source shard's other replicas lease the bucket's writes to this
	// sender from the moment it records the send completed (see
	// Cluster.LeaseSourceReplicas): its last pass then waits for no round
	// trip to them. Renewed while the flip has not come. Only for a bucket
	// that took writes during the move (busy): the writes at the flip wait
	// for the pass, and an idle bucket has likely none, so it is fenced
	// at the flip as before instead of paying one more request before
	// its flip (a move of 1,000 idle buckets is a chain of such steps).
	busy := false
	var renewal *time.Ticker
	var renew <-chan time.Time
	defer func() {
		if renewal != nil {
			renewal.Stop()
		}
	}()
	lease := func(cur *raftfsm.DatabaseRecord) {
		if cur == nil || a.c.Stopping() {
			return // a stopping sender makes no last pass
		}
		if renewal == nil {
			renewal = time.NewTicker(leaseRenewEvery)
			renew = renewal.C
		}
		etag := cur.Etag
		s.leases.renew(ctx, &s.wg, func(ctx context.Context) []PeerLease {
			return a.c.LeaseSourceReplicas(ctx, a.db, a.shard, m.Bucket, m.MigrationIndex, etag)
		})
	}
	for {
		changed := a.s.Changed()
		cur := a.c.Record(a.db)
		var status raftfsm.MigrationStatus
		if cur != nil {
			if mm, ok := cur.Sharding.BucketMigrations[m.Bucket]; ok && mm.MigrationIndex == m.MigrationIndex {
				status = mm.Status
			}
		}
		final := status != raftfsm.MigrationMoving && status != raftfsm.MigrationMoved
		s.throttle = status == raftfsm.MigrationMoving
		var took LastPassTimings // the last pass's steps
		var passStart, fencedAt time.Time
		if final {
			a.c.Failpoint(ctx, "resharding/before-final-pass")
			// Writes that passed the write guard before this node applied
			// the flip may still be committing: wait for them, then send
			// them in this last pass; and for those the shard's other
			// replicas took before they knew of it, which reach this one
			// by replication. Both at once.
			passStart = time.Now()
			var peers error
			var fenced sync.WaitGroup
			if cur != nil && status == raftfsm.MigrationOwnershipTransferred {
				fenced.Go(func() {
					peers = a.c.FenceSourceReplicas(ctx, a.db, a.shard, m.Bucket, m.DestinationShard, cur.Etag, s.leases.current(ctx))
					took.FencePeers = time.Since(passStart)
				})
			}
			err := a.c.FenceWrites(ctx, a.db, a.shard)
			took.FenceWrites = time.Since(passStart)
			fenced.Wait()
			fencedAt = time.Now()
			if err != nil {
				return err
			}
			if peers != nil {
				return peers
			}
		}
		// How far the other replicas' feeds had reached this one, read
		// before the tail: whatever this replica had applied from them by
		// now is in its own feed at or below where the tail ends.
		progress, err := a.s.ReplicationProgresses()
		if err != nil {
			return err
		}
		s.mu.Lock()
		docsBefore, bytesBefore := s.docs, s.bytes
		s.mu.Unlock()
		n, next, err := s.tail(ctx, feed, final)
		if err != nil {
			return err
		}
		feed = next
		busy = busy || n > 0
		if !final && completed && busy {
			lease(cur)
		}
		if final {
			// The flip happened (or the migration is gone): once the last
			// pass is stored at the destination, record what it covered,
			// so the source replicas purge it too.
			if err := s.drain(); err != nil || status != raftfsm.MigrationOwnershipTransferred {
				return err
			}
			took.DB, took.Bucket = a.db, m.Bucket
			took.Send, took.Total = time.Since(fencedAt), time.Since(passStart)
			a.c.ObserveLastPass(took)
			s.mu.Lock()
			docs, bytes := s.docs-docsBefore, s.bytes-bytesBefore
			s.mu.Unlock()
			// Recorded even when it sent nothing new: the destination
			// takes the bucket's writes only from then on (writes this
			// replica took before it applied the flip are there now), and
			// the pass covers everything this sender sent (a sender that
			// starts after the flip replaces one that died before it
			// recorded its own).
			progress[a.s.DatabaseID()] = feed
			if a.c.Stopping() {
				// See responsible: the next member makes the last pass.
				return errStopping
			}
			// The destination's replicas hear of the pass from here at
			// once, and through the record a raft round later: those that
			// hold all of it take the bucket's writes from the first.
			version := s.version.String()
			s.wg.Go(func() {
				a.c.AnnounceLastPass(ctx, LastPass{DB: a.db, Shard: m.DestinationShard, Bucket: m.Bucket, MigrationIndex: m.MigrationIndex, ChangeVector: version})
			})
			if err := a.propose(ctx, &raftfsm.SourceMigrationFinalPass{Meta: raftfsm.Meta{At: time.Now().UTC()}, Database: a.db, Bucket: m.Bucket,
				MigrationIndex: m.MigrationIndex, Documents: docs, Bytes: bytes,
				Pass: raftfsm.MigrationPass{ChangeVector: version, SentThrough: progress, SentBy: a.s.DatabaseID(), Node: a.c.NodeTag()}}); err != nil {
				return err
			}
			return a.awaitOwnFinalPass(ctx, m)
		}
		// Caught up (the tail fit in one batch): record what was sent. Later
		// writes keep flowing through the tail while Moved and in the last
		// pass after the flip, so a steady write load cannot hold this up.
		if n < batchItems && !completed && status == raftfsm.MigrationMoving {
			a.c.Failpoint(ctx, "resharding/before-send-completed")
			// Everything counted in the version must be stored before the
			// destination is told to look for it.
			if err := s.drain(); err != nil {
				return err
			}
			if busy {
				lease(cur) // asked with the command: the flip follows it by a raft round or two
			}
			s.mu.Lock()
			docs, bytes := s.docs, s.bytes
			s.mu.Unlock()
			progress[a.s.DatabaseID()] = feed // its own feed, sent through
			cmd := &raftfsm.SourceMigrationSendCompleted{Meta: raftfsm.Meta{At: time.Now().UTC()}, Database: a.db, Bucket: m.Bucket,
				MigrationIndex: m.MigrationIndex, LastSourceChangeVector: s.version.String(), Documents: docs, Bytes: bytes,
				SentThrough: progress, SentBy: a.s.DatabaseID(), SentByNode: a.c.NodeTag()}
			if err := a.propose(ctx, cmd); err != nil {
				return err
			}
			completed = true
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-ch:
		case <-renew:
		}
	}
}

// sender accumulates one migration's batches.
type sender struct {
	a       *Agent
	m       raftfsm.BucketMigration
	dbid    string
	batch   []replication.Item
	size    int
	version changevector.Vector
	err     error
	// throttle makes each batch wait for the node's move bandwidth
	// (Cluster.ThrottleSend).
	throttle bool
	// leases are the other source replicas' promises to leave the
	// bucket's writes to this sender until the flip.
	leases peerLeases
	// lastPass marks the flush that ends the last pass after the flip:
	// its batch carries the version of everything sent (Batch.LastPass).
	lastPass bool

	inflight chan struct{}
	wg       sync.WaitGroup
	started  time.Time
	mu       sync.Mutex // guards the fields below, written by the sends
	docs     int64
	bytes    int64
	stored   time.Time // when the destination last stored a batch
	asyncErr error
}

// SendProgress is what a sender has sent of a bucket so far.
type SendProgress struct {
	// Documents and Bytes count the items the destination stored.
	Documents, Bytes int64
	// Started is when this sender started; LastStored when the
	// destination last stored one of its batches (zero: none yet).
	Started, LastStored time.Time
}

// SendProgress reports what this agent's sender of the bucket's migration
// (by its MigrationIndex) has sent so far; false when the agent does not
// send it. A bucket that moves slowly (a large one, or one paced by the
// move bandwidth) makes progress that a stuck one does not.
func (a *Agent) SendProgress(bucket uint32, migrationIndex uint64) (SendProgress, bool) {
	a.mu.Lock()
	s := a.sending[bucket]
	a.mu.Unlock()
	if s == nil || s.m.MigrationIndex != migrationIndex {
		return SendProgress{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return SendProgress{Documents: s.docs, Bytes: s.bytes, Started: s.started, LastStored: s.stored}, true
}

func (s *sender) add(d *storage.Document) {
	if d.Artificial() {
		return // local-only: never leaves this replica
	}
	cv, err := changevector.Parse(d.ChangeVector)
	if err != nil {
		s.err = fmt.Errorf("item %q: %w", d.ID, err)
		return
	}
	s.version = changevector.Merge(s.version, cv.Version)
	s.batch = append(s.batch, replication.Item{ID: d.ID, Collection: d.Collection, ChangeVector: d.ChangeVector, LastModified: d.LastModified, Flags: d.Flags, Body: d.Body})
	s.size += len(d.Body) + len(d.ID) + len(d.ChangeVector) + 64
}

func (s *sender) full() bool {
	if len(s.batch) >= batchItems {
		return true
	}
	if s.throttle {
		return s.size >= batchBytesFor(s.a.c.SendLimit())
	}
	return s.size >= batchBytes
}

// maxInflightBatches bounds the batches a sender has on the wire at once:
// the destination stores each as it arrives (by version, so their order
// does not matter), and the source reads the next meanwhile. A replica's
// group commit takes what is queued, so several batches share one fsync.
const maxInflightBatches = 8

// flush hands the batch to a background send (at most maxInflightBatches
// at once) and starts a new one; an earlier send's failure is returned.
func (s *sender) flush(ctx context.Context) error {
	if err := s.takeErr(); err != nil {
		return err
	}
	if len(s.batch) == 0 {
		// A last pass with nothing new sends no batch: the notice after
		// it (AnnounceLastPass) goes out at once, there being nothing to
		// wait for.
		return nil
	}
	if s.throttle {
		if err := s.a.c.ThrottleSend(ctx, s.size); err != nil {
			return err
		}
	}
	b := &Batch{DB: s.a.db, Shard: s.m.DestinationShard, Bucket: s.m.Bucket, MigrationIndex: s.m.MigrationIndex, DatabaseID: s.dbid, Items: s.batch}
	if s.lastPass {
		b.LastPass = s.version.String()
	}
	n, size := int64(len(s.batch)), int64(s.size)
	s.batch, s.size = nil, 0
	select {
	case s.inflight <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.inflight }()
		err := s.sendWithRetry(ctx, b)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			if s.asyncErr == nil {
				s.asyncErr = err
			}
			return
		}
		s.docs += n
		s.bytes += size
		s.stored = time.Now()
	}()
	return nil
}

// drain waits for every batch on the wire and returns the first failure.
func (s *sender) drain() error {
	s.wg.Wait()
	return s.takeErr()
}

func (s *sender) takeErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asyncErr
}

// sendWithRetry sends one batch, retrying with backoff; a batch that keeps
// failing is recorded in the migration (visible in the record and the
// operation).
func (s *sender) sendWithRetry(ctx context.Context, b *Batch) error {
	bo := newBackoff()
	for fails := 1; ; fails++ {
		err := s.a.c.SendBatch(ctx, b)
		if err == nil {
			return nil
		}
		if fails%reportFailures == 0 {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = s.a.c.Propose(rctx, &raftfsm.ReportMigrationError{Meta: raftfsm.Meta{At: time.Now().UTC()}, Database: s.a.db, Bucket: s.m.Bucket,
				MigrationIndex: s.m.MigrationIndex, Error: fmt.Sprintf("send to shard %d failed %d times: %v", s.m.DestinationShard, fails, err)})
			cancel()
		}
		if !bo.wait(ctx) {
			return ctx.Err()
		}
	}
}

// tail sends the bucket's items written after feed; it returns how many
// it sent and the new feed position. The last batch of a last tail (after
// the flip) carries the version of everything sent (LastPass).
func (s *sender) tail(ctx context.Context, feed uint64, last bool) (int, uint64, error) {
	sent := 0
	for {
		docs, err := s.a.s.Changes(feed, 1024)
		if err != nil {
			return sent, feed, err
		}
		for _, d := range docs {
			feed = d.Etag
			if d.Bucket == s.m.Bucket && !d.Artificial() {
				s.add(d)
				sent++
				if s.err != nil {
					return sent, feed, s.err
				}
				if s.full() {
					if err := s.flush(ctx); err != nil {
						return sent, feed, err
					}
				}
			}
		}
		if len(docs) < 1024 {
			break
		}
	}
	s.lastPass = last // only now: earlier batches' versions fall short of it
	defer func() { s.lastPass = false }()
	return sent, feed, s.flush(ctx)
}

// cleanup purges, once every node routes the bucket to its new owner, the
// items the destination confirmed or got in the sender's last pass, and
// records this replica's cleanup.
func (a *Agent) cleanup(ctx context.Context, m raftfsm.BucketMigration) error {
	bo := newBackoff()
	for {
		if err := a.c.WaitAllApplied(ctx, m.ConfirmationIndex); err == nil {
			break
		}
		if !bo.wait(ctx) {
			return ctx.Err()
		}
	}
	m, err := a.awaitFinalPass(ctx, m)
	if err != nil {
		return err
	}
	a.c.Failpoint(ctx, "resharding/before-cleanup")
	// What the sender reported at Moved, and what its last pass covered:
	// the second holds the first unless another replica made the last
	// pass (the sender died), and an item either says is at the
	// destination may go.
	var passes []raftfsm.MigrationPass
	if p := m.FinalPass; p != nil {
		passes = append(passes, *p)
	}
	if m.FinalPass == nil || m.FinalPass.SentBy != m.SentBy {
		passes = append(passes, raftfsm.MigrationPass{ChangeVector: m.LastSourceChangeVector, SentThrough: m.SentThrough, SentBy: m.SentBy})
	}
	a.c.NotePurge(a.db, a.shard, m.ConfirmationIndex)
	for _, p := range passes {
		if err := a.purge(ctx, m.Bucket, p); err != nil {
			return err
		}
	}
	return a.propose(ctx, &raftfsm.SourceMigrationCleanup{Meta: raftfsm.Meta{At: time.Now().UTC()}, Database: a.db, Bucket: m.Bucket,
		MigrationIndex: m.MigrationIndex, Node: a.c.NodeTag()})
}

// awaitOwnFinalPass returns once this node's record shows migration m's
// last pass recorded (or m gone). A proposal made through the leader
// returns once the leader applied it, and a follower applies it a moment
// later; this replica's cleanup starts as the send task ends, and one
// that found no pass recorded though the send was over took it for a
// pass that sent nothing new: it purged only what LastSourceChangeVector
// covered and kept the writes since Moved (694 documents once in
// TestWritersDuringBackAndForthMoves).
func (a *Agent) awaitOwnFinalPass(ctx context.Context, m raftfsm.BucketMigration) error {
	ch, stop := a.c.Watch()
	defer stop()
	for {
		rec := a.c.Record(a.db)
		if rec == nil {
			return nil
		}
		cur, ok := rec.Sharding.BucketMigrations[m.Bucket]
		if !ok || cur.MigrationIndex != m.MigrationIndex || cur.FinalPass != nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// finalPassWait bounds how long a source replica's cleanup waits for the
// sender's last pass to be recorded and to reach it. Past it, the replica
// purges what the record covers by then; what it keeps is left for the
// documents migrator, as it was before senders recorded a last pass (and
// still is when the sender runs an older version).
const finalPassWait = 30 * time.Second

// sentHere reports whether this agent's send task of m finished, its last
// pass made (and recorded if it sent anything new).
func (a *Agent) sentHere(m raftfsm.BucketMigration) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.finished[taskKey{"send", m.Bucket, m.MigrationIndex}]
}

// awaitFinalPass returns m as the record holds it once the sender's last
// pass is recorded and, on a replica other than the sender's, once this
// replica applied the sender's feed through that pass (so nothing of it
// arrives by replication after the purge, live and never purged), or when
// the sender's node is down; at once on the sender once its send task
// finished, and once the sender's cleanup is recorded without a last pass
// (it sent nothing new); or after finalPassWait.
func (a *Agent) awaitFinalPass(ctx context.Context, m raftfsm.BucketMigration) (raftfsm.BucketMigration, error) {
	ch, stop := a.c.Watch()
	defer stop()
	deadline := time.NewTimer(finalPassWait)
	defer deadline.Stop()
	for {
		changed := a.s.Changed()
		var recheck <-chan time.Time
		if rec := a.c.Record(a.db); rec != nil {
			if cur, ok := rec.Sharding.BucketMigrations[m.Bucket]; ok && cur.MigrationIndex == m.MigrationIndex {
				m = *cur
			}
		}
		// The sender's last pass sent nothing new: this replica's own send
		// task said so when it finished (a sender restarted since then
		// does not know, and waits for its replacement pass), or the
		// sender's cleanup is recorded without a pass.
		if m.FinalPass == nil && ((m.SentBy == a.s.DatabaseID() && a.sentHere(m)) || (m.SentByNode != "" && slices.Contains(m.ConfirmedSourceCleanup, m.SentByNode))) {
			return m, nil
		}
		if p := m.FinalPass; p != nil {
			if p.SentBy == a.s.DatabaseID() || !a.c.Up(p.Node) {
				return m, nil
			}
			if a.s.ReplicationProgress(p.SentBy) >= p.SentThrough[p.SentBy] {
				return m, nil
			}
			recheck = time.After(time.Second) // whether the sender is still up
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-deadline.C:
			a.logger.Warn("purging a moved bucket without the sender's last pass; the documents migrator moves what stays",
				"bucket", m.Bucket, "migration", m.MigrationIndex, "final_pass_recorded", m.FinalPass != nil)
			return m, nil
		case <-ch:
		case <-changed:
		case <-recheck:
		}
	}
}

// purge replaces the bucket's items that pass p covers and that its sender
// had with artificial tombstones. A sender names (SentThrough) how far
// each replica's feed had reached it: an item this replica stored within
// its own feed's bound, or got from the sender, or whose every write the
// sender had applied from some feed, is the sender's. A replica it does
// not name had sent it nothing, and keeps what it holds for the documents
// migrator.
func (a *Agent) purge(ctx context.Context, b uint32, p raftfsm.MigrationPass) error {
	covered, err := changevector.ParseVector(p.ChangeVector)
	if err != nil {
		return fmt.Errorf("migration of bucket %d: sent change vector: %w", b, err)
	}
	if p.SentThrough != nil {
		// Copies of what the pass sent may still be on their way here by
		// replication (the sender went down, or the wait for them timed
		// out): the mark keeps them from being stored live.
		if err := a.s.MarkPurged(b, storage.PurgeMark{ChangeVector: p.ChangeVector, SentThrough: p.SentThrough}); err != nil {
			return err
		}
	}
	bound, named := p.SentThrough[a.s.DatabaseID()]
	if p.SentThrough != nil && (!named || bound == 0) {
		return nil
	}
	var ops []storage.Op
	err = a.s.IterateBucketsMeta(b, b, func(d *storage.Document) bool {
		if !d.Artificial() {
			ops = append(ops, storage.Op{Kind: storage.OpPurge, ID: d.ID, CoveredBy: covered, SentBy: p.SentBy, SentFeeds: p.SentThrough})
		}
		return true
	})
	if err != nil {
		return err
	}
	for len(ops) > 0 {
		n := min(len(ops), 1024)
		if _, err := a.s.Write(ctx, ops[:n]); err != nil {
			return fmt.Errorf("purge bucket %d: %w", b, err)
		}
		ops = ops[n:]
	}
	return nil
}

// migrateLeftovers is the documents migrator: the first bucket holding
// items that this shard does not own (and that no migration covers) and
// that its owner does not hold in the same or a newer version gets a
// migration to its owner. Artificial tombstones count nowhere, so a purged
// bucket is never picked again. After an ownership change (fenced), it
// first waits for the client writes that passed the write guard before the
// change: one that commits after a flip of its bucket is a leftover, and
// the sweep must see it.
func (a *Agent) migrateLeftovers(ctx context.Context, rec *raftfsm.DatabaseRecord, fenced bool) {
	if !a.responsible(rec.Sharding.Shards[a.shard].Members) {
		a.dropSuperseded(ctx, rec)
		return
	}
	if fenced {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := a.c.FenceWrites(fctx, a.db, a.shard)
		cancel()
		if err != nil && ctx.Err() == nil {
			a.logger.Debug("documents migrator: writes in flight did not finish", "err", err)
		}
	}
	for _, m := range rec.Sharding.BucketMigrations {
		if m.SourceShard == a.shard && m.IsActive() {
			return // one migration at a time from a shard
		}
	}
	state := sweptState{a.s.LastEtag(), rec.Etag} // before the sweep reads
	if state == a.clean {
		return
	}
	strays, err := a.strayBuckets(rec, maxStrayBuckets)
	if err != nil {
		return
	}
	var found storage.BucketStats
	picked := false
	for _, st := range strays {
		if seen, err := a.holdsSeenItem(st.Bucket, rec); err == nil && !seen {
			continue
		}
		// The owner may hold every stray copy already, in the same version
		// or a newer one (a purge keeps what it cannot tell its sender
		// had): such copies are dropped, as a sweep on another replica
		// drops them, rather than moved again. Only what is left, or a
		// bucket whose owner does not answer, gets a migration.
		if kept, err := a.dropSupersededIn(ctx, rec, st.Bucket, rec.ShardOf(st.Bucket)); err == nil && kept == 0 {
			continue
		}
		found, picked = st, true
		break
	}
	if !picked {
		// Every stray item came by a migration this node's record does not
		// show yet (applying its start changes the record, and the next
		// sweep looks again), or its owner held it and it was dropped.
		if len(strays) < maxStrayBuckets {
			a.clean = state
		}
		return
	}
	owner := rec.ShardOf(found.Bucket)
	a.logger.Info("documents migrator found items in a bucket this shard does not own", "bucket", found.Bucket, "owner", owner, "documents", found.DocumentsCount, "tombstones", found.TombstonesCount)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = a.c.Propose(pctx, &raftfsm.StartBucketMigration{Meta: raftfsm.Meta{At: time.Now().UTC()}, Database: a.db, Bucket: found.Bucket,
		SourceShard: a.shard, DestinationShard: owner, Leftovers: true})
	if err != nil && !errors.Is(err, raftfsm.ErrConflict) {
		a.logger.Warn("documents migrator could not start a migration", "bucket", found.Bucket, "err", err)
	}
}

// holdsSeenItem reports whether bucket b holds an item that did not come
// by a migration of this database started after rec's latest change
// (pendingArrival). A destination replica whose node has not applied a
// migration's start yet holds the arriving copies in a bucket its record
// gives to the source: proposing to move them back was refused by raft
// (the migration exists), and logged a leftover that was none.
func (a *Agent) holdsSeenItem(b uint32, rec *raftfsm.DatabaseRecord) (bool, error) {
	seen := false
	err := a.s.IterateBucketsMeta(b, b, func(d *storage.Document) bool {
		seen = !d.Artificial() && !pendingArrival(d, rec)
		return !seen
	})
	if err != nil {
		return false, fmt.Errorf("read bucket %d: %w", b, err)
	}
	return seen, nil
}

// strayBuckets returns the statistics of up to limit buckets that hold
// items while rec gives them to another shard and no migration covers
// them, in bucket order. It reads only the ranges other shards own: a
// replica keeps statistics only for buckets that held items, so the sweep
// reads what was left behind (and the few buckets that moved away), not
// every bucket this shard owns, however large it grows.
func (a *Agent) strayBuckets(rec *raftfsm.DatabaseRecord, limit int) ([]storage.BucketStats, error) {
	var out []storage.BucketStats
	errEnough := errors.New("enough")
	pick := func(st storage.BucketStats) error {
		if _, migrating := rec.Sharding.BucketMigrations[st.Bucket]; st.DocumentsCount+st.TombstonesCount > 0 && !migrating {
			out = append(out, st)
		}
		if len(out) == limit {
			return errEnough
		}
		return nil
	}
	// The ranges other shards own, neighbours joined: one read over all
	// of them (a long move leaves thousands of ranges in the record).
	var spans []raftfsm.BucketSpan
	ranges := rec.Sharding.BucketRanges
	for i := range ranges {
		if ranges[i].ShardNumber == a.shard {
			continue
		}
		from, to := ranges.Span(i)
		if n := len(spans); n > 0 && spans[n-1].To+1 == from {
			spans[n-1].To = to
		} else {
			spans = append(spans, raftfsm.BucketSpan{From: from, To: to})
		}
	}
	if err := a.s.SpansStats(spans, pick); err != nil && !errors.Is(err, errEnough) {
		a.logger.Warn("documents migrator could not read bucket statistics", "spans", len(spans), "err", err)
		return nil, err
	}
	return out, nil
}

// strayChunk bounds the ids of one ItemVersions request.
const strayChunk = 256

// maxStrayBuckets bounds the buckets one dropSuperseded sweep reads.
const maxStrayBuckets = 64

// dropSuperseded is the documents migrator of a replica that is not its
// shard's responsible one, which alone starts migrations: it purges the
// items it holds in buckets other shards own (and no migration covers)
// whose owner holds the same version or a newer one, tombstones included.
//
// Such copies are old versions that never reached the responsible
// replica while the bucket moved: writes this replica took while the
// responsible one was down, or copies that came by replication after its
// purge. The responsible replica's sweep cannot see them, so they stayed
// for good: members of the shard disagreed on their documents, and a
// deleted document's old version lived on. An item the owner lacks, or
// holds only in an older or concurrent version, is kept: it reaches the
// responsible replica by replication, and that one's sweep moves it.
func (a *Agent) dropSuperseded(ctx context.Context, rec *raftfsm.DatabaseRecord) {
	for _, m := range rec.Sharding.BucketMigrations {
		if (m.SourceShard == a.shard || m.DestinationShard == a.shard) && m.IsActive() {
			// As the responsible replica's sweep: not while the shard sends
			// a bucket (a move of many buckets changes the ranges every few
			// milliseconds, and a sweep per change cost a fifth of a small
			// bucket's move), nor while it receives one; once it is done.
			return
		}
	}
	state := sweptState{a.s.LastEtag(), rec.Etag} // before the sweep reads
	if state == a.clean {
		return
	}
	strays, err := a.strayBuckets(rec, maxStrayBuckets)
	if err != nil {
		return
	}
	kept := 0
	for _, st := range strays {
		b := st.Bucket
		n, err := a.dropSupersededIn(ctx, rec, b, rec.ShardOf(b))
		if err != nil {
			if ctx.Err() == nil {
				a.logger.Debug("documents migrator could not compare copies with their owner", "bucket", b, "err", err)
			}
			kept++
			continue
		}
		kept += n
	}
	if kept == 0 && len(strays) < maxStrayBuckets {
		a.clean = state
	}
}

// dropSupersededIn purges bucket b's items that its owner holds in the
// same or a newer version, and returns how many it keeps.
func (a *Agent) dropSupersededIn(ctx context.Context, rec *raftfsm.DatabaseRecord, b uint32, owner int) (int, error) {
	type copyOf struct{ id, cv string }
	var items []copyOf
	err := a.s.IterateBucketsMeta(b, b, func(d *storage.Document) bool {
		if !d.Artificial() && !unseenArrival(d, rec) {
			items = append(items, copyOf{d.ID, d.ChangeVector})
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	kept := 0
	var ops []storage.Op
	for len(items) > 0 {
		chunk := items[:min(len(items), strayChunk)]
		items = items[len(chunk):]
		ids := make([]string, len(chunk))
		for i, it := range chunk {
			ids[i] = it.id
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		held, err := a.c.ItemVersions(qctx, a.db, owner, ids)
		cancel()
		if err != nil {
			return 0, err
		}
		for _, it := range chunk {
			theirs, ok := held[it.id]
			if !ok {
				kept++
				continue
			}
			tv, err1 := changevector.Parse(theirs)
			mine, err2 := changevector.Parse(it.cv)
			if err1 != nil || err2 != nil || !tv.Version.Covers(mine.Version) {
				kept++
				continue
			}
			// The purge checks again at commit that the copy's version is
			// covered: a newer one written meanwhile stays.
			ops = append(ops, storage.Op{Kind: storage.OpPurge, ID: it.id, CoveredBy: tv.Version})
		}
	}
	if len(ops) == 0 {
		return kept, nil
	}
	res, err := a.s.Write(ctx, ops)
	if err != nil {
		return 0, fmt.Errorf("purge superseded copies in bucket %d: %w", b, err)
	}
	dropped := 0
	for _, r := range res {
		if r.Skipped {
			kept++
		} else {
			dropped++
		}
	}
	a.logger.Info("documents migrator dropped copies whose owner holds them in the same or a newer version", "bucket", b, "owner", owner, "dropped", dropped, "kept", kept)
	return kept, nil
}

// movedIn reports whether change vector cv carries the MOVE marker of a
// migration into its shard (or does not parse: then it is kept too).
// unseenArrival reports a copy that may have come by a migration that
// rec, this node's record, does not show yet: its change vector's MOVE
// marker names a migration of this database started after the record's
// latest change, or of another database id; or it is flagged as moved and
// carries no marker; or its change vector does not parse. Such a copy is
// the destination's, whatever the record says: the node may not have
// applied the migration's start while the copies arrived, and dropping
// them lost them here for good (replication had delivered them already).
//
// A copy whose marker the record has seen came into this shard by a
// migration the record knows (or was written here over such a copy: a
// local write keeps the order's marker). With the record now giving its
// bucket to another shard and no migration of the shard active, it is a
// leftover of a move out, and goes like any copy once the owner holds its
// version. Keeping every marked copy left, with three replicas, a write
// that reached a source replica from a sibling rather than from the sender
// just before a flip on that replica for good: its cleanup keeps what it
// cannot tell the sender had, and the responsible replica, which moves
// leftovers, never held it.
func unseenArrival(d *storage.Document, rec *raftfsm.DatabaseRecord) bool {
	c, err := changevector.Parse(d.ChangeVector)
	if err != nil {
		return true
	}
	marked := false
	for _, e := range c.Order {
		if e.Tag != changevector.MoveTag {
			continue
		}
		if e.DBID != rec.DatabaseID || e.Etag > rec.Etag {
			return true
		}
		marked = true
	}
	return !marked && d.Flags&storage.FlagFromResharding != 0
}

// pendingArrival reports a copy whose change vector's MOVE marker names a
// migration of rec's database started after rec's latest change: the
// record will show that migration. Unlike unseenArrival, a copy it cannot
// place (a marker of another database id, a change vector that does not
// parse) is not pending: the responsible replica moves it as any leftover.
func pendingArrival(d *storage.Document, rec *raftfsm.DatabaseRecord) bool {
	c, err := changevector.Parse(d.ChangeVector)
	if err != nil {
		return false
	}
	for _, e := range c.Order {
		if e.Tag == changevector.MoveTag && e.DBID == rec.DatabaseID && e.Etag > rec.Etag {
			return true
		}
	}
	return false
}

// bucketRangesView is what the documents migrator watches for: ownership
// and the number of migrations.
type bucketRangesView struct {
	ranges     bucket.Ranges
	migrations int
}

func (v bucketRangesView) equal(o bucketRangesView) bool {
	return v.migrations == o.migrations && slices.Equal(v.ranges, o.ranges)
}
