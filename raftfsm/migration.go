package raftfsm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/shardnode/shardnode/bucket"
)

// Errors of the resharding commands.
var (
	// ErrConflict means the request conflicts with work in progress (an
	// overlapping operation, a bucket already migrating).
	ErrConflict = errors.New("conflict")
	// ErrStale means a migration step names a migration that is not in the
	// expected state: it was already applied (a retry) or replaced.
	ErrStale = errors.New("stale migration step")
	// ErrOperationNotFound means no resharding operation has the id.
	ErrOperationNotFound = errors.New("resharding operation not found")
)

// Online resharding commands (DESIGN §5). Every step names the bucket and
// the MigrationIndex (the raft index that started the migration) and
// checks the expected status, so retries and crashes at any step are safe.

// StartBucketMigration starts moving one bucket: status Moving.
type StartBucketMigration struct {
	Meta
	Database         string `json:"Database"`
	Bucket           uint32 `json:"Bucket"`
	SourceShard      int    `json:"SourceShard"`
	DestinationShard int    `json:"DestinationShard"`
	// Leftovers moves items left in a bucket the source no longer owns
	// (the documents migrator); the destination must be the owner.
	Leftovers   bool   `json:"Leftovers,omitempty"`
	OperationID string `json:"OperationId,omitempty"`
}

// Type implements Command.
func (StartBucketMigration) Type() CommandType { return TypeStartBucketMigration }

// SourceMigrationSendCompleted records that the source sent everything up
// to LastSourceChangeVector: status Moved.
type SourceMigrationSendCompleted struct {
	Meta
	Database               string `json:"Database"`
	Bucket                 uint32 `json:"Bucket"`
	MigrationIndex         uint64 `json:"MigrationIndex"`
	LastSourceChangeVector string `json:"LastSourceChangeVector"`
	Documents              int64  `json:"Documents"`
	Bytes                  int64  `json:"Bytes"`
	// SentThrough bounds, per source replica (by its database id), the
	// local etags of what the sender had and sent (see BucketMigration).
	SentThrough map[string]uint64 `json:"SentThrough,omitempty"`
	// SentBy is the sending replica's database id, SentByNode its node.
	SentBy     string `json:"SentBy,omitempty"`
	SentByNode string `json:"SentByNode,omitempty"`
}

// Type implements Command.
func (SourceMigrationSendCompleted) Type() CommandType { return TypeSourceMigrationSendComplete }

// DestinationMigrationConfirm records that one destination replica holds
// everything up to LastSourceChangeVector; the last one flips ownership.
type DestinationMigrationConfirm struct {
	Meta
	Database       string `json:"Database"`
	Bucket         uint32 `json:"Bucket"`
	MigrationIndex uint64 `json:"MigrationIndex"`
	Node           string `json:"Node"`
}

// Type implements Command.
func (DestinationMigrationConfirm) Type() CommandType { return TypeDestinationMigrationConfirm }

// SourceMigrationCleanup records that one source replica purged the moved
// items; after the last one the migration entry is removed.
type SourceMigrationCleanup struct {
	Meta
	Database       string `json:"Database"`
	Bucket         uint32 `json:"Bucket"`
	MigrationIndex uint64 `json:"MigrationIndex"`
	Node           string `json:"Node"`
}

// Type implements Command.
func (SourceMigrationCleanup) Type() CommandType { return TypeSourceMigrationCleanup }

// SourceMigrationFinalPass records the sender's last pass, made after the
// ownership flip: writes that passed the write guard between Moved and the
// flip reached the destination too. The source replicas purge what it
// covers, so those writes are not left for the documents migrator.
type SourceMigrationFinalPass struct {
	Meta
	Database       string        `json:"Database"`
	Bucket         uint32        `json:"Bucket"`
	MigrationIndex uint64        `json:"MigrationIndex"`
	Pass           MigrationPass `json:"Pass"`
	// Documents and Bytes count what the last pass sent beyond what the
	// migration had counted.
	Documents int64 `json:"Documents"`
	Bytes     int64 `json:"Bytes"`
}

