package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// recordOf returns the current (immutable) record of db, or nil.
func (n *Node) recordOf(db string) *raftfsm.DatabaseRecord {
	r, _ := n.fsm.Record(db)
	return r
}

// guardWrites refuses client writes for buckets this shard does not own:
// during a bucket move only the owner accepts writes, and a router holding
// an older record retries with the new one.
//
// routed is the etag of the record the router chose this shard by (0 if
// unknown). When it is newer than this node's record, the router (or the
// replica whose refusal it followed) has applied a later committed state,
// typically an ownership flip this node has not applied yet. When that
// record could decide the write differently (recordDecides), the write
// first waits (localReplica.write) until this node's record reaches it,
// then is decided by that record, and is refused as catching up if it did
// not get there.
//
// held is as for flipUnsettled.
//
// It returns the conditions the write's commit must check (see
// storage.Covers): those of the last passes held counts in before they
// are stored.
func (n *Node) guardWrites(db string, shard int, ops []storage.Op, routed uint64, held passHolder) ([]storage.Covers, error) {
	rec := n.recordOf(db)
	if rec == nil {
		return nil, notFound("DatabaseDoesNotExist", "database %q does not exist", db)
	}
	if routed > rec.Etag && recordDecides(rec, shard, ops, opID) {
		// The write waited for this node's record to reach the router's
		// (see localReplica.write) and it did not. Trusting the router's
		// newer record without it let a moving bucket's new owner take
		// writes before the source's last pass: its own older record did
		// not show the move as arriving yet (an explorer, with nodes
		// restarting during moves back and forth). The router waits and
		// tries again.
		return nil, errCatchingUp(n, db, shard)
	}
	for _, op := range ops {
		if owner := rec.ShardOf(bucket.ForID(op.ID)); owner != shard {
			return nil, &apiError{Status: http.StatusMisdirectedRequest, Type: "BucketNotOwned",
				Msg:   fmt.Sprintf("shard %d does not own the bucket of %q (shard %d does, record etag %d)", shard, op.ID, owner, rec.Etag),
				Owner: &ownerHint{Shard: owner, RecordEtag: rec.Etag}}
		}
	}
	if b, ok := flipUnsettled(rec, shard, ops, opID, held); ok {
		return nil, errBucketArriving(db, shard, b)
	}
	return passConditions(rec, shard, ops, held), nil
}

// passConditions returns the conditions under which held counts in the
// last passes of the buckets of ops arriving at shard (one per bucket).
func passConditions(rec *raftfsm.DatabaseRecord, shard int, ops []storage.Op, held passHolder) []storage.Covers {
	if held == nil || len(rec.Sharding.BucketMigrations) == 0 {
		return nil
	}
	var covers []storage.Covers
next:
	for _, op := range ops {
		b := bucket.ForID(op.ID)
		m := arrivingMigration(rec, shard, b)
		if m == nil {
			continue
		}
		want, _ := held.lastPassIn(m)
		if want == nil {
			continue
		}
		for _, c := range covers {
			if c.Bucket == b {
				continue next
			}
		}
		covers = append(covers, storage.Covers{Bucket: b, Version: want})
	}
	return covers
}

// recordDecides reports whether a record newer than rec (one a router
// chose this shard by) could decide items (a write's ops, a read's ids;
// id names each) differently here: when rec does not give an item's
// bucket to shard, or shows the bucket in a migration. A bucket rec
// gives shard with no migration in it stays shard's in any
// newer record that gives it to shard: to leave and come back it would
// have to move back here, which this shard's replicas confirm, and so
// this node's record would show that migration. Writes routed by a newer
// record wait for it only when it decides (see localReplica.write):
// waiting always held the writes routed from the leader to a follower
// behind every migration step of any bucket, until the follower heard it
// committed (up to raft's CommitTimeout, 50-100 ms).
func recordDecides[T any](rec *raftfsm.DatabaseRecord, shard int, items []T, id func(T) string) bool {
	for _, it := range items {
		if b := bucket.ForID(id(it)); rec.ShardOf(b) != shard || rec.Sharding.BucketMigrations[b] != nil {
			return true
		}
	}
	return false
}

