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
// replica whose refusal it followed) has applied a later committed state
// that gives these buckets to this shard, typically an ownership flip this
// node has not applied yet: the write is accepted rather than refused or
// held until this node's raft apply catches up. This admits nothing that
// the newest committed record does not give to this shard. A source
// replica is never let in this way after its flip: the router's newer
// record would name the destination, and the source's own record is
// newer than the router's once its sender has fenced.
func (n *Node) guardWrites(db string, shard int, ops []storage.Op, routed uint64) error {
	rec := n.recordOf(db)
	if rec == nil {
		return notFound("DatabaseDoesNotExist", "database %q does not exist", db)
	}
	if routed > rec.Etag {
		// Trusted only while this node follows the cluster: a node that
		// lost touch may hold the replica of a database deleted and
		// created again since, under the same name (see freshness).
		if !n.fresh.fresh() {
			return errCatchingUp(n, db, shard)
		}
		return nil
	}
	for _, op := range ops {
		if owner := rec.ShardOf(bucket.ForID(op.ID)); owner != shard {
			return &apiError{Status: http.StatusMisdirectedRequest, Type: "BucketNotOwned",
				Msg:   fmt.Sprintf("shard %d does not own the bucket of %q (shard %d does, record etag %d)", shard, op.ID, owner, rec.Etag),
				Owner: &ownerHint{Shard: owner, RecordEtag: rec.Etag}}
		}
	}
	return nil
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
		}
		if ctx.Err() != nil || !slices.ContainsFunc(errs, servesSoon) {
			break
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
// shortly: it catches up with its peers, or handed the writes over to a
// member that does.
func servesSoon(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable && (ae.Type == "ShardCatchingUp" || ae.Type == "ShardHandingOver")
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
	return fn(ctx, &remoteReplica{n: n, tag: tag, db: db, shard: shard})
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