// Type implements Command.
func (SourceMigrationFinalPass) Type() CommandType { return TypeSourceMigrationFinalPass }

// BucketSpan is an inclusive range of buckets.
type BucketSpan = bucket.Span

// MoveEmptyBuckets flips buckets that hold nothing on the source in one
// step: there is no data to move. A write racing the flip is refused by
// the write guard or moved by the documents migrator.
type MoveEmptyBuckets struct {
	Meta
	Database         string       `json:"Database"`
	SourceShard      int          `json:"SourceShard"`
	DestinationShard int          `json:"DestinationShard"`
	Spans            []BucketSpan `json:"Spans"`
	OperationID      string       `json:"OperationId,omitempty"`
}

// Type implements Command.
func (MoveEmptyBuckets) Type() CommandType { return TypeMoveEmptyBuckets }

// ReportMigrationError makes a failing migration step visible in the
// record (and its operation) instead of retrying silently.
type ReportMigrationError struct {
	Meta
	Database       string `json:"Database"`
	Bucket         uint32 `json:"Bucket"`
	MigrationIndex uint64 `json:"MigrationIndex"`
	Error          string `json:"Error"`
}

// Type implements Command.
func (ReportMigrationError) Type() CommandType { return TypeReportMigrationError }

// StartResharding starts an operation that moves every bucket of
// [FromBucket, ToBucket] not already on ToShard.
type StartResharding struct {
	Meta
	Database    string `json:"Database"`
	OperationID string `json:"OperationId"`
	FromBucket  uint32 `json:"FromBucket"`
	ToBucket    uint32 `json:"ToBucket"`
	ToShard     int    `json:"ToShard"`
	// AwaitsRange sets ReshardingOperation.AwaitsRange.
	AwaitsRange bool `json:"AwaitsRange,omitempty"`
	// SettledTotal counts in BucketsTotal each bucket of the range whose
	// migration in flight, if any, leaves it off ToShard: the buckets
	// this operation itself will move, so BucketsDone reaches it. Set by
	// proposers of this version; an entry logged without it replays with
	// the older count (the range's buckets ToShard does not own, plus the
	// migrations leaving ToShard), which counts a flipped bucket leaving
	// ToShard twice and one arriving on ToShard once too often.
	SettledTotal bool `json:"SettledTotal,omitempty"`
}

// Type implements Command.
func (StartResharding) Type() CommandType { return TypeStartResharding }

// AddShard adds a shard with no buckets; buckets are moved into it.
type AddShard struct {
	Meta
	Database string   `json:"Database"`
	Members  []string `json:"Members"`
	// TrackIndex records the raft index in the shard's AddedIndex (set by
	// proposers of this version, so older entries replay unchanged).
	TrackIndex bool `json:"TrackIndex,omitempty"`
}

// Type implements Command.
func (AddShard) Type() CommandType { return TypeAddShard }

// CancelResharding stops a running operation from starting more bucket
// migrations. A migration it already started goes on to its end (stopping
// one half-way would leave its bucket's documents on two shards), so the
// operation's buckets end where they were or on the target shard.
type CancelResharding struct {
	Meta
	Database    string `json:"Database"`
	OperationID string `json:"OperationId"`
}

// Type implements Command.
func (CancelResharding) Type() CommandType { return TypeCancelResharding }

func registerMigrationCommands() {
	register(TypeStartBucketMigration, applyStartBucketMigration)
	register(TypeSourceMigrationSendComplete, applySendCompleted)
	register(TypeDestinationMigrationConfirm, applyDestinationConfirm)
	register(TypeSourceMigrationCleanup, applySourceCleanup)
	register(TypeMoveEmptyBuckets, applyMoveEmptyBuckets)
	register(TypeReportMigrationError, applyReportMigrationError)
	register(TypeStartResharding, applyStartResharding)
	register(TypeAddShard, applyAddShard)
	register(TypeCancelResharding, applyCancelResharding)
	register(TypeSourceMigrationFinalPass, applyFinalPass)
}