// opID and readID name the item of a write's op and of a point read, for
// recordDecides and flipUnsettled.
func opID(op storage.Op) string { return op.ID }
func readID(id string) string   { return id }

// flipUnsettled returns a bucket of items (named by id) that moves to
// shard in a migration whose last pass is not in yet: not recorded (as
// far as rec knows), nor, when held is not nil, announced by its sender
// and held by the local replica (see lastPasses). The source takes writes
// until it applies the flip, which a node may do milliseconds after the
// others; the last pass brings those writes here. Had the destination
// taken writes before that, a router with the new record and one with the
// old could both have had a write on the same version accepted, one on
// each shard (two If-Match increments acknowledged with the same value,
// one then lost to the other). So the destination takes a moving bucket's
// writes only once the last pass is in: moves made by the documents
// migrator are not held, their source never owned the bucket.
func flipUnsettled[T any](rec *raftfsm.DatabaseRecord, shard int, items []T, id func(T) string, held passHolder) (uint32, bool) {
	if len(rec.Sharding.BucketMigrations) == 0 {
		return 0, false
	}
	for _, it := range items {
		if b := bucket.ForID(id(it)); arriving(rec, shard, b, held) {
			return b, true
		}
	}
	return 0, false
}

// arriving reports whether bucket b moves to shard in a migration (not a
// documents-migrator one) whose sender has not recorded its last pass,
// nor (held, if not nil) told it to the local replica, which holds it.
func arriving(rec *raftfsm.DatabaseRecord, shard int, b uint32, held passHolder) bool {
	m := arrivingMigration(rec, shard, b)
	if m == nil {
		return false
	}
	if held == nil {
		return true
	}
	_, in := held.lastPassIn(m)
	return !in
}

// arrivingMigration returns the migration (not a documents-migrator one)
// that moves bucket b to shard, if its sender has not recorded its last
// pass: nil if there is none.
func arrivingMigration(rec *raftfsm.DatabaseRecord, shard int, b uint32) *raftfsm.BucketMigration {
	m := rec.Sharding.BucketMigrations[b]
	if m != nil && m.DestinationShard == shard && !m.Leftovers && m.FinalPass == nil &&
		(m.Status == raftfsm.MigrationMoved || m.Status == raftfsm.MigrationOwnershipTransferred) {
		return m
	}
	return nil
}

// errBucketArriving is the retryable refusal of a write into a bucket
// whose move to this shard is not settled (see flipUnsettled).
func errBucketArriving(db string, shard int, b uint32) error {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "BucketArriving",
		Msg: fmt.Sprintf("bucket %d of %q is moving to shard %d, whose source has not recorded its last pass yet; try again shortly", b, db, shard)}
}

// flipSettleWait bounds how long a routed write into a bucket arriving at
// its shard waits for the source's last pass before it is refused (the
// router then waits and tries again): the pass takes a few milliseconds
// after the flip, unless the sending node failed.
const flipSettleWait = 2 * time.Second

// waitFlipSettled holds a routed request into a bucket arriving at its
// shard until the source's last pass is in (see flipUnsettled), at most
// flipSettleWait; unsettled says whether the request still waits by a
// record. It wakes on raft applies and on the senders' notices of their
// last passes. It returns how long it held the request (0: not at all).
func (n *Node) waitFlipSettled(ctx context.Context, db string, unsettled func(*raftfsm.DatabaseRecord) bool) time.Duration {
	rec := n.recordOf(db)
	if rec == nil || !unsettled(rec) {
		return 0
	}
	start := time.Now()
	ch, stop := n.fsm.Watch()
	defer stop()
	t := time.NewTimer(flipSettleWait)
	defer t.Stop()
	for {
		// Looked at again once both wake-ups are armed: an apply or a
		// notice between the first look and here would wake nothing, and
		// the request would wait out flipSettleWait.
		passed := n.lastPasses.changed()
		if rec := n.recordOf(db); rec == nil || !unsettled(rec) {
			return time.Since(start)
		}
		select {
		case <-ch:
		case <-passed:
		case <-t.C:
			return time.Since(start)
		case <-ctx.Done():
			return time.Since(start)
		}
	}
}

