package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/storage"
)

// Transport carries replication messages to a peer node.
type Transport interface {
	// Progress asks peer how far its replica applied source's feed; the
	// reply also names the peer replica's database id.
	Progress(ctx context.Context, peer string, req *ProgressRequest) (*ProgressReply, error)
	// Send delivers a batch to peer's replica and returns its progress and
	// the items it kept only as conflict losers.
	Send(ctx context.Context, peer string, b *Batch) (*ProgressReply, error)
}

// Limits of one batch.
const (
	maxBatchItems = 1024
	maxBatchBytes = 4 << 20
)

// BatchLimiter is a Transport whose messages are smaller than maxBatchBytes
// (an external NATS server allows 1 MiB by default): batches stay within
// MaxBatchBytes, except that one item always goes, whatever its size.
type BatchLimiter interface {
	MaxBatchBytes() int
}

// PeerStatus is one outgoing replication link as the API shows it.
type PeerStatus struct {
	// Peer is the receiving node's tag.
	Peer string `json:"Peer"`
	// AckedEtag is the last local etag the peer confirmed.
	AckedEtag uint64 `json:"AckedEtag"`
	// LastError is the latest failure, if the link is retrying.
	LastError string `json:"LastError,omitempty"`
	// Paused reports a link paused by an operator or a test.
	Paused bool `json:"Paused,omitempty"`
	// ItemsSent counts the items the peer acknowledged since this node
	// opened the replica, StubsSent those of them sent as stubs (a
	// migration's items the peer was sent too), and StubsMissing the
	// batches the peer answered Missing (it lacked what stubs named, and
	// got the items whole).
	ItemsSent    uint64 `json:"ItemsSent"`
	StubsSent    uint64 `json:"StubsSent"`
	StubsMissing uint64 `json:"StubsMissing"`
}

// Replicator pushes one local replica's changes to the other replicas of
// its shard. It owns one sender goroutine per peer.
type Replicator struct {
	store     *storage.Store
	db        string
	shard     int
	transport Transport
	logger    *slog.Logger

	mu      sync.Mutex
	senders map[string]*sender
	acked   chan struct{} // closed and replaced when any peer's ack moves
	paused  bool
	closed  bool
	// wrote is the latest etag of a client write this replica took (see
	// Wrote): what its peers must hold before another member takes the
	// shard's writes in its place.
	wrote uint64
	// superseded holds this replica's own versions that lost a conflict
	// to a replicated item (see Apply).
	superseded losses
}

type sender struct {
	peer   string
	cancel context.CancelFunc
	done   chan struct{}
	acked  uint64
	err    string
	// lost holds, by document id, the items the peer kept only as
	// conflict losers (ProgressReply.Lost).
	lost losses
	// items, stubs and missing count for PeerStatus.
	items, stubs, missing uint64
}

// lostKept is how long a conflict loss is remembered: longer than any
// write waits for replicas.
const lostKept = 5 * time.Minute

// conflictLoss is one conflict a version lost: the writes in the loser's
// history that the winner's does not cover are superseded.
type conflictLoss struct {
	id            string
	loser, winner changevector.Vector
	at            time.Time
}

func newConflictLoss(id, loser, winner string) (conflictLoss, error) {
	l, err := changevector.ParseVector(loser)
	if err != nil {
		return conflictLoss{}, err
	}
	w, err := changevector.ParseVector(winner)
	if err != nil {
		return conflictLoss{}, err
	}
	return conflictLoss{id: id, loser: l, winner: w, at: time.Now()}, nil
}

// supersedes reports whether the loss takes the write of version v away.
func (l conflictLoss) supersedes(v changevector.Vector) bool {
	return l.loser.Covers(v) && !l.winner.Covers(v)
}

// losses are conflict losses by document id.
type losses map[string][]conflictLoss

// add records l, forgetting what is older than lostKept.
func (ls *losses) add(l conflictLoss) {
	if *ls == nil {
		*ls = losses{}
	}
	for id, list := range *ls {
		list = slices.DeleteFunc(list, func(o conflictLoss) bool { return l.at.Sub(o.at) > lostKept })
		if len(list) == 0 {
			delete(*ls, id)
		} else {
			(*ls)[id] = list
		}
	}
	(*ls)[l.id] = append((*ls)[l.id], l)
}

// supersede returns a recorded loss that takes w away.
func (ls losses) supersede(w Written) (conflictLoss, bool) {
	for _, l := range ls[w.ID] {
		if l.supersedes(w.Version) {
			return l, true
		}
	}
	return conflictLoss{}, false
}