func applyCancelResharding(s *State, index uint64, c *CancelResharding) (any, error) {
	return mutate(s, index, c.Database, func(r *DatabaseRecord) (any, error) {
		op, ok := r.Sharding.Resharding[c.OperationID]
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrOperationNotFound, c.OperationID)
		}
		if op.Status != OperationRunning {
			return nil, fmt.Errorf("%w: operation %s is already %s", ErrConflict, op.ID, op.Status)
		}
		op.Status, op.EndedAt = OperationCancelled, c.At
		r.pruneOperations()
		return op, nil
	})
}

// checkRunning refuses work for an operation that is no longer running (a
// driver that read the record before a cancel applied).
func (r *DatabaseRecord) checkRunning(id string) error {
	if id == "" {
		return nil
	}
	if op, ok := r.Sharding.Resharding[id]; ok && op.Status != OperationRunning {
		return fmt.Errorf("%w: operation %s is %s", ErrStale, id, op.Status)
	}
	return nil
}

// mutate applies fn to a copy of db's record and stores the copy (records
// in the state are immutable, see FSM.Record).
func mutate(s *State, index uint64, db string, fn func(r *DatabaseRecord) (any, error)) (any, error) {
	cur, ok := s.Databases[db]
	if !ok {
		return nil, databaseNotFound(db)
	}
	r := cur.cow()
	v, err := fn(r)
	if err != nil {
		return nil, err
	}
	r.Etag = index
	s.Databases[db] = r
	return v, nil
}

// IsActive reports whether a migration still holds its source shard's
// single migration slot (Moving or Moved).
func (m *BucketMigration) IsActive() bool {
	return m.Status == MigrationMoving || m.Status == MigrationMoved
}

func applyStartBucketMigration(s *State, index uint64, c *StartBucketMigration) (any, error) {
	return mutate(s, index, c.Database, func(r *DatabaseRecord) (any, error) {
		if c.Bucket > bucket.MaxID {
			return nil, fmt.Errorf("%w: bucket %d outside 0..%d", ErrInvalid, c.Bucket, bucket.MaxID)
		}
		if err := r.checkShards(c.SourceShard, c.DestinationShard); err != nil {
			return nil, err
		}
		if err := r.checkRunning(c.OperationID); err != nil {
			return nil, err
		}
		if m, ok := r.Sharding.BucketMigrations[c.Bucket]; ok {
			return nil, fmt.Errorf("%w: bucket %d is already migrating (%s, index %d)", ErrConflict, c.Bucket, m.Status, m.MigrationIndex)
		}
		for _, m := range r.Sharding.BucketMigrations {
			if m.SourceShard == c.SourceShard && m.IsActive() {
				return nil, fmt.Errorf("%w: shard %d is already sending bucket %d", ErrConflict, c.SourceShard, m.Bucket)
			}
		}
		owner := r.ShardOf(c.Bucket)
		if !c.Leftovers && owner != c.SourceShard {
			return nil, fmt.Errorf("%w: bucket %d belongs to shard %d, not %d", ErrConflict, c.Bucket, owner, c.SourceShard)
		}
		if c.Leftovers && owner != c.DestinationShard {
			return nil, fmt.Errorf("%w: leftovers of bucket %d must go to its owner %d, not %d", ErrConflict, c.Bucket, owner, c.DestinationShard)
		}
		m := &BucketMigration{Bucket: c.Bucket, SourceShard: c.SourceShard, DestinationShard: c.DestinationShard,
			Status: MigrationMoving, MigrationIndex: index, StatusSince: c.At, Leftovers: c.Leftovers, OperationID: c.OperationID,
			ConfirmedDestinations: []string{}, ConfirmedSourceCleanup: []string{}}
		r.putMigration(c.Bucket, m)
		return m, nil
	})
}

