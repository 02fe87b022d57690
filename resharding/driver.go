package resharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/shardnode/shardnode/raftfsm"
)

// Driver turns running resharding operations into migrations. It runs on
// every node and acts only on the raft leader, so a new leader takes over
// an operation where the record says it is.
type Driver struct {
	c      Cluster
	logger *slog.Logger
	dbs    func() []string
	cancel context.CancelFunc
	done   chan struct{}
	// kick wakes the driver when its node became the raft leader: the
	// leader before it held the operations' queues in memory, and with no
	// command applied since (the empty buckets flipped, no bucket with
	// data started yet), nothing else would wake this one.
	kick chan struct{}
	// queued holds, per operation and source shard, the non-empty buckets
	// still to migrate (learned from the source's bucket statistics).
	queued map[queueKey][]uint32
	// racers holds, per operation and source shard, the empty buckets it
	// flipped in bulk: a client write that passed the source's write guard
	// just before such a flip commits there after it, and is left on the
	// source (readable through the database only once moved). The next
	// step of that source moves any such leftovers first.
	racers map[queueKey][]raftfsm.BucketSpan
	// reflip holds, per operation and source shard, when a refill left
	// empty buckets unflipped because a source replica gave no lease (a
	// node just killed, not yet found down): the queue is read again from
	// the source's statistics once reflipEvery has passed, between two
	// buckets with data, rather than once all of them have moved.
	reflip map[queueKey]time.Time
	// running holds the operations this driver saw running, to log their
	// end once (on the leader, which drives them).
	running map[opKey]bool
	// held holds the databases whose operations start no new bucket
	// because as many moved buckets as Cluster.MaxAwaitingCleanup allows
	// wait for their source cleanup, to log the pause and its end once.
	held map[string]bool
}

// opKey names an operation of a database.
type opKey struct{ db, id string }

type queueKey struct {
	op    string
	shard int
}

// MaxLeaseSpans bounds the spans of one MoveEmptyBuckets command, and of
// the lease on them that the driver asks of the source's replicas first
// (Cluster.LeaseEmptySpans): about 26 bytes each as JSON, well within a
// bus message.
const MaxLeaseSpans = 4096

// reflipEvery is how long after a lease was refused the driver tries the
// empty buckets it left unflipped again (see Driver.reflip).
const reflipEvery = time.Second

// NewDriver starts a driver; dbs lists the databases to watch.
func NewDriver(c Cluster, dbs func() []string, logger *slog.Logger) *Driver {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Driver{c: c, dbs: dbs, logger: logger.With("component", "resharding-driver"), cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1), queued: map[queueKey][]uint32{}, racers: map[queueKey][]raftfsm.BucketSpan{}, running: map[opKey]bool{}}
	go d.run(ctx)
	return d
}

// Kick makes the driver step now: its node just became the raft leader
// (and its state is current). It does not block.
func (d *Driver) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Close stops the driver.
func (d *Driver) Close() {
	d.cancel()
	<-d.done
}

func (d *Driver) run(ctx context.Context) {
	defer close(d.done)
	ch, stop := d.c.Watch()
	defer stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		failed := false
		if d.c.IsLeader() {
			for _, db := range d.dbs() {
				if err := d.step(ctx, db); err != nil && ctx.Err() == nil {
					d.logger.Warn("resharding step failed; retrying", "db", db, "err", err)
					failed = true
				}
			}
		}
		if failed {
			retry.Reset(200 * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-d.kick:
		case <-retry.C:
		}
	}
}

// step starts the next work of every running operation of db.
func (d *Driver) step(ctx context.Context, db string) error {
	rec := d.c.Record(db)
	if rec == nil {
		for k := range d.running {
			if k.db == db {
				delete(d.running, k) // the database is gone
			}
		}
		delete(d.held, db)
		return nil
	}
	ops := make([]*raftfsm.ReshardingOperation, 0, len(rec.Sharding.Resharding))
	for _, op := range rec.Sharding.Resharding {
		if op.Status == raftfsm.OperationRunning {
			ops = append(ops, op)
			d.running[opKey{db, op.ID}] = true
		} else if d.running[opKey{db, op.ID}] {
			delete(d.running, opKey{db, op.ID})
			d.logger.Info("resharding operation ended", "db", db, "operation", op.ID, "status", op.Status,
				"buckets_done", op.BucketsDone, "buckets_total", op.BucketsTotal, "buckets_with_data", op.BucketsMigrated,
				"documents", op.DocumentsMoved, "bytes", op.BytesMoved, "duration", op.EndedAt.Sub(op.StartedAt).Round(time.Millisecond))
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].StartIndex < ops[j].StartIndex })
	d.forgetEnded(rec)
	if len(ops) > 0 && d.holdForCleanups(db, rec) {
		return nil // the record's change that completes a cleanup wakes the driver
	}
	var errs []error
	for _, op := range ops {
		for _, src := range sourcesOf(rec, op) {
			if busy(rec, src) {
				continue
			}
			if err := d.advance(ctx, db, rec, op, src); err != nil {
				errs = append(errs, err)
			}
			rec = d.c.Record(db)
			if rec == nil {
				return nil
			}
		}
	}
	return errors.Join(errs...)
}

