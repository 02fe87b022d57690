package resharding

import (
	"context"
	"time"

	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/replication"
	"github.com/shardnode/shardnode/storage"
)

// Cluster is what the resharding workers need from their node.
type Cluster interface {
	// NodeTag is this node's tag.
	NodeTag() string
	// Record returns db's current record (immutable), or nil.
	Record(db string) *raftfsm.DatabaseRecord
	// Watch notifies raft applies (coalesced).
	Watch() (<-chan uint64, func())
	// Propose applies a command through raft (forwarding to the leader).
	Propose(ctx context.Context, cmd raftfsm.Command) error
	// IsLeader reports whether this node is the raft leader.
	IsLeader() bool
	// Up reports whether a node is reachable.
	Up(tag string) bool
	// Behind reports that this node's replica of the shard is catching up
	// with its peers (after a restart or time out of touch): it does not
	// serve yet, and may lack writes another member took meanwhile.
	Behind(db string, shard int) bool
	// Stopping reports that this node stops cleanly: its replicas hand
	// their writes over to the shards' other members, so it does no
	// single-copy work any more (a last pass it made would miss the
	// writes they take from then on).
	Stopping() bool
	// SendBatch stores a migration batch on every reachable replica of its
	// destination shard at once and returns once all of them answered, with
	// an error only if none committed it. A replica that missed it gets the
	// items from its siblings by intra-shard replication; one that got them
	// both ways keeps one (same version). Each destination replica thus
	// confirms from its own commits, without waiting for replication.
	SendBatch(ctx context.Context, b *Batch) error
	// AnnounceLastPass tells the destination shard's reachable replicas
	// what the sender's last pass after the flip covered, once it is
	// stored, ahead of SourceMigrationFinalPass: a replica that holds all
	// of it takes the bucket's writes at once instead of waiting for the
	// record. Best effort; it returns when each replica answered or gave
	// up.
	AnnounceLastPass(ctx context.Context, p LastPass)
	// ThrottleSend returns once this node's move bandwidth
	// (resharding.max-send-bytes-per-sec, shared by every migration it
	// sends) allows a batch of bytes more, at once when it is unlimited,
	// or with ctx's error.
	ThrottleSend(ctx context.Context, bytes int) error
	// SendLimit is this node's move bandwidth in bytes per second, 0 for
	// none: a paced sender makes its batches about a second's worth.
	SendLimit() int64
	// WaitAllApplied returns once every reachable node applied index.
	WaitAllApplied(ctx context.Context, index uint64) error
	// NotePurge is called before a source replica purges a moved bucket:
	// reads routed with a record older than index must be refused from then
	// on, because the replica no longer holds what they expect.
	NotePurge(db string, shard int, index uint64)
	// FenceWrites returns once every client write to db's local shard
	// replica that passed the ownership check before the call committed,
	// or with an error when ctx ends first. Writes arriving meanwhile are
	// not held back.
	FenceWrites(ctx context.Context, db string, shard int) error
	// FenceSourceReplicas tells the source shard's other reachable
	// replicas that bucket flipped to shard to (the record at recordEtag
	// shows it), so they refuse its writes from then on, and returns once
	// this node's replica holds every client write they took into it
	// before, as far as they answer within a bound; an error only when
	// ctx ends. A router that found the sender down or refusing sent such
	// writes there, and a last pass without them left them behind while
	// the destination took the bucket's writes.
	//
	// leases are what the peers promised in answer to LeaseSourceReplicas
	// for this migration: a peer whose promise still holds long enough is
	// not asked again, and the flip's writes do not wait for a round trip
	// to it.
	FenceSourceReplicas(ctx context.Context, db string, shard int, bucket uint32, to int, recordEtag uint64, leases []PeerLease) error
	// LeaseSourceReplicas asks the source shard's other reachable replicas
	// to refuse bucket's client writes from now until the migration at
	// migrationIndex flips or ends (as their records show it, from the
	// record at recordEtag on), for a bounded time, and answers what
	// each promised: those that answered within a bound. The sender asks
	// as its bucket is about to reach Moved, and again while it stays
	// there, so that at the flip it needs no round trip to them.
	LeaseSourceReplicas(ctx context.Context, db string, shard int, bucket uint32, migrationIndex, recordEtag uint64) []PeerLease
	// LeaseEmptySpans asks every reachable replica of db's shard to
	// refuse routed writes into spans (buckets the driver found empty and
	// is about to flip to shard to in bulk) until its node applies their
	// flip, for a few seconds at most, once the writes it has in flight
	// committed; it returns the buckets of the spans that any of them
	// holds items in, and when the flip must commit by for the leases to
	// cover it. A replica that is up and does not answer is an error: a
	// write it takes into the spans would be left on the source, where
	// the new owner does not see it until the driver moves it. One of a
	// version without the lease reports nothing, as before.
	LeaseEmptySpans(ctx context.Context, db string, shard, to int, spans []raftfsm.BucketSpan) (SpanLease, error)
	// ReleaseEmptySpans ends, on every reachable replica of db's shard,
	// the leases LeaseEmptySpans took on spans whose flip did not commit,
	// so that their writes do not wait out the lease. Best effort: a
	// replica that does not hear it refuses them for a few seconds more.
	ReleaseEmptySpans(ctx context.Context, db string, shard int, spans []raftfsm.BucketSpan)
	// ObserveLastPass reports how long the steps of a last pass after a
	// flip took on its sender, once the pass is stored at the
	// destination: the new owner holds the bucket's writes meanwhile.
	ObserveLastPass(t LastPassTimings)
	// Failpoint pauses at a named step when a fault test configured it
	// (debug.failpoints); otherwise it returns at once.
	Failpoint(ctx context.Context, name string)
	// WaitReady returns once the node has replayed the raft log and caught
	// up with the cluster (or ctx ends): agents act on the records of the
	// present, not on those of a replay, where a bucket's owner and a
	// migration's step can be long out of date.
	WaitReady(ctx context.Context) error
	// MigratorInterval is the documents migrator's sweep interval.
	MigratorInterval() time.Duration
	// MaxAwaitingCleanup bounds a database's migrations waiting for their
	// source cleanup (OwnershipTransferred) before the driver starts no
	// new bucket of its operations; 0 is no bound.
	MaxAwaitingCleanup() int
	// RangeStats returns the bucket statistics of db's shard in [from, to]
	// from one of its replicas.
	RangeStats(ctx context.Context, db string, shard int, from, to uint32) ([]storage.BucketStats, error)
	// ItemVersions returns the change vector of each of ids that one of
	// db's shard's replicas holds, tombstones included; an id it does not
	// hold is absent.
	ItemVersions(ctx context.Context, db string, shard int, ids []string) (map[string]string, error)
}

