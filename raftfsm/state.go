package raftfsm

import (
	"maps"
	"slices"
	"time"

	"github.com/shardnode/shardnode/bucket"
)

// State is the whole replicated cluster state.
type State struct {
	// Nodes are the cluster members by tag.
	Nodes map[string]*NodeInfo `json:"Nodes"`
	// Databases are the database records by name.
	Databases map[string]*DatabaseRecord `json:"Databases"`
	// Requests remembers recently applied request ids (id → raft index), so a
	// command retried after an ambiguous failure applies once.
	Requests map[string]uint64 `json:"Requests"`
	// RequestOrder is Requests' ids oldest first, for bounded forgetting.
	RequestOrder []string `json:"RequestOrder"`
	// RequestFingerprints holds, for the remembered request ids whose
	// command carried one, its Meta.Fingerprint: what the id was used for.
	// It is forgotten with the id.
	RequestFingerprints map[string]string `json:"RequestFingerprints,omitempty"`
	// NodesIndex is the raft index of the latest change to Nodes (a node
	// added, removed, or re-registered with other addresses); 0 in a state
	// restored from a snapshot of a version without it, until the next
	// change.
	NodesIndex uint64 `json:"NodesIndex,omitempty"`
	// Index is the raft index of the last applied entry.
	Index uint64 `json:"Index"`
}

// maxRememberedRequests bounds State.Requests.
const maxRememberedRequests = 10000

// NodeInfo describes one cluster member.
type NodeInfo struct {
	// Tag is the node's tag (A, B, ...).
	Tag string `json:"Tag"`
	// HttpUrl is the node's HTTP API address.
	HttpUrl string `json:"HttpUrl"`
	// RaftAddr is the node's raft transport address.
	RaftAddr string `json:"RaftAddr"`
	// NatsUrl is the client URL of the node's embedded NATS server, if any.
	NatsUrl string `json:"NatsUrl,omitempty"`
	// ID identifies the node's data directory (its NODE_ID file). Once
	// recorded, a registration of the tag with another id is refused: it
	// would be another directory under this member's name, without its
	// raft log or its replicas. Empty for a node that registered before
	// ids existed, until it registers again.
	ID string `json:"Id,omitempty"`
	// JoinedAt is when the node was added.
	JoinedAt time.Time `json:"JoinedAt"`
}

// DatabaseRecord is one database's configuration. A record in the state is
// immutable: a command that changes it stores a changed copy (Clone), so
// FSM.Record can hand it out without copying.
type DatabaseRecord struct {
	// DatabaseName is the database's name.
	DatabaseName string `json:"DatabaseName"`
	// DatabaseID identifies the database (not a replica) in the MOVE marker
	// of moved items' change vectors.
	DatabaseID string `json:"DatabaseId"`
	// ReplicationFactor is how many nodes hold each shard.
	ReplicationFactor int `json:"ReplicationFactor"`
	// Sharding holds shards, bucket ranges and migrations.
	Sharding Sharding `json:"Sharding"`
	// CreatedAt is when the database was created.
	CreatedAt time.Time `json:"CreatedAt"`
	// CreatedIndex is the raft index that created the database.
	CreatedIndex uint64 `json:"CreatedIndex"`
	// Etag is the raft index of the record's latest change.
	Etag uint64 `json:"Etag"`

	// touched lists the buckets whose migration entry the command that
	// made this version added, replaced or removed, when the version was
	// made from the one of etag base (see cow); nil when unknown. The
	// journal's diff then looks at those entries alone, not at every
	// migration of the record: with 10,000 moved buckets waiting for a
	// down node's cleanup, comparing them all took 0.8 ms per command.
	// Not part of the replicated state.
	touched []uint32
	base    uint64
}

// Sharding is the sharding part of a database record.
type Sharding struct {
	// Shards are the shards' topologies by shard number.
	Shards map[int]*ShardTopology `json:"Shards"`
	// BucketRanges map buckets to shards.
	BucketRanges bucket.Ranges `json:"BucketRanges"`
	// BucketMigrations are the running bucket migrations by bucket.
	BucketMigrations map[uint32]*BucketMigration `json:"BucketMigrations"`
	// Resharding are the range-move operations, by operation id.
	Resharding map[string]*ReshardingOperation `json:"Resharding"`
}

// ShardTopology lists the nodes holding replicas of one shard.
type ShardTopology struct {
	// Members are node tags, in preference order.
	Members []string `json:"Members"`
	// AddedIndex is the raft index of the AddShard that added the shard
	// (0 for the shards the database was created with, and for shards
	// added by commands older than the field).
	AddedIndex uint64 `json:"AddedIndex,omitempty"`
}

// MigrationStatus is a bucket migration's step.
type MigrationStatus string

// Migration steps, in order.
const (
	MigrationMoving               MigrationStatus = "Moving"
	MigrationMoved                MigrationStatus = "Moved"
	MigrationOwnershipTransferred MigrationStatus = "OwnershipTransferred"
)