// maxRecordWait bounds how long a router waits for its record to catch up
// with the one a refusal named before it routes a group of writes again:
// raft applies on every node within milliseconds when the cluster is
// healthy, and a node that lags more simply tries again.
const maxRecordWait = time.Second

// waitRecord waits until this node's record of db is at least etag (or db
// is gone), at most max; it wakes on raft applies. It fails only when ctx
// ends.
func (n *Node) waitRecord(ctx context.Context, db string, etag uint64, max time.Duration) error {
	ch, stop := n.fsm.Watch()
	defer stop()
	t := time.NewTimer(max)
	defer t.Stop()
	for {
		if cur := n.recordOf(db); cur == nil || cur.Etag >= etag {
			return nil
		}
		select {
		case <-ch:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("wait for record etag %d of %q: %w", etag, db, ctx.Err())
		}
	}
}

// Per-attempt deadlines: one dead replica must not use up a request's time.
const (
	readAttemptTimeout  = 3 * time.Second
	writeAttemptTimeout = 10 * time.Second
)

// onShard runs fn against a replica of shard: the local replica for a
// "{db}${n}" target, else the members in preference order until one
// answers. Reads also move on after a timeout; writes only when the
// request surely did not execute.
func (n *Node) onShard(ctx context.Context, t target, shard int, read bool, fn func(context.Context, shardReplica) error) error {
	return n.onShardWithin(ctx, t, shard, read, 0, fn)
}