// holdForCleanups reports whether db's operations must start no new
// bucket: as many of its moved buckets as Cluster.MaxAwaitingCleanup
// allows wait for their source replicas' cleanup. With a source node
// down, each bucket with data a move flips stays in the record until that
// node is back or removed; the bound keeps the record, which every node
// holds and each raft snapshot writes, from growing by an entry per bucket
// of the range. The operation's view says it waits (node: operation
// alerts).
func (d *Driver) holdForCleanups(db string, rec *raftfsm.DatabaseRecord) bool {
	limit := d.c.MaxAwaitingCleanup()
	waiting, hold := CleanupHold(rec, limit)
	if d.held == nil {
		d.held = map[string]bool{}
	}
	switch {
	case hold && !d.held[db]:
		d.held[db] = true
		d.logger.Warn("resharding starts no new bucket: too many moved buckets wait for their source cleanup; bring the source nodes back or remove them",
			"db", db, "awaiting_cleanup", waiting, "resharding.max-awaiting-cleanup", limit)
	case !hold && d.held[db]:
		delete(d.held, db)
		d.logger.Info("resharding goes on: moved buckets' cleanups completed", "db", db, "awaiting_cleanup", waiting)
	}
	return hold
}

// CleanupHold returns how many of rec's moved buckets wait for their
// source cleanup, and whether that many keep its operations from starting
// a new bucket under limit (Cluster.MaxAwaitingCleanup; 0 is no bound,
// and nothing is counted).
func CleanupHold(rec *raftfsm.DatabaseRecord, limit int) (waiting int, hold bool) {
	if limit <= 0 {
		return 0, false
	}
	waiting = raftfsm.AwaitingCleanup(rec)
	return waiting, waiting >= limit
}

// sourcesOf lists the shards other than the target owning buckets of op.
func sourcesOf(rec *raftfsm.DatabaseRecord, op *raftfsm.ReshardingOperation) []int {
	seen := map[int]bool{}
	var out []int
	rs := rec.Sharding.BucketRanges
	for i := range rs {
		f, t := rs.Span(i)
		if t < op.FromBucket || f > op.ToBucket || rs[i].ShardNumber == op.ToShard || seen[rs[i].ShardNumber] {
			continue
		}
		seen[rs[i].ShardNumber] = true
		out = append(out, rs[i].ShardNumber)
	}
	sort.Ints(out)
	return out
}

// busy reports whether shard is sending a bucket (one at a time).
func busy(rec *raftfsm.DatabaseRecord, shard int) bool {
	for _, m := range rec.Sharding.BucketMigrations {
		if m.SourceShard == shard && m.IsActive() {
			return true
		}
	}
	return false
}

// ownedSpans lists the parts of [from, to] that shard owns.
func ownedSpans(rec *raftfsm.DatabaseRecord, shard int, from, to uint32) []raftfsm.BucketSpan {
	var out []raftfsm.BucketSpan
	rs := rec.Sharding.BucketRanges
	for i := range rs {
		f, t := rs.Span(i)
		if t < from || f > to || rs[i].ShardNumber != shard {
			continue
		}
		out = append(out, raftfsm.BucketSpan{From: max(f, from), To: min(t, to)})
	}
	return out
}

