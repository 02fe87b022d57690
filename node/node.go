// Package node runs one shardnode process: raft (the cluster state), the
// NATS bus (embedded or external), the shard replicas this node holds, and
// the HTTP API that serves any database and routes each request by bucket.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/resharding"
	"github.com/shardnode/shardnode/storage"
)

// Node is one running shardnode process.
type Node struct {
	cfg    *config.Config
	logger *slog.Logger

	fsm      *raftfsm.FSM
	raft     *raftNode
	bus      *bus
	cache    *pebble.Cache
	compact  *storage.Compactions // grants every replica's compactions
	replicas *replicaSet
	health   *health

	rpcHandlers map[string]rpcHandler
	driver      *resharding.Driver
	lock        *dirLock
	failpoints  map[string]time.Duration
	// dialer and httpClient reach peers' raft transports and HTTP APIs
	// (through debug.dial-rewrites).
	dialer        dialer
	httpClient    *http.Client
	runCtx        context.Context
	streams       context.Context
	streamsCancel context.CancelFunc

	httpLn  net.Listener
	httpSrv *front
	// answers recycles the buffers GETs render documents into: one per
	// request, the size of its documents, was most of what a point GET
	// allocated.
	answers sync.Pool
	// sendLimit paces the batches of the buckets this node moves out.
	sendLimit *sendLimiter
	// reroutes measures the pause moves cause: writes refused after a
	// flip and sent on to the new owner.
	reroutes *reroutes
	// holds records, per database, the routed writes this node's
	// replicas held for a bucket arriving here (see waitFlipSettled).
	holds *reroutes
	// passTotals, passFences, passOwnFences and passSends record, per
	// database, the last passes this node's senders made after a flip:
	// each whole, its wait for the source shard's other replicas and for
	// its own writes in flight, and the pass after both (see
	// ObserveLastPass).
	passTotals, passFences, passOwnFences, passSends *reroutes
	// lastPasses holds what senders said their last pass into this
	// node's replicas covered, ahead of the record (see lastPasses).
	lastPasses *lastPasses
	metrics    *metrics // GET /metrics

	started time.Time
	// rejoined is when (Unix ns) the node last came back in touch after
	// hearing no other node: its bus routes reconnect from then on, as at
	// a start (see routesSettled).
	rejoined atomic.Int64
	// maxDocBytes is http.max-document-bytes, or less if the bus's messages
	// cannot carry a document that large.
	maxDocBytes int64
	// incarnation is random and new at every start; heartbeats carry it so
	// peers notice a restart that was faster than their down detection.
	incarnation string
	catchUps    catchUps  // replicas behind their peers, skipped by routed requests
	handOvers   handOvers // replicas that handed their writes over to a member that caught up
	// sourceFences are buckets whose senders told this node of their flip
	// before it applied it (see FenceSourceReplicas).
	sourceFences sourceFences
	// spanLeases are the empty spans this node's source replicas leased
	// to the resharding driver before their bulk flip (see opSpanLease).
	spanLeases spanLeases
	// writeSeqs number the client writes this node routes to replicas on
	// other nodes, and writesOnce remembers those it ran for other
	// routers, so that a routed write resent after a lost answer runs
	// once (see opShardWriteOnce).
	writeSeqs    *writeSeqs
	writesOnce   *onceTable
	writeResends atomic.Int64 // copies sent again, for /metrics
	// staleRefusals: a replica refused a routed write while this node was
	// not fresh (see refusedWhileStale); the next confirmation catches
	// the replicas up first.
	staleRefusals atomic.Bool
	ready         atomic.Bool   // Start finished: the node serves its databases
	draining      atomic.Bool   // Close began: writes wait for drained, then go elsewhere
	drained       chan struct{} // closed when the drain ended (see drainWrites)
	readyCh       chan struct{} // closed when Start finished
	removed       atomic.Bool   // raft's configuration no longer lists this node
	// removedForGood: the leader refused this node's registration, or a
	// member said the cluster no longer lists it; unlike removed, raft's
	// (possibly stale) configuration cannot clear it.
	removedForGood atomic.Bool
	// wasMember: the state listed this node at some point of this process
	// (or its raft stores held state at start): a node that was a member
	// and is not listed any more was removed, and may not join again.
	wasMember atomic.Bool
	// createMu passes database creates through the leader one at a time
	// (see leaderApply).
	createMu sync.Mutex
	// fresh is when this node last confirmed it follows the cluster's
	// committed state; client requests wait for it (see freshness).
	fresh *freshness
	// refused is closed when the cluster refused this node's registration
	// because it was removed (see ErrRemoved); Start then fails.
	refused    chan struct{}
	refuseOnce sync.Once
	refuseErr  error // set once, before refused closes: why (nil: removed)
	// nodeID is the data directory's id (see loadNodeID), registered with
	// the node's tag.
	nodeID string
	// joinMu passes joins through the leader one at a time, so two nodes
	// under one tag cannot both pass the identity check (see addMember).
	joinMu     sync.Mutex
	regKick    chan struct{}
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	rpcMu      sync.Mutex // guards rpcStopped
	rpcStopped bool       // Close began: node-to-node requests start no handler
	closeMu    sync.Mutex
	closed     bool
}