func (r *DatabaseRecord) checkShards(src, dst int) error {
	if _, ok := r.Sharding.Shards[src]; !ok {
		return fmt.Errorf("%w: no shard %d", ErrInvalid, src)
	}
	if _, ok := r.Sharding.Shards[dst]; !ok {
		return fmt.Errorf("%w: no shard %d", ErrInvalid, dst)
	}
	if src == dst {
		return fmt.Errorf("%w: source and destination are both shard %d", ErrInvalid, src)
	}
	return nil
}

// migrationAt returns the migration of bucket started at index in status,
// owned by r for the command to change (see ownMigration).
func (r *DatabaseRecord) migrationAt(b uint32, index uint64, status MigrationStatus) (*BucketMigration, error) {
	m, ok := r.Sharding.BucketMigrations[b]
	if !ok || m.MigrationIndex != index {
		return nil, fmt.Errorf("%w: no migration of bucket %d started at index %d", ErrStale, b, index)
	}
	if m.Status != status {
		return nil, fmt.Errorf("%w: migration of bucket %d (index %d) is %s, not %s", ErrStale, b, index, m.Status, status)
	}
	return r.ownMigration(b), nil
}

func applySendCompleted(s *State, index uint64, c *SourceMigrationSendCompleted) (any, error) {
	return mutate(s, index, c.Database, func(r *DatabaseRecord) (any, error) {
		m, err := r.migrationAt(c.Bucket, c.MigrationIndex, MigrationMoving)
		if err != nil {
			return nil, err
		}
		m.Status, m.StatusSince = MigrationMoved, c.At
		m.LastSourceChangeVector = c.LastSourceChangeVector
		m.SentThrough, m.SentBy, m.SentByNode = maps.Clone(c.SentThrough), c.SentBy, c.SentByNode
		m.Documents, m.Bytes = c.Documents, c.Bytes
		m.LastError, m.Failures = "", 0
		return m, nil
	})
}

func applyFinalPass(s *State, index uint64, c *SourceMigrationFinalPass) (any, error) {
	return mutate(s, index, c.Database, func(r *DatabaseRecord) (any, error) {
		m, err := r.migrationAt(c.Bucket, c.MigrationIndex, MigrationOwnershipTransferred)
		if err != nil {
			return nil, err
		}
		if m.FinalPass != nil {
			return nil, fmt.Errorf("%w: the final pass of bucket %d (index %d) is recorded", ErrStale, c.Bucket, c.MigrationIndex)
		}
		// An empty ChangeVector is a pass that sent nothing: it covers
		// nothing.
		if c.Pass.SentBy == "" || c.Pass.Node == "" || c.Documents < 0 || c.Bytes < 0 {
			return nil, fmt.Errorf("%w: a final pass needs SentBy and Node, and no negative counts", ErrInvalid)
		}
		p := c.Pass
		p.SentThrough = maps.Clone(p.SentThrough)
		m.FinalPass = &p
		m.Documents += c.Documents
		m.Bytes += c.Bytes
		if op := r.Sharding.Resharding[m.OperationID]; op != nil {
			op.DocumentsMoved += c.Documents
			op.BytesMoved += c.Bytes
		}
		return m, nil
	})
}

func applyDestinationConfirm(s *State, index uint64, c *DestinationMigrationConfirm) (any, error) {
	return mutate(s, index, c.Database, func(r *DatabaseRecord) (any, error) {
		m, err := r.migrationAt(c.Bucket, c.MigrationIndex, MigrationMoved)
		if err != nil {
			return nil, err
		}
		members := r.Sharding.Shards[m.DestinationShard].Members
		if !slices.Contains(members, c.Node) {
			return nil, fmt.Errorf("%w: node %s holds no replica of destination shard %d", ErrInvalid, c.Node, m.DestinationShard)
		}
		if !slices.Contains(m.ConfirmedDestinations, c.Node) {
			m.ConfirmedDestinations = append(m.ConfirmedDestinations, c.Node)
		}
		if containsAll(m.ConfirmedDestinations, members) {
			r.transferOwnership(m, c.At, index)
		}
		return m, nil
	})
}