// BucketMigration is the record of one bucket moving between shards.
type BucketMigration struct {
	Bucket                 uint32          `json:"Bucket"`
	SourceShard            int             `json:"SourceShard"`
	DestinationShard       int             `json:"DestinationShard"`
	Status                 MigrationStatus `json:"Status"`
	MigrationIndex         uint64          `json:"MigrationIndex"`
	ConfirmationIndex      uint64          `json:"ConfirmationIndex"`
	LastSourceChangeVector string          `json:"LastSourceChangeVector"`
	// SentThrough, set with LastSourceChangeVector by senders of this
	// version, is per source replica (by its database id) how far that
	// replica's feed had reached the sender when it reported Moved: its
	// own feed position for the sender's replica, its replication progress
	// from each other one. A source replica purges only items it stored at
	// or below its bound: a merged version vector alone also covers items
	// the sender never had (versions from other shards' replicas follow no
	// feed order here), and purging those lost them.
	SentThrough map[string]uint64 `json:"SentThrough,omitempty"`
	// SentBy is the database id of the replica that sent the bucket: what
	// another replica got from it was its, so its version tells.
	SentBy string `json:"SentBy,omitempty"`
	// SentByNode is the node of that replica. When its cleanup is
	// recorded without a FinalPass, its last pass sent nothing new.
	SentByNode string `json:"SentByNode,omitempty"`
	// FinalPass, recorded after the flip, is what the sender's last pass
	// covered; nil until then, when that pass sent nothing new, and in
	// records of older senders.
	FinalPass              *MigrationPass `json:"FinalPass,omitempty"`
	ConfirmedDestinations  []string       `json:"ConfirmedDestinations"`
	ConfirmedSourceCleanup []string       `json:"ConfirmedSourceCleanup"`
	// Leftovers marks a migration started by the documents migrator for
	// items found in a bucket the source no longer owns.
	Leftovers bool `json:"Leftovers,omitempty"`
	// OperationID names the resharding operation that started it, if any.
	OperationID string `json:"OperationId,omitempty"`
	// StatusSince is when Status last changed.
	StatusSince time.Time `json:"StatusSince"`
	// Documents and Bytes count what the source sent.
	Documents int64 `json:"Documents"`
	Bytes     int64 `json:"Bytes"`
	// LastError and Failures report a step that keeps failing.
	LastError string `json:"LastError,omitempty"`
	Failures  int    `json:"Failures,omitempty"`
}

// MigrationPass is what a sender's pass over a bucket covered: a source
// replica purges an item only if the pass covers its version and the
// sender had it (see BucketMigration.SentThrough).
type MigrationPass struct {
	// ChangeVector merges the versions of everything the sender sent.
	ChangeVector string `json:"ChangeVector"`
	// SentThrough bounds, per source replica (by database id), the local
	// etags of what the sender had when it made the pass.
	SentThrough map[string]uint64 `json:"SentThrough,omitempty"`
	// SentBy is the sending replica's database id, Node its node: a
	// replica that got items from the sender waits for its feed to reach
	// SentThrough[SentBy] before it purges, while that node is up.
	SentBy string `json:"SentBy"`
	Node   string `json:"Node"`
}

// Operation statuses.
const (
	OperationRunning   = "Running"
	OperationCompleted = "Completed"
	OperationCancelled = "Cancelled"
)

// ReshardingOperation is one request to move a range of buckets to a
// shard; it proceeds one bucket at a time per source shard.
type ReshardingOperation struct {
	ID           string `json:"OperationId"`
	FromBucket   uint32 `json:"FromBucket"`
	ToBucket     uint32 `json:"ToBucket"`
	ToShard      int    `json:"ToShard"`
	Status       string `json:"Status"`
	BucketsTotal int64  `json:"BucketsTotal"`
	BucketsDone  int64  `json:"BucketsDone"`
	// BucketsMigrated counts the buckets of BucketsDone that held
	// documents or tombstones and moved with them, one at a time; the
	// others were empty and changed owner in bulk.
	BucketsMigrated int64     `json:"BucketsMigrated"`
	DocumentsMoved  int64     `json:"DocumentsMoved"`
	BytesMoved      int64     `json:"BytesMoved"`
	StartedAt       time.Time `json:"StartedAt"`
	EndedAt         time.Time `json:"EndedAt,omitzero"`
	StartIndex      uint64    `json:"StartIndex"`
	Errors          []string  `json:"Errors,omitempty"`
	// AwaitsRange: the operation counts, and completes only after, the
	// buckets of its range that were migrating elsewhere when it started
	// (set by StartResharding commands of this version; operations of
	// older log entries keep the rule they were applied with).
	AwaitsRange bool `json:"AwaitsRange,omitempty"`
}

// ShardOf returns the shard that owns bucket b.
func (r *DatabaseRecord) ShardOf(b uint32) int { return r.Sharding.BucketRanges.ShardOf(b) }