// httpIdleTimeout closes a keep-alive connection that has carried no
// request for this long: a client that vanished without closing (a crash,
// a dropped network) would otherwise hold a socket and a goroutine for
// ever. A long answer (an event stream) is not idle.
const httpIdleTimeout = 2 * time.Minute

// Start starts a node from cfg and returns once it serves HTTP. The node
// runs until Close.
func Start(ctx context.Context, cfg *config.Config, logger *slog.Logger) (_ *Node, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("node", cfg.Node.Tag)
	n := &Node{cfg: cfg, logger: logger, fsm: raftfsm.New(), started: time.Now(), incarnation: strconv.FormatUint(rand.Uint64(), 36), health: newHealth(cfg.Node.Tag), reroutes: newReroutes(), holds: newReroutes(), passTotals: newReroutes(), passFences: newReroutes(), passOwnFences: newReroutes(), passSends: newReroutes(), lastPasses: newLastPasses(), rpcHandlers: map[string]rpcHandler{}, regKick: make(chan struct{}, 1), refused: make(chan struct{}), fresh: newFreshness(), readyCh: make(chan struct{}), drained: make(chan struct{}), writeSeqs: newWriteSeqs(), writesOnce: newOnceTable()}
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.runCtx = runCtx
	n.streams, n.streamsCancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.failpoints, err = config.ParseFailpoints(cfg.Debug.Failpoints); err != nil {
		return nil, fmt.Errorf("debug.failpoints: %w", err)
	}
	rewrites, err := config.ParseDialRewrites(cfg.Debug.DialRewrites)
	if err != nil {
		return nil, fmt.Errorf("debug.dial-rewrites: %w", err)
	}
	n.dialer = dialer{rewrites: rewrites}
	n.httpClient = n.dialer.httpClient()
	if len(rewrites) > 0 {
		logger.Warn("dialing peers through rewritten addresses (debug.dial-rewrites)", "rewrites", cfg.Debug.DialRewrites)
	}
	if n.lock, err = lockDataDir(cfg.Node.DataDir); err != nil {
		return nil, err
	}
	if err := checkNodeTag(cfg.Node.DataDir, cfg.Node.Tag); err != nil {
		return nil, err
	}
	if n.nodeID, err = loadNodeID(cfg.Node.DataDir); err != nil {
		return nil, err
	}
	n.sendLimit = newSendLimiter(cfg.Resharding.MaxSendBytesPerSec)
	if cfg.Resharding.MaxSendBytesPerSec > 0 {
		logger.Info("buckets moved out are sent at a limited rate", "resharding.max-send-bytes-per-sec", cfg.Resharding.MaxSendBytesPerSec)
	}
	n.cache = pebble.NewCache(cfg.Storage.BlockCacheBytes)
	n.compact = storage.NewCompactions()
	n.replicas = newReplicaSet(cfg.DatabasesDir(), cfg.Node.Tag, n.cache, storage.NewDocCache(cfg.Storage.DocCacheBytes), cfg.Storage.MemtableBudgetBytes, busTransport{n}, logger)
	n.replicas.compactions = n.compact
	n.replicas.newAgent = func(db string, shard int, s *storage.Store) io.Closer {
		return agentCloser{a: resharding.NewAgent(reshardCluster{n}, db, shard, s, logger), catchUp: n.startCatchUp(db, shard, s)}
	}
	if n.bus, err = startBus(cfg); err != nil {
		return nil, err
	}
	n.maxDocBytes = cfg.HTTP.MaxDocumentBytes
	if fit := n.bus.nc.MaxPayload() - busDocumentSlack; fit < n.maxDocBytes {
		// Replication and migration send a document in one bus message: a
		// larger one would be stored here and never reach another replica.
		n.maxDocBytes = fit
		logger.Warn("documents are limited to what one NATS message carries", "http.max-document-bytes", cfg.HTTP.MaxDocumentBytes,
			"nats-max-payload", n.bus.nc.MaxPayload(), "max-document-bytes", fit)
	}
	n.registerShardRPC()
	n.registerClusterRPC()
	n.registerMigrationRPC()
	n.registerLastPassRPC()
	n.registerSourceFenceRPC()
	n.rpcHandlers[opSpanLease] = n.serveSpanLease
	n.rpcHandlers[opSpanRelease] = n.serveSpanRelease
	if _, err := n.serveRPC(runCtx); err != nil {
		return nil, err
	}
	n.httpLn, err = net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return nil, fmt.Errorf("http.addr %s: %w", cfg.HTTP.Addr, err)
	}
	bootstrap := cfg.Raft.Bootstrap && cfg.Raft.Join == ""
	// A node with no raft state that joins asks the cluster first whether
	// its tag is free for this data directory: raft listens from here on,
	// and a member's peers would send it the member's log under the tag.
	beforeListen := func(existing bool) error {
		if existing || cfg.Raft.Join == "" {
			return nil
		}
		return n.checkJoinAllowed(ctx)
	}
	if n.raft, err = startRaft(cfg.RaftDir(), cfg.Node.Tag, cfg.Raft.Addr, bootstrap, cfg.Raft.Join != "", n.dialer, n.fsm, beforeListen, logger); err != nil {
		return nil, err
	}
	if err := claimNodeTag(cfg.Node.DataDir, cfg.Node.Tag); err != nil {
		return nil, err
	}
	n.driver = resharding.NewDriver(reshardCluster{n}, n.databaseNames, logger)
	n.metrics = newMetrics(n)
	n.wg.Add(6)
	go n.observeMigrations(runCtx)
	go n.runFreshness(runCtx)
	go n.followRecords(runCtx)
	go n.leaderLoop(runCtx)
	go n.runHeartbeats(runCtx)
	go n.registerLoop(runCtx)
	n.httpSrv = newFront(n.httpLn, n.routes(), frontMaxBody(cfg.HTTP.MaxBodyBytes), httpIdleTimeout, n.streams, logger)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.httpSrv.Serve(); err != nil {
			logger.Error("http server stopped", "err", err)
		}
	}()
	// Serve once this node is a registered member with the log replayed.
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := n.waitLeader(wctx); err != nil {
		return nil, err
	}
	if err := n.waitRegistered(wctx); err != nil {
		return nil, err
	}
	caughtUpAsked := time.Now()
	if err := n.waitCaughtUp(wctx); err != nil {
		return nil, err
	}
	n.fresh.confirm(caughtUpAsked)
	n.ready.Store(true)
	close(n.readyCh)
	logger.Info("node started", "http", n.HTTPAddr(), "raft", n.raft.transport.LocalAddr(), "nats", n.bus.clientURL())
	return n, nil
}