// Batch is a run of one migrating bucket's items sent to the destination.
type Batch struct {
	DB             string             `json:"Db"`
	Shard          int                `json:"Shard"`
	Bucket         uint32             `json:"Bucket"`
	MigrationIndex uint64             `json:"MigrationIndex"`
	DatabaseID     string             `json:"DatabaseId"`
	Items          []replication.Item `json:"Items"`
	// LastPass is set on the last batch of the sender's last pass after
	// the ownership flip, when that pass sent anything: the merged version of
	// everything the sender sent, as its record will say. A destination
	// replica that stored it and holds that version takes the bucket's
	// writes (see Cluster.AnnounceLastPass). It is not part of the binary
	// format: it travels as a bus header, which older nodes ignore.
	LastPass string `json:"LastPass,omitempty"`
}

// LastPass is what a sender's last pass after the ownership flip covered,
// as AnnounceLastPass tells it.
type LastPass struct {
	DB             string
	Shard          int // the destination shard
	Bucket         uint32
	MigrationIndex uint64
	// ChangeVector is the merged version of everything the sender sent
	// (the pass's record carries the same).
	ChangeVector string
}

// SpanLease is what the source replicas answered to LeaseEmptySpans.
type SpanLease struct {
	// Held lists the buckets of the spans (ascending) that some replica
	// holds items in: they move one at a time instead.
	Held []uint32
	// FlipBy is when the flip must have committed by, on the asking
	// node's clock, for every lease to hold until no replica can take a
	// write into the spans without knowing of it.
	FlipBy time.Time
}