// onShardWithin is onShard with extra time per attempt (a write that waits
// for replicas needs that wait on top of the write itself).
func (n *Node) onShardWithin(ctx context.Context, t target, shard int, read bool, extra time.Duration, fn func(context.Context, shardReplica) error) error {
	if t.shard >= 0 {
		l, err := n.local(t.rec.DatabaseName, t.shard)
		if err != nil {
			return notFound("ShardNotOnThisNode", "shard %d of %q is not on node %s; it is held by %v",
				t.shard, t.rec.DatabaseName, n.cfg.Node.Tag, t.rec.Sharding.Shards[t.shard].Members)
		}
		return closedAsUnavailable(fn(ctx, l))
	}
	topo, ok := t.rec.Sharding.Shards[shard]
	if !ok {
		return notFound("ShardDoesNotExist", "database %q has no shard %d", t.rec.DatabaseName, shard)
	}
	var errs []error
	var waitUntil time.Time // when waiting for a member to serve ends
	for pause := shardWaitFirst; ; pause = min(2*pause, shardWaitMaxPause) {
		errs = errs[:0]
		othersSoon := false // a member on another node serves soon
		for _, tag := range n.membersByPreference(topo.Members) {
			if ctx.Err() != nil {
				break
			}
			err := n.attempt(ctx, t.rec.DatabaseName, shard, tag, read, extra, fn)
			if err == nil {
				return nil
			}
			if !retryable(err) && !(read && errors.Is(err, errTimeout)) {
				return err
			}
			errs = append(errs, err)
			othersSoon = othersSoon || (tag != n.cfg.Node.Tag && servesSoon(err))
			if !read && asksAgain(err) {
				// The bucket moves to this shard and its last pass is
				// not in: the other members wait for the same pass, and
				// one that took the write would hold it while this member
				// holds the bucket's other writes, and both would commit
				// them on the same version once the pass is in (stress
				// runs of TestIncrementsWhileNodesStopCleanlyDuringMoves:
				// If-Match increments acknowledged twice, one through each
				// member of the destination, while a source node took
				// seconds to stop). Ask this member again.
				break
			}
		}
		if ctx.Err() != nil || !slices.ContainsFunc(errs, servesSoon) {
			break
		}
		if !othersSoon && !n.fresh.fresh() {
			// Only this node's own replica would serve soon, and it
			// catches up only once this node follows the cluster again: a
			// node cut off from the others would hold the request for
			// shardWaitMax for nothing. Say so at once.
			ae := n.errNotFresh().(*apiError)
			return &apiError{Status: ae.Status, Type: ae.Type, Msg: fmt.Sprintf("shard %d of %q: no other member answered, and %s", shard, t.rec.DatabaseName, ae.Msg)}
		}
		// A member catches up, or hands the shard's writes over to one
		// that did: one of them serves in a moment (a restart's normal
		// course), so wait for it rather than fail the request.
		if waitUntil.IsZero() {
			waitUntil = time.Now().Add(shardWaitMax)
		}
		if time.Now().Add(pause).After(waitUntil) {
			break
		}
		n.catchUps.wait(ctx, pause)
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return unavailable("no replica of shard %d of %q answered (members %v): %v", shard, t.rec.DatabaseName, topo.Members, errors.Join(errs...))
}

// How long a request refused by every member of a shard, by at least one
// because it catches up or hands its writes over (servesSoon), waits for
// one to serve, and the pauses between its rounds (doubling).
const (
	shardWaitMax      = handOverWindow
	shardWaitFirst    = 10 * time.Millisecond
	shardWaitMaxPause = 250 * time.Millisecond
)

// servesSoon reports a refusal by a member that serves the shard again
// shortly: it catches up with its peers, handed the writes over to a
// member that does, waits for the last pass of a bucket moving to it, or
// leaves a bucket's writes to its sender until the flip (which then
// names the new owner).
func servesSoon(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable &&
		(ae.Type == "ShardCatchingUp" || ae.Type == "ShardHandingOver" || ae.Type == "BucketArriving" || ae.Type == "BucketLeaving")
}

// asksAgain reports a write refused by a member that should be asked
// again after the pause, not passed on to the shard's next member: its
// bucket moves to the shard and the source's last pass is not in yet
// (errBucketArriving), or the refusal says so (AskAgain).
func asksAgain(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && (ae.Type == "BucketArriving" || ae.AskAgain)
}

func (n *Node) attempt(ctx context.Context, db string, shard int, tag string, read bool, extra time.Duration, fn func(context.Context, shardReplica) error) error {
	if tag == n.cfg.Node.Tag {
		l, err := n.local(db, shard)
		if err != nil {
			return err
		}
		l.routed = true
		return closedAsUnavailable(fn(ctx, l))
	}
	timeout := writeAttemptTimeout + extra
	if read {
		timeout = readAttemptTimeout + extra
	}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	r := &remoteReplica{n: n, tag: tag, db: db, shard: shard}
	for {
		err := fn(ctx, r)
		if !errors.Is(err, errUnreachable) || n.routesSettled() || n.health.knownDown(tag) {
			return err
		}
		// This node's bus routes may not carry the member's interest yet:
		// ask it again rather than send the request to the next member,
		// which would take the shard's writes while the member, reached
		// by the other routers, takes them too.
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// routesSettled reports whether this node started, or came back in touch
// after hearing no other node, long enough ago that a request no node
// answers (no responders) means the node it went to is down. Until then,
// its embedded bus server's routes to the others may still be connecting,
// and every node looks unreachable: a restarted node so marked the first
// member of each shard down and sent its first writes to the second, while
// the other routers sent theirs to the first, and an If-Match write could
// be taken by both (see peerReachWait).
func (n *Node) routesSettled() bool {
	return time.Since(n.started) >= peerReachWait && time.Since(time.Unix(0, n.rejoined.Load())) >= peerReachWait
}

// closedAsUnavailable turns a local replica's ErrClosed (it closed while
// the request used it: its database deleted, its shard gone from this node)
// into the retryable error of a replica that is not open, so the request
// goes on to another member. A write refused this way was not applied.
func closedAsUnavailable(err error) error {
	if errors.Is(err, storage.ErrClosed) {
		return toAPIError(err)
	}
	return err
}