// HTTPAddr is the address the HTTP API listens on.
func (n *Node) HTTPAddr() string { return n.httpLn.Addr().String() }

// HTTPURL is the base URL of the HTTP API.
func (n *Node) HTTPURL() string { return "http://" + n.HTTPAddr() }

// Tag is the node's tag.
func (n *Node) Tag() string { return n.cfg.Node.Tag }

// FSM exposes the replicated state (read-only use).
func (n *Node) FSM() *raftfsm.FSM { return n.fsm }

// Close stops the node: HTTP first (no new work), then the workers, raft,
// the replicas and the bus.
func (n *Node) Close() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	n.drainWrites()
	n.announceStopping() // the other members make this node's passes from now on
	n.handOverLeadership()
	var errs []error
	if n.streamsCancel != nil {
		n.streamsCancel() // event streams end so HTTP shutdown does not wait on them
	}
	if n.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := n.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
		cancel()
	} else if n.httpLn != nil {
		n.httpLn.Close()
	}
	n.cancel()
	if n.driver != nil {
		n.driver.Close()
	}
	n.rpcMu.Lock()
	n.rpcStopped = true
	n.rpcMu.Unlock()
	n.wg.Wait()
	n.announceLeaving() // the heartbeats stopped with the loops
	if n.raft != nil {
		if err := n.raft.close(); err != nil {
			errs = append(errs, fmt.Errorf("raft: %w", err))
		}
	}
	if n.replicas != nil {
		if err := n.replicas.closeAll(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.bus != nil {
		n.bus.close()
	}
	if n.compact != nil {
		n.compact.Close()
	}
	if n.cache != nil {
		n.cache.Unref()
	}
	if n.httpClient != nil {
		n.httpClient.CloseIdleConnections() // its keep-alive connections to peers
	}
	n.lock.release()
	n.logger.Info("node stopped")
	return errors.Join(errs...)
}

// followRecords keeps the local replicas in step with the records.
func (n *Node) followRecords(ctx context.Context) {
	defer n.wg.Done()
	ch, stop := n.fsm.Watch()
	defer stop()
	index := n.fsm.AppliedIndex()
	// A replica that failed to open (out of file descriptors, a full
	// disk) is tried again, 1 s after the failure doubling to 30 s, not
	// only at the next raft apply, which may never come.
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := time.Second
	for {
		if err := n.replicas.reconcile(index, n.fsm.Records()); err != nil {
			if failing, example := n.replicas.failures(); failing > 0 {
				n.logger.Error("shard replicas failed to open; will retry", "failing", failing, "example", example, "retry_in", backoff)
			} else {
				n.logger.Error("reconcile shard replicas; will retry", "err", err, "retry_in", backoff)
			}
			retry.Reset(backoff)
			backoff = min(2*backoff, 30*time.Second)
		} else {
			retry.Stop()
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case index = <-ch:
		case <-retry.C:
			index = max(index, n.fsm.AppliedIndex())
		}
	}
}

// leaderLoop registers this node in the state whenever it becomes leader
// (after a Barrier, so it acts on the whole log), and while it leads
// finishes node removals that stopped halfway.
func (n *Node) leaderLoop(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(finishRemovalsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n.raft.r.State() == raft.Leader {
				n.finishRemovals(ctx)
			}
		case isLeader := <-n.raft.leaderCh:
			if !isLeader {
				continue
			}
			if err := n.raft.r.Barrier(10 * time.Second).Error(); err != nil {
				n.logger.Warn("barrier after election", "err", err)
				continue
			}
			n.logger.Info("became raft leader")
			if n.driver != nil {
				n.driver.Kick() // the old leader's queues went with it
			}
			n.kickRegister()
			n.finishRemovals(ctx)
		}
	}
}