// transferOwnership flips a migration whose every destination replica
// confirmed: the only moment routing changes for its bucket. r must own m
// (see ownMigration).
func (r *DatabaseRecord) transferOwnership(m *BucketMigration, at time.Time, index uint64) {
	m.Status, m.StatusSince, m.ConfirmationIndex = MigrationOwnershipTransferred, at, index
	if r.ShardOf(m.Bucket) != m.DestinationShard {
		r.Sharding.BucketRanges = r.Sharding.BucketRanges.Move(m.Bucket, m.DestinationShard)
	}
	if op := r.Sharding.Resharding[m.OperationID]; op != nil {
		op.BucketsDone++
		op.BucketsMigrated++
		op.DocumentsMoved += m.Documents
		op.BytesMoved += m.Bytes
	}
}

func applySourceCleanup(s *State, index uint64, c *SourceMigrationCleanup) (any, error) {
	return mutate(s, index, c.Database, func(r *DatabaseRecord) (any, error) {
		m, err := r.migrationAt(c.Bucket, c.MigrationIndex, MigrationOwnershipTransferred)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(m.ConfirmedSourceCleanup, c.Node) {
			m.ConfirmedSourceCleanup = append(m.ConfirmedSourceCleanup, c.Node)
		}
		for _, n := range r.Sharding.Shards[m.SourceShard].Members {
			if !slices.Contains(m.ConfirmedSourceCleanup, n) {
				return m, nil
			}
		}
		r.dropMigration(c.Bucket)
		r.finishOperations(c.At)
		return m, nil
	})
}

func applyMoveEmptyBuckets(s *State, index uint64, c *MoveEmptyBuckets) (any, error) {
	return mutate(s, index, c.Database, func(r *DatabaseRecord) (any, error) {
		if err := r.checkShards(c.SourceShard, c.DestinationShard); err != nil {
			return nil, err
		}
		if err := r.checkRunning(c.OperationID); err != nil {
			return nil, err
		}
		// One flip may carry MaxLeaseSpans spans over a record that a
		// large move fragmented into tens of thousands of ranges: each
		// check is a search, and the ranges are rewritten once.
		migrating := make([]uint32, 0, len(r.Sharding.BucketMigrations))
		for b := range r.Sharding.BucketMigrations {
			migrating = append(migrating, b)
		}
		slices.Sort(migrating)
		var moved int64
		for _, sp := range c.Spans {
			if sp.From > sp.To || sp.To > bucket.MaxID {
				return nil, fmt.Errorf("%w: bucket span %d-%d", ErrInvalid, sp.From, sp.To)
			}
			if !r.ownsAll(c.SourceShard, sp.From, sp.To) {
				return nil, fmt.Errorf("%w: shard %d does not own all of buckets %d-%d", ErrConflict, c.SourceShard, sp.From, sp.To)
			}
			if i, _ := slices.BinarySearch(migrating, sp.From); i < len(migrating) && migrating[i] <= sp.To {
				return nil, fmt.Errorf("%w: bucket %d in %d-%d is migrating", ErrConflict, migrating[i], sp.From, sp.To)
			}
			moved += int64(sp.To-sp.From) + 1
		}
		r.Sharding.BucketRanges = r.Sharding.BucketRanges.MoveSpans(c.Spans, c.DestinationShard)
		if op := r.Sharding.Resharding[c.OperationID]; op != nil {
			op.BucketsDone += moved
		}
		r.finishOperations(c.At)
		return moved, nil
	})
}