// Written is one change of a local write that waits for replicas.
type Written struct {
	// Etag is the change's local etag.
	Etag uint64
	// ID is the document's id.
	ID string
	// Version is the version part of its change vector.
	Version changevector.Vector
}

// ErrSuperseded means a write waiting for replicas lost a conflict on a
// replica: a concurrent write of the same document, taken by another
// replica, won there, and wins on every replica (resolution is the same
// everywhere). The write is durable, and in the conflict log; a later
// write on its own side, made on top of it before that side learned of
// the loss, can still win a later conflict and carry it, so its outcome
// is not decided.
var ErrSuperseded = errors.New("a concurrent write of the same document on another replica won")

// New returns a Replicator for store, the replica of db's shard.
func New(store *storage.Store, db string, shard int, t Transport, logger *slog.Logger) *Replicator {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Replicator{store: store, db: db, shard: shard, transport: t, logger: logger.With("db", db, "shard", shard),
		senders: map[string]*sender{}, acked: make(chan struct{})}
}

// SetPeers starts a sender for each new peer and stops those no longer
// listed.
func (r *Replicator) SetPeers(peers []string) {
	r.mu.Lock()
	var stopped []*sender
	defer func() {
		r.mu.Unlock()
		for _, s := range stopped { // senders take r.mu: wait outside it
			s.cancel()
			<-s.done
		}
	}()
	if r.closed {
		return
	}
	for tag, s := range r.senders {
		if !slices.Contains(peers, tag) {
			stopped = append(stopped, s)
			delete(r.senders, tag)
		}
	}
	for _, p := range peers {
		if _, ok := r.senders[p]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		s := &sender{peer: p, cancel: cancel, done: make(chan struct{})}
		r.senders[p] = s
		go r.run(ctx, s)
	}
}

// SetPaused stops (true) or resumes (false) sending; for operators
// isolating a replica, and for tests that need replicas to diverge.
func (r *Replicator) SetPaused(p bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = p
	r.bump()
}

// Close stops every sender and waits for them.
func (r *Replicator) Close() {
	r.mu.Lock()
	r.closed = true
	ss := r.senders
	r.senders = map[string]*sender{}
	r.mu.Unlock()
	for _, s := range ss {
		s.cancel()
		<-s.done
	}
}

// Status lists the outgoing links.
func (r *Replicator) Status() []PeerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]PeerStatus, 0, len(r.senders))
	for _, s := range r.senders {
		out = append(out, PeerStatus{Peer: s.peer, AckedEtag: s.acked, LastError: s.err, Paused: r.paused,
			ItemsSent: s.items, StubsSent: s.stubs, StubsMissing: s.missing})
	}
	slices.SortFunc(out, func(a, b PeerStatus) int { return cmpString(a.Peer, b.Peer) })
	return out
}

// WaitReplicas waits until n replicas (this one included) hold the local
// changes of one write, and returns how many do when it gives up. A
// replica where a concurrent version of the same document won a conflict
// over one of them (or over a later local version that includes it) does
// not hold it: the wait ends at once with ErrSuperseded.
func (r *Replicator) WaitReplicas(ctx context.Context, changes []Written, n int) (int, error) {
	var etag uint64
	for _, w := range changes {
		etag = max(etag, w.Etag)
	}
	for {
		r.mu.Lock()
		have := 1
		lost := ""
		for _, w := range changes {
			if l, ok := r.superseded.supersede(w); ok {
				lost = fmt.Sprintf("this one (%q at %s lost to %s)", w.ID, l.loser, l.winner)
			}
		}
		for _, s := range r.senders {
			for _, w := range changes {
				if l, ok := s.lost.supersede(w); ok {
					lost = fmt.Sprintf("on node %s (%q at %s lost to %s)", s.peer, w.ID, l.loser, l.winner)
				}
			}
			if s.acked >= etag {
				have++
			}
		}
		ch := r.acked
		r.mu.Unlock()
		if lost != "" {
			return 1, fmt.Errorf("shard %d: the replica %s resolved a conflict against the write: %w", r.shard, lost, ErrSuperseded)
		}
		if have >= n {
			return have, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return have, fmt.Errorf("only %d of %d replicas of shard %d hold etag %d: %w", have, n, r.shard, etag, ctx.Err())
		}
	}
}