// waitRegistered waits until the state lists this node.
func (n *Node) waitRegistered(ctx context.Context) error {
	ch, stop := n.fsm.Watch()
	defer stop()
	for {
		for _, m := range n.fsm.Nodes() {
			if m.Tag == n.cfg.Node.Tag {
				n.wasMember.Store(true)
				return nil
			}
		}
		select {
		case <-ch:
		case <-n.refused:
			return n.errRefused()
		case <-ctx.Done():
			return fmt.Errorf("wait for node %s to register: %w", n.cfg.Node.Tag, ctx.Err())
		}
	}
}

// waitCaughtUp waits until this node applied every raft entry committed
// before it asked, and its replicas follow the resulting records, so a
// restarted node serves its databases as soon as Start returns. A
// follower's own commit index is no measure of that: after a restart it
// is its snapshot's, and after the leader's first message it is at most
// the follower's own last entry, while the leader may have committed
// more when the node was down. Answering from such an old state, a node
// took writes for a database deleted since, and lost them.
func (n *Node) waitCaughtUp(ctx context.Context) error {
	index, err := n.readIndex(ctx)
	if err != nil {
		return fmt.Errorf("wait for raft log replay: %w", err)
	}
	if err := n.waitAppliedThrough(ctx, index); err != nil {
		return err
	}
	return n.replicas.waitFor(ctx, n.fsm.AppliedIndex())
}

// waitAppliedThrough waits until the state machine applied every raft entry
// up to index.
func (n *Node) waitAppliedThrough(ctx context.Context, index uint64) error {
	// Raft counts an entry applied once it handed it to the state machine,
	// which applies it later, and only commands reach the state machine
	// (not barriers or configuration changes): wait for raft to hand over
	// everything up to index, then for the state machine to apply the last
	// command among them.
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for n.raft.r.AppliedIndex() < index {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for raft log replay to index %d (at %d): %w", index, n.raft.r.AppliedIndex(), ctx.Err())
		case <-t.C:
		}
	}
	last, err := n.raft.lastCommandAtOrBefore(index)
	if err != nil {
		return fmt.Errorf("wait for raft log replay: %w", err)
	}
	return n.waitApplied(ctx, last)
}