// PeerLease is one source replica's promise, answered to
// LeaseSourceReplicas, to refuse a moving bucket's client writes until it
// applies the flip or Until passes, whichever is first.
type PeerLease struct {
	// Node is the peer's node tag.
	Node string
	// DatabaseID is the peer replica's database id, and OwnEtag the etag
	// of the newest write it took itself into the bucket before it
	// promised (0 for none): what the last pass waits to hold.
	DatabaseID string
	OwnEtag    uint64
	// Until is when the promise ends at the latest, on the asking node's
	// clock: the peer counts its window from when it got the request,
	// which was after this node sent it.
	Until time.Time
}

// LastPassTimings is how long the steps of one last pass after the
// ownership flip took on its sender, from the moment it saw the flip: the
// bucket's writes wait at the new owner for the pass, so these are what a
// flip costs them beyond the rerouting. FenceWrites and FencePeers run at
// once; Send follows both.
type LastPassTimings struct {
	DB     string
	Bucket uint32
	// FenceWrites is the wait for the client writes this replica took
	// before it applied the flip to commit.
	FenceWrites time.Duration
	// FencePeers is the wait for the source shard's other replicas to
	// answer the fence and for the writes they took themselves to arrive
	// here (0 for a shard of one member).
	FencePeers time.Duration
	// Send is the pass itself, from both fences to the pass stored on the
	// destination's replicas.
	Send time.Duration
	// Total runs from seeing the flip to the pass stored.
	Total time.Duration
}

// ApplyBatch stores a migration batch on the destination replica s: each
// item keeps its version and gets this replica's order plus the MOVE
// marker; items already held are no-ops. queued, when not nil, runs once
// the batch is in the store's commit queue (see storage.Store.WriteQueued),
// and not at all for a batch with no items.
func ApplyBatch(ctx context.Context, s *storage.Store, b *Batch, queued func()) error {
	if len(b.Items) == 0 {
		return nil // a last pass that sent nothing new: no commit
	}
	ops := make([]storage.Op, len(b.Items))
	for i, it := range b.Items {
		ops[i] = storage.Op{Kind: storage.OpMigrate, ID: it.ID, Collection: it.Collection, Body: it.Body, ChangeVector: it.ChangeVector,
			LastModified: it.LastModified, Flags: it.Flags, MigrationIndex: b.MigrationIndex, DatabaseID: b.DatabaseID}
	}
	_, err := s.WriteQueued(ctx, ops, queued)
	return err
}

// Tunables.
const (
	batchItems     = 512
	batchBytes     = 4 << 20
	stuckAfter     = 60 * time.Second
	reportFailures = 3 // a step failing this many times in a row is recorded
)

// minPacedBatch is the smallest batch bound of a paced sender (see
// batchBytesFor).
const minPacedBatch = 16 << 10

// batchBytesFor is a Moving bucket's batch bound at a move bandwidth of
// bps bytes per second (0: none): about a second's worth, so that a paced
// move stores a batch every second or so, and what it shows (Sent, the
// rate, the stuck test's "no batch stored for 60 s") moves as it does.
// At 25 KiB/s a 4 MiB batch took nearly three minutes, and a healthy
// paced move was flagged stuck.
func batchBytesFor(bps int64) int {
	if bps <= 0 || bps >= batchBytes {
		return batchBytes
	}
	return int(max(bps, minPacedBatch))
}

// StuckAfter is how long a migration may stay in one status before the API
// calls it stuck.
const StuckAfter = stuckAfter