// Drain waits until every peer acknowledged the local change with etag,
// except the peers skip names (a node known down) and those whose link is
// failing; it returns the peers still behind when ctx ends, or none. A
// node that stops cleanly drains first, so the member that takes its
// shard's writes next holds every write it acknowledged.
func (r *Replicator) Drain(ctx context.Context, etag uint64, skip func(peer string) bool) []string {
	recheck := time.NewTicker(100 * time.Millisecond) // skip's answers change without an ack
	defer recheck.Stop()
	for {
		r.mu.Lock()
		var behind []string
		for _, s := range r.senders {
			if s.acked < etag && s.err == "" && !r.paused && !skip(s.peer) {
				behind = append(behind, s.peer)
			}
		}
		ch := r.acked
		r.mu.Unlock()
		if len(behind) == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-recheck.C:
		case <-ctx.Done():
			slices.Sort(behind)
			return behind
		}
	}
}

// Wrote records that this replica committed a client write at etag. A
// replica that stops taking the shard's writes (its router then sends
// them to another member) waits for its peers to hold it (WaitWrites).
func (r *Replicator) Wrote(etag uint64) {
	r.mu.Lock()
	r.wrote = max(r.wrote, etag)
	r.mu.Unlock()
}

// WaitWrites waits until every peer, except those skip names (a node known
// down), acknowledged the latest client write recorded by Wrote; it
// returns the peers still behind when ctx ends, or none. Unlike Drain it
// does not pass over a failing or paused link: a peer that may lack a
// write this replica acknowledged must not take the shard's next writes.
func (r *Replicator) WaitWrites(ctx context.Context, skip func(peer string) bool) []string {
	var recheck <-chan time.Time // skip's answers change without an ack
	for {
		r.mu.Lock()
		var behind []string
		for _, s := range r.senders {
			if s.acked < r.wrote && !skip(s.peer) {
				behind = append(behind, s.peer)
			}
		}
		ch := r.acked
		r.mu.Unlock()
		if len(behind) == 0 {
			return nil
		}
		if recheck == nil {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			recheck = t.C
		}
		select {
		case <-ch:
		case <-recheck:
		case <-ctx.Done():
			slices.Sort(behind)
			return behind
		}
	}
}

// bump wakes waiters; r.mu is held.
func (r *Replicator) bump() {
	close(r.acked)
	r.acked = make(chan struct{})
}

func (r *Replicator) isPaused() (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paused, r.acked
}