// readIndex is an index at or beyond every entry committed when it was
// asked: the leader's applied index after a barrier, here or asked of
// the leader over HTTP. It retries until ctx ends.
func (n *Node) readIndex(ctx context.Context) (uint64, error) {
	delay := 10 * time.Millisecond
	for {
		var index uint64
		var err error
		if n.raft.r.State() == raft.Leader {
			index, err = n.barrierIndex()
		} else if url := n.leaderURL(); url == "" {
			err = errors.New("no leader known")
		} else {
			var rep applyReply
			err = n.postJSON(ctx, url+"/internal/raft/read-index", nil, &rep)
			index = rep.Index
		}
		if err == nil && index > 0 {
			return index, nil
		}
		n.logger.Debug("read index from the leader", "err", err)
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("read index: %w (last: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// barrierIndex waits, on the leader, until every entry before a new
// barrier entry is applied, and returns the applied index.
func (n *Node) barrierIndex() (uint64, error) {
	if err := n.raft.r.Barrier(5 * time.Second).Error(); err != nil {
		return 0, err
	}
	return n.raft.r.AppliedIndex(), nil
}

// handleRaftSnapshot snapshots this node's raft state now and truncates
// its log, as raft does by itself every 1024 entries (checked every two
// minutes): for an operator before copying a data directory, and for tests
// of a restart from a snapshot.
func (n *Node) handleRaftSnapshot(w http.ResponseWriter, _ *http.Request) {
	if err := n.raft.r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		writeError(w, unavailable("raft snapshot: %v", err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleCommitIndex answers a follower's leaderCommitIndex.
func (n *Node) handleCommitIndex(w http.ResponseWriter, _ *http.Request) {
	if n.raft.r.State() != raft.Leader {
		writeError(w, unavailable("node %s is not the raft leader", n.cfg.Node.Tag))
		return
	}
	// A leader that was cut off may have been replaced without knowing
	// it yet: its commit index counts only once a quorum confirmed it.
	age, ok := n.fresh.age()
	if !ok || age >= freshFor {
		writeError(w, unavailable("node %s has not confirmed lately that it is still the raft leader", n.cfg.Node.Tag))
		return
	}
	writeJSON(w, http.StatusOK, applyReply{Index: n.raft.r.CommitIndex(), FreshAgo: age})
}

// catchUpWithLeader waits, on a follower, until it applied every entry the
// leader had committed when asked: what a client that was told a command
// succeeded (through the leader or another node) may already count on.
func (n *Node) catchUpWithLeader(ctx context.Context) error {
	if n.raft.r.State() == raft.Leader {
		return nil
	}
	url := n.leaderURL()
	if url == "" {
		return errors.New("no leader known")
	}
	var rep applyReply
	if err := n.postJSON(ctx, url+"/internal/raft/commit-index", nil, &rep); err != nil {
		return err
	}
	return n.waitAppliedThrough(ctx, rep.Index)
}

// handleReadIndex answers a starting node's readIndex.
func (n *Node) handleReadIndex(w http.ResponseWriter, _ *http.Request) {
	if n.raft.r.State() != raft.Leader {
		writeError(w, unavailable("node %s is not the raft leader", n.cfg.Node.Tag))
		return
	}
	index, err := n.barrierIndex()
	if err != nil {
		writeError(w, unavailable("raft barrier: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, applyReply{Index: index})
}

// databaseNames lists the databases in the state.
func (n *Node) databaseNames() []string {
	recs := n.fsm.Records()
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.DatabaseName
	}
	return out
}

// agentCloser stops what runs beside an open replica: its resharding
// agent and its catching up with its peers.
type agentCloser struct {
	a       *resharding.Agent
	catchUp *replicaCatchUp
}

func (c agentCloser) Close() error {
	c.catchUp.Close()
	c.a.Close()
	return nil
}

// runCtxDone is closed when the node stops (ends long-lived streams).
func (n *Node) runCtxDone() <-chan struct{} { return n.streams.Done() }