// advance moves the next piece of op's range off src: all empty buckets at
// once, then the non-empty ones one by one.
func (d *Driver) advance(ctx context.Context, db string, rec *raftfsm.DatabaseRecord, op *raftfsm.ReshardingOperation, src int) error {
	key := queueKey{op.ID, src}
	if spans := d.racers[key]; len(spans) > 0 {
		started, err := d.moveRacer(ctx, db, rec, src, spans)
		if err != nil || started {
			return err
		}
		delete(d.racers, key) // none: the writes in flight at the flip have long committed
	}
	q := d.queued[key]
	if at, ok := d.reflip[key]; ok && time.Since(at) >= reflipEvery {
		// Empty buckets were left unflipped: read the queue again, which
		// leases and flips them, and queues the buckets with data anew.
		delete(d.reflip, key)
		q = nil
	}
	// Drop queued buckets that moved or are migrating meanwhile.
	for len(q) > 0 && (rec.ShardOf(q[0]) != src || rec.Sharding.BucketMigrations[q[0]] != nil) {
		q = q[1:]
	}
	if len(q) == 0 {
		var err error
		if q, err = d.refill(ctx, db, rec, op, src); err != nil {
			return err
		}
		if len(q) == 0 {
			delete(d.queued, key)
			delete(d.racers, key) // the source's own sweep takes over
			return nil
		}
	}
	d.queued[key] = q[1:]
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := d.c.Propose(cctx, &raftfsm.StartBucketMigration{Meta: raftfsm.Meta{At: time.Now().UTC()}, Database: db, Bucket: q[0],
		SourceShard: src, DestinationShard: op.ToShard, OperationID: op.ID})
	if errors.Is(err, raftfsm.ErrConflict) {
		return nil // raced with the documents migrator or another step: the next event retries
	}
	return err
}