// ShardNumbers returns the record's shard numbers in ascending order.
func (r *DatabaseRecord) ShardNumbers() []int {
	out := make([]int, 0, len(r.Sharding.Shards))
	for n := 0; len(out) < len(r.Sharding.Shards); n++ {
		if _, ok := r.Sharding.Shards[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

// Clone returns a deep copy, safe to hand out of the state machine.
func (r *DatabaseRecord) Clone() *DatabaseRecord {
	c := r.cow()
	c.touched = nil
	c.Sharding.BucketRanges = slices.Clone(r.Sharding.BucketRanges)
	for b, m := range r.Sharding.BucketMigrations {
		c.Sharding.BucketMigrations[b] = m.clone()
	}
	return c
}

// cow returns the copy a command changes: the record's next version. It
// shares the bucket ranges and the migration entries with r, which are
// immutable (a new range list replaces the old one; ownMigration copies
// an entry before it changes), and copies the rest, which is small.
//
// A deep copy per command made each command cost as much as the record
// holds, and the journal of changes kept every version of every entry
// alive. With a source node down during a range move each moved bucket
// waits in the record for that node's cleanup: a node's Go heap reached
// 1 GB at 1,000 such entries, and one command cost 0.84 ms and 632 KB
// (12 ms and 6.2 MB at 10,000) where it now costs 0.11 ms and 40 KB
// (BenchmarkCommandWithManyMigrations). At 10,000 it costs 0.3 ms and
// 300 KB, mostly this copy of the migrations map; the journal's diff
// looks only at the entries the command touched (see touched).
func (r *DatabaseRecord) cow() *DatabaseRecord {
	c := *r
	c.touched, c.base = []uint32{}, r.Etag
	c.Sharding.Shards = make(map[int]*ShardTopology, len(r.Sharding.Shards))
	for n, t := range r.Sharding.Shards {
		c.Sharding.Shards[n] = &ShardTopology{Members: slices.Clone(t.Members), AddedIndex: t.AddedIndex}
	}
	c.Sharding.BucketMigrations = maps.Clone(r.Sharding.BucketMigrations)
	if c.Sharding.BucketMigrations == nil {
		c.Sharding.BucketMigrations = map[uint32]*BucketMigration{}
	}
	c.Sharding.Resharding = make(map[string]*ReshardingOperation, len(r.Sharding.Resharding))
	for id, op := range r.Sharding.Resharding {
		co := *op
		co.Errors = slices.Clone(op.Errors)
		c.Sharding.Resharding[id] = &co
	}
	return &c
}

// clone returns a deep copy of m.
func (m *BucketMigration) clone() *BucketMigration {
	c := *m
	c.ConfirmedDestinations = slices.Clone(m.ConfirmedDestinations)
	c.ConfirmedSourceCleanup = slices.Clone(m.ConfirmedSourceCleanup)
	c.SentThrough = maps.Clone(m.SentThrough)
	if m.FinalPass != nil {
		p := *m.FinalPass
		p.SentThrough = maps.Clone(p.SentThrough)
		c.FinalPass = &p
	}
	return &c
}

// ownMigration returns bucket b's migration entry for the command that
// changes it (see cow): a copy that replaces the shared entry in r, so
// that the versions before this one keep theirs. nil if there is none.
func (r *DatabaseRecord) ownMigration(b uint32) *BucketMigration {
	m, ok := r.Sharding.BucketMigrations[b]
	if !ok {
		return nil
	}
	c := m.clone()
	r.putMigration(b, c)
	return c
}

// putMigration sets bucket b's migration entry in a version cow made.
func (r *DatabaseRecord) putMigration(b uint32, m *BucketMigration) {
	r.Sharding.BucketMigrations[b] = m
	r.touch(b)
}

// dropMigration removes bucket b's migration entry from a version cow
// made.
func (r *DatabaseRecord) dropMigration(b uint32) {
	delete(r.Sharding.BucketMigrations, b)
	r.touch(b)
}

func (r *DatabaseRecord) touch(b uint32) {
	if r.touched != nil {
		r.touched = append(r.touched, b)
	}
}

func newState() *State {
	return &State{Nodes: map[string]*NodeInfo{}, Databases: map[string]*DatabaseRecord{}, Requests: map[string]uint64{}, RequestFingerprints: map[string]string{}}
}

// remember records a request id as applied at index by a command with
// that fingerprint ("" for none).
func (s *State) remember(id string, index uint64, fingerprint string) {
	if id == "" {
		return
	}
	s.Requests[id] = index
	if fingerprint != "" {
		s.RequestFingerprints[id] = fingerprint
	}
	s.RequestOrder = append(s.RequestOrder, id)
	for len(s.RequestOrder) > maxRememberedRequests {
		delete(s.Requests, s.RequestOrder[0])
		delete(s.RequestFingerprints, s.RequestOrder[0])
		s.RequestOrder = s.RequestOrder[1:]
	}
}