// run is one peer's sender: learn the peer's progress, then send the feed
// from there, waiting for new commits when caught up.
func (r *Replicator) run(ctx context.Context, s *sender) {
	defer close(s.done)
	backoff := newBackoff(50*time.Millisecond, 2*time.Second)
	known := false
	var progress uint64
	var peerDB string  // the peer replica's database id, once known
	var peerFormat int // the newest batch format the peer decodes
	var stubs stubbing
	for ctx.Err() == nil {
		if paused, ch := r.isPaused(); paused {
			select {
			case <-ch:
			case <-ctx.Done():
			}
			continue
		}
		if !known {
			p, err := r.transport.Progress(ctx, s.peer, &ProgressRequest{DB: r.db, Shard: r.shard, Source: r.store.DatabaseID()})
			if err != nil {
				r.fail(s, err)
				backoff.wait(ctx)
				continue
			}
			progress, peerDB, peerFormat, known = p.Etag, p.DatabaseID, p.BatchFormat, true
			r.ack(s, progress)
		}
		changed := r.store.Changed() // before reading: no commit slips between
		b, err := r.nextBatch(progress, peerDB, peerFormat >= FormatBinaryV2, peerFormat >= FormatBinaryV3 && stubs.allowed())
		if err != nil {
			r.fail(s, err)
			backoff.wait(ctx)
			continue
		}
		if b == nil {
			stubs.caughtUp()
			select {
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		p, err := r.transport.Send(ctx, s.peer, b)
		if err != nil {
			r.fail(s, err)
			known = false
			backoff.wait(ctx)
			continue
		}
		backoff.reset()
		progress = p.Etag // lower than sent when the peer lacks what came before: resend from there
		stubs.sent(p.Missing)
		r.ackBatch(s, p, b)
	}
}

// stubbing decides when a sender sends stubs (Item.Stub) to its peer. A
// peer that answered Missing was not sent what the stubs name (it was down
// during a migration, or is catching up from empty), so the next batches
// go whole: 8 after a first Missing, twice as many after each further one
// in a row (at most 1,024), and stubs are tried again then, or once the
// sender has caught up with its feed.
type stubbing struct {
	wholeLeft int // batches still to send whole
	misses    int // Missing answers in a row
}

func (st *stubbing) allowed() bool { return st.wholeLeft == 0 }

func (st *stubbing) sent(missing bool) {
	switch {
	case missing:
		st.wholeLeft = min(8<<st.misses, 1024)
		st.misses = min(st.misses+1, 7)
	case st.wholeLeft > 0:
		st.wholeLeft--
	default:
		st.misses = 0
	}
}

func (st *stubbing) caughtUp() { *st = stubbing{} }

// nextBatch reads the feed after progress; nil when there is nothing new.
// Items that came from peerDB as they are stored here are not sent back:
// that replica holds them (durably: it only ever sends what it synced),
// and echoing them costs it a read per item to find them already held.
// The batch's LastEtag still moves past them. With after set, the batch
// says what it follows (Batch.After: the peer takes format 2). With stubs
// set (the peer takes format 3), large items that came here by a bucket
// migration go as stubs: their bodies stay unread, as the migration sent
// them to every replica of the destination.
func (r *Replicator) nextBatch(progress uint64, peerDB string, after, stubs bool) (*Batch, error) {
	var docs []*storage.Document
	var err error
	if stubs {
		docs, err = r.store.ChangesLeavingBodies(progress, maxBatchItems, func(d *storage.Document) bool { return d.Flags&storage.FlagFromResharding != 0 })
	} else {
		docs, err = r.store.Changes(progress, maxBatchItems)
	}
	if err != nil || len(docs) == 0 {
		return nil, err
	}
	b := &Batch{DB: r.db, Shard: r.shard, Source: r.store.DatabaseID(), SourceTag: r.store.NodeTag()}
	if after {
		b.After = progress // a receiver of an earlier version would refuse format 2
	}
	limit := maxBatchBytes
	if l, ok := r.transport.(BatchLimiter); ok {
		limit = min(limit, l.MaxBatchBytes())
	}
	size := 0
	for _, d := range docs {
		if d.Flags&storage.FlagArtificial != 0 || (peerDB != "" && d.Origin == peerDB) {
			b.LastEtag = d.Etag
			continue // local-only, or the peer's own item: not sent
		}
		n := len(d.Body) + len(d.ID) + len(d.Collection) + len(d.ChangeVector) + 64
		if len(b.Items) > 0 && size+n > limit {
			break
		}
		b.LastEtag = d.Etag
		b.Items = append(b.Items, Item{ID: d.ID, Collection: d.Collection, ChangeVector: d.ChangeVector, LastModified: d.LastModified, Flags: d.Flags, Body: d.Body,
			Stub: d.BodyUnread()})
		size += n
	}
	return b, nil
}

// Apply applies a batch from a peer to this replica (see Apply) and
// remembers which of this replica's own versions lost a conflict to it, so
// that a write waiting for replicas (WaitReplicas) learns it was
// superseded even when the winner arrived before its own item reached the
// peer, and the peer then received the winner in its place.
func (r *Replicator) Apply(ctx context.Context, b *Batch) (ProgressReply, error) {
	reply, err := Apply(ctx, r.store, b)
	if len(reply.superseded) > 0 {
		r.mu.Lock()
		for _, l := range reply.superseded {
			r.superseded.add(l)
		}
		r.bump()
		r.mu.Unlock()
	}
	return reply, err
}

// ackBatch records the peer's answer to batch b: its progress, the items
// it kept only as conflict losers, and the link's counts.
func (r *Replicator) ackBatch(s *sender, p *ProgressReply, b *Batch) {
	r.mu.Lock()
	if p.Missing {
		s.missing++
	} else {
		for _, it := range b.Items {
			s.items++
			if it.Stub {
				s.stubs++
			}
		}
	}
	for _, li := range p.Lost {
		if li.Index < 0 || li.Index >= len(b.Items) {
			continue
		}
		it := b.Items[li.Index]
		cv, err := changevector.Parse(it.ChangeVector)
		if err != nil {
			continue
		}
		if l, err := newConflictLoss(it.ID, cv.Version.String(), li.Winner); err == nil {
			s.lost.add(l)
		}
	}
	r.mu.Unlock()
	r.ack(s, p.Etag)
}

// ack records what the peer answers it holds. The answer is the truth even
// when lower than before (the peer replica was recreated empty): writes
// waiting for replicas must not count it for what it lost.
func (r *Replicator) ack(s *sender, etag uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.acked = etag
	s.err = ""
	r.bump()
}

func (r *Replicator) fail(s *sender, err error) {
	r.mu.Lock()
	changed := s.err != err.Error()
	s.err = err.Error()
	r.mu.Unlock()
	switch {
	case !changed:
	case errors.Is(err, ErrNotReady):
		r.logger.Debug("replication to peer waits for this node to be ready", "peer", s.peer, "err", err)
	default:
		r.logger.Warn("replication to peer failing; retrying", "peer", s.peer, "err", err)
	}
}

// ErrNotReady is what a Transport answers while its node may not send yet
// (it is starting): an expected wait, retried like any failure but not
// reported as one.
var ErrNotReady = errors.New("not ready to replicate yet")

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