// refill reads src's bucket statistics over op's range: every owned bucket
// that holds nothing flips in one command, the others are queued.
func (d *Driver) refill(ctx context.Context, db string, rec *raftfsm.DatabaseRecord, op *raftfsm.ReshardingOperation, src int) ([]uint32, error) {
	spans := ownedSpans(rec, src, op.FromBucket, op.ToBucket)
	if len(spans) == 0 {
		return nil, nil
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stats, err := d.c.RangeStats(sctx, db, src, spans[0].From, spans[len(spans)-1].To)
	if err != nil {
		return nil, err
	}
	full := map[uint32]bool{}
	var q []uint32
	for _, st := range stats {
		if st.DocumentsCount+st.TombstonesCount > 0 && rec.ShardOf(st.Bucket) == src && rec.Sharding.BucketMigrations[st.Bucket] == nil {
			full[st.Bucket] = true
			q = append(q, st.Bucket)
		}
	}
	// Empty buckets: everything owned in the spans except the full ones and
	// those migrating.
	var empty []raftfsm.BucketSpan
	for _, sp := range spans {
		start := sp.From
		for b := sp.From; ; b++ {
			skip := full[b] || rec.Sharding.BucketMigrations[b] != nil
			if skip {
				if b > start {
					empty = append(empty, raftfsm.BucketSpan{From: start, To: b - 1})
				}
				start = b + 1
			}
			if b == sp.To {
				if start <= sp.To && !skip {
					empty = append(empty, raftfsm.BucketSpan{From: start, To: sp.To})
				}
				break
			}
		}
	}
	key := queueKey{op.ID, src}
	d.racers[key] = append(d.racers[key], empty...)
	var leaseErrs []error
	for len(empty) > 0 {
		n := min(len(empty), MaxLeaseSpans)
		chunk := empty[:n]
		empty = empty[n:]
		// The source's replicas refuse writes into the chunk from now
		// until they apply its flip, and name its buckets that took some
		// since the statistics were read: those move one at a time, and
		// no acknowledged write is left behind on the source for the
		// flip (where the new owner would not see it until it is moved).
		lease, err := d.c.LeaseEmptySpans(ctx, db, src, op.ToShard, chunk)
		if err != nil {
			// A replica that gave no lease may take writes into the
			// chunk until it applies the flip: not flipped now. The
			// step's retry asks again, or, with buckets with data
			// queued, the refill reflipEvery later (see Driver.reflip).
			d.c.ReleaseEmptySpans(context.WithoutCancel(ctx), db, src, chunk)
			leaseErrs = append(leaseErrs, err)
			continue
		}
		if held := lease.Held; len(held) > 0 {
			d.logger.Debug("empty buckets took writes before their flip; they move one at a time", "db", db, "source", src, "buckets", len(held))
			for _, b := range held {
				if InSpans(chunk, b) {
					q = append(q, b)
				}
			}
			chunk = WithoutBuckets(chunk, held)
			if len(chunk) == 0 {
				continue
			}
		}
		// Committed later than FlipBy, the flip would find a replica's
		// lease ended while its node may still take writes into the
		// chunk without knowing of the flip.
		pctx, cancel := context.WithDeadline(ctx, lease.FlipBy)
		err = d.c.Propose(pctx, &raftfsm.MoveEmptyBuckets{Meta: raftfsm.Meta{At: time.Now().UTC()}, Database: db, SourceShard: src,
			DestinationShard: op.ToShard, Spans: chunk, OperationID: op.ID})
		cancel()
		if err != nil {
			// Not flipped (or not known to be): the source's replicas
			// need not refuse the chunk's writes until their leases'
			// window ends. Were the command committed after all, the
			// record shows the flip and the write guard refuses them;
			// a write that got in meanwhile is a racer, moved later.
			d.c.ReleaseEmptySpans(context.WithoutCancel(ctx), db, src, chunk)
			if !errors.Is(err, raftfsm.ErrConflict) {
				return nil, fmt.Errorf("flip %d spans of empty buckets of shard %d to shard %d: %w", len(chunk), src, op.ToShard, err)
			}
		}
	}
	if len(q) == 0 && len(leaseErrs) > 0 {
		return nil, errors.Join(leaseErrs...)
	}
	if len(leaseErrs) > 0 {
		if d.reflip == nil {
			d.reflip = map[queueKey]time.Time{}
		}
		d.reflip[key] = time.Now()
		d.logger.Warn("empty buckets not flipped: a source replica gave no lease; they are tried again in a moment, between buckets with data", "db", db, "source", src, "retry_in", reflipEvery, "err", errors.Join(leaseErrs...))
	}
	return q, nil
}

// WithoutBuckets returns spans (ascending, disjoint) less the buckets of
// held (ascending), split around them.
func WithoutBuckets(spans []raftfsm.BucketSpan, held []uint32) []raftfsm.BucketSpan {
	out := make([]raftfsm.BucketSpan, 0, len(spans)+len(held))
	i := 0
	for _, sp := range spans {
		for i < len(held) && held[i] < sp.From {
			i++
		}
		from := sp.From
		for ; i < len(held) && held[i] <= sp.To; i++ {
			if held[i] > from {
				out = append(out, raftfsm.BucketSpan{From: from, To: held[i] - 1})
			}
			from = held[i] + 1
		}
		if from <= sp.To { // buckets are below 2^20: from never wraps
			out = append(out, raftfsm.BucketSpan{From: from, To: sp.To})
		}
	}
	return out
}

// moveRacer starts a leftovers migration for the first bucket of spans
// (empty buckets src flipped in bulk) that src holds items in after all:
// writes that raced the flip. It reports whether it started one.
func (d *Driver) moveRacer(ctx context.Context, db string, rec *raftfsm.DatabaseRecord, src int, spans []raftfsm.BucketSpan) (bool, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stats, err := d.c.RangeStats(sctx, db, src, spans[0].From, spans[len(spans)-1].To)
	if err != nil {
		return false, err
	}
	for _, st := range stats {
		owner := rec.ShardOf(st.Bucket)
		if st.DocumentsCount+st.TombstonesCount == 0 || owner == src || rec.Sharding.BucketMigrations[st.Bucket] != nil || !InSpans(spans, st.Bucket) {
			continue
		}
		d.logger.Info("moving writes that raced an empty-bucket flip", "db", db, "bucket", st.Bucket, "source", src, "owner", owner, "documents", st.DocumentsCount)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := d.c.Propose(pctx, &raftfsm.StartBucketMigration{Meta: raftfsm.Meta{At: time.Now().UTC()}, Database: db, Bucket: st.Bucket,
			SourceShard: src, DestinationShard: owner, Leftovers: true})
		if errors.Is(err, raftfsm.ErrConflict) {
			return true, nil // the source's own sweep got there first: the next event goes on
		}
		return err == nil, err
	}
	return false, nil
}

// InSpans reports whether b lies in one of spans (ascending and disjoint,
// as refill builds them).
func InSpans(spans []raftfsm.BucketSpan, b uint32) bool {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].To >= b })
	return i < len(spans) && spans[i].From <= b
}

// SpansOverlap reports whether a bucket lies in both a and b (each
// ascending and disjoint), in one pass over the two.
func SpansOverlap(a, b []raftfsm.BucketSpan) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i].To < b[j].From:
			i++
		case b[j].To < a[i].From:
			j++
		default:
			return true
		}
	}
	return false
}

// forgetEnded drops what the driver kept for operations of rec that ended
// (the keys of other databases' operations are not in rec).
func (d *Driver) forgetEnded(rec *raftfsm.DatabaseRecord) {
	ended := func(id string) bool {
		op, ok := rec.Sharding.Resharding[id]
		return ok && op.Status != raftfsm.OperationRunning
	}
	for k := range d.racers {
		if ended(k.op) {
			delete(d.racers, k)
		}
	}
	for k := range d.queued {
		if ended(k.op) {
			delete(d.queued, k)
		}
	}
	for k := range d.reflip {
		if ended(k.op) {
			delete(d.reflip, k)
		}
	}
}