// ownsAll reports whether shard owns every bucket of [from, to].
func (r *DatabaseRecord) ownsAll(shard int, from, to uint32) bool {
	rs := r.Sharding.BucketRanges
	for i := max(rs.Index(from), 0); i < len(rs) && rs[i].BucketRangeStart <= to; i++ {
		if rs[i].ShardNumber != shard {
			return false
		}
	}
	return true
}

func applyReportMigrationError(s *State, index uint64, c *ReportMigrationError) (any, error) {
	return mutate(s, index, c.Database, func(r *DatabaseRecord) (any, error) {
		m, ok := r.Sharding.BucketMigrations[c.Bucket]
		if !ok || m.MigrationIndex != c.MigrationIndex {
			return nil, fmt.Errorf("%w: no migration of bucket %d at index %d", ErrStale, c.Bucket, c.MigrationIndex)
		}
		m = r.ownMigration(c.Bucket)
		m.LastError = c.Error
		m.Failures++
		if op := r.Sharding.Resharding[m.OperationID]; op != nil {
			op.Errors = append(op.Errors, fmt.Sprintf("%s bucket %d: %s", c.At.Format(time.RFC3339), c.Bucket, c.Error))
			if len(op.Errors) > 20 {
				op.Errors = op.Errors[len(op.Errors)-20:]
			}
		}
		return m, nil
	})
}

func applyStartResharding(s *State, index uint64, c *StartResharding) (any, error) {
	return mutate(s, index, c.Database, func(r *DatabaseRecord) (any, error) {
		if c.FromBucket > c.ToBucket || c.ToBucket > bucket.MaxID {
			return nil, fmt.Errorf("%w: bucket range %d-%d: need 0 <= FromBucket <= ToBucket <= %d", ErrInvalid, c.FromBucket, c.ToBucket, bucket.MaxID)
		}
		if _, ok := r.Sharding.Shards[c.ToShard]; !ok {
			return nil, fmt.Errorf("%w: no shard %d (shards: %v)", ErrInvalid, c.ToShard, r.ShardNumbers())
		}
		if c.OperationID == "" {
			return nil, fmt.Errorf("%w: empty operation id", ErrInvalid)
		}
		if _, ok := r.Sharding.Resharding[c.OperationID]; ok {
			return nil, fmt.Errorf("%w: operation %s exists", ErrConflict, c.OperationID)
		}
		for _, op := range r.Sharding.Resharding {
			if op.Status == OperationRunning && op.FromBucket <= c.ToBucket && c.FromBucket <= op.ToBucket {
				return nil, fmt.Errorf("%w: operation %s is already moving buckets %d-%d to shard %d", ErrConflict, op.ID, op.FromBucket, op.ToBucket, op.ToShard)
			}
		}
		op := &ReshardingOperation{ID: c.OperationID, FromBucket: c.FromBucket, ToBucket: c.ToBucket, ToShard: c.ToShard,
			Status: OperationRunning, StartedAt: c.At, StartIndex: index, AwaitsRange: c.AwaitsRange}
		op.BucketsTotal = int64(c.ToBucket-c.FromBucket) + 1 - r.bucketsOwnedIn(c.ToShard, c.FromBucket, c.ToBucket)
		if c.SettledTotal {
			op.BucketsTotal += r.settlingOnto(c.ToShard, c.FromBucket, c.ToBucket)
		} else {
			// A bucket on its way from the target elsewhere (a cancelled
			// operation's last migration) has to come back: it counts.
			for _, m := range r.Sharding.BucketMigrations {
				if op.leaves(m) && m.SourceShard == c.ToShard {
					op.BucketsTotal++
				}
			}
		}
		r.Sharding.Resharding[c.OperationID] = op
		r.pruneOperations()
		r.finishOperations(c.At)
		return op, nil
	})
}

// bucketsOwnedIn counts the buckets of [from, to] that shard owns.
func (r *DatabaseRecord) bucketsOwnedIn(shard int, from, to uint32) int64 {
	var n int64
	rs := r.Sharding.BucketRanges
	for i := range rs {
		f, t := rs.Span(i)
		if t < from || f > to || rs[i].ShardNumber != shard {
			continue
		}
		n += int64(min(t, to)-max(f, from)) + 1
	}
	return n
}

// settlingOnto is how many more buckets of [from, to] shard will not own,
// compared with now, once the migrations in flight end: +1 for each that
// shard owns and a migration takes elsewhere (a cancelled operation's
// last one, not yet flipped: it has to come back), -1 for each another
// shard owns and a migration brings to shard (it needs no move). A
// migration that already flipped, or that moves leftovers to the owner,
// changes nothing.
func (r *DatabaseRecord) settlingOnto(shard int, from, to uint32) int64 {
	var n int64
	for _, m := range r.Sharding.BucketMigrations {
		if m.Bucket < from || m.Bucket > to {
			continue
		}
		owned, lands := r.ShardOf(m.Bucket) == shard, m.DestinationShard == shard
		switch {
		case owned && !lands:
			n++
		case !owned && lands:
			n--
		}
	}
	return n
}

// finishOperations completes running operations whose range is wholly on
// its target shard with no migration of theirs left, and none taking a
// bucket of the range elsewhere (a cancelled operation's last one).
func (r *DatabaseRecord) finishOperations(at time.Time) {
	for _, op := range r.Sharding.Resharding {
		if op.Status != OperationRunning || !r.ownsAll(op.ToShard, op.FromBucket, op.ToBucket) {
			continue
		}
		busy := false
		for _, m := range r.Sharding.BucketMigrations {
			busy = busy || m.OperationID == op.ID || op.leaves(m)
		}
		if !busy {
			op.Status, op.EndedAt = OperationCompleted, at
		}
	}
}

// leaves reports whether m takes a bucket of op's range to a shard other
// than op's target, when op waits for such migrations (AwaitsRange).
func (op *ReshardingOperation) leaves(m *BucketMigration) bool {
	return op.AwaitsRange && m.Bucket >= op.FromBucket && m.Bucket <= op.ToBucket && m.DestinationShard != op.ToShard
}

// MaxFinishedOperations bounds how many finished operations a record keeps
// (the oldest are pruned when an operation starts).
const MaxFinishedOperations = 50

func (r *DatabaseRecord) pruneOperations() {
	var done []*ReshardingOperation
	for _, op := range r.Sharding.Resharding {
		if op.Status != OperationRunning {
			done = append(done, op)
		}
	}
	if len(done) <= MaxFinishedOperations {
		return
	}
	slices.SortFunc(done, func(a, b *ReshardingOperation) int { return a.EndedAt.Compare(b.EndedAt) })
	for _, op := range done[:len(done)-MaxFinishedOperations] {
		delete(r.Sharding.Resharding, op.ID)
	}
}

func applyAddShard(s *State, index uint64, c *AddShard) (any, error) {
	if len(c.Members) == 0 {
		return nil, fmt.Errorf("%w: a shard needs at least one member", ErrInvalid)
	}
	for i, m := range c.Members {
		if _, ok := s.Nodes[m]; !ok {
			return nil, fmt.Errorf("%w: no node %q in the cluster", ErrInvalid, m)
		}
		if slices.Contains(c.Members[:i], m) {
			return nil, fmt.Errorf("%w: node %q listed twice", ErrInvalid, m)
		}
	}
	return mutate(s, index, c.Database, func(r *DatabaseRecord) (any, error) {
		if len(r.Sharding.Shards) >= MaxShards {
			return nil, fmt.Errorf("%w: the database has the maximum of %d shards", ErrInvalid, MaxShards)
		}
		next := 0
		for n := range r.Sharding.Shards {
			next = max(next, n+1)
		}
		r.Sharding.Shards[next] = &ShardTopology{Members: slices.Clone(c.Members)}
		if c.TrackIndex {
			r.Sharding.Shards[next].AddedIndex = index
		}
		return next, nil
	})
}
