package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/raftfsm"
)

// Membership: a node joins by asking any member (raft.join) to add it; the
// request travels to the leader, which adds the node as a raft voter and
// records its addresses. Every node keeps its record current the same way
// (a restarted node may have new addresses), and commands proposed on a
// follower are forwarded to the leader over HTTP.

// joinRequest is POST /cluster/join's body.
type joinRequest struct {
	Node raftfsm.NodeInfo `json:"Node"`
	// HadState says the node was a member once: its raft stores held
	// state when it started, or the state listed it since. Such a node
	// that raft's configuration does not list was removed, and may not
	// come back with that state.
	HadState bool `json:"HadState,omitempty"`
	// Check asks only whether Node.Tag is free for a node of Node.ID
	// (see checkJoinAllowed): the answer is 200 or a 409 NodeIdConflict,
	// and nothing changes. Node's addresses are not looked at.
	Check bool `json:"Check,omitempty"`
}

// applyReply is POST /internal/raft/apply's answer: the raft index the
// command was applied at.
type applyReply struct {
	Index     uint64 `json:"Index"`
	Duplicate bool   `json:"Duplicate"`
	// FreshAgo, in a leader's commit-index answer, is how long ago the
	// leader asked for the quorum confirmation it last got: the answer
	// is only as fresh as that (see freshness).
	FreshAgo time.Duration `json:"FreshAgoNs,omitempty"`
}

// kickRegister asks registerLoop to check this node's record now.
func (n *Node) kickRegister() {
	select {
	case n.regKick <- struct{}{}:
	default:
	}
}

// registerLoop keeps this node a voter with current addresses in the
// state, retrying with backoff until it is, and again whenever the state
// changes.
func (n *Node) registerLoop(ctx context.Context) {
	defer n.wg.Done()
	ch, stop := n.fsm.Watch()
	defer stop()
	delay := 100 * time.Millisecond
	for {
		err := n.ensureRegistered(ctx)
		if err != nil {
			n.logger.Debug("register with the cluster", "err", err)
		} else {
			delay = 100 * time.Millisecond
		}
		t := time.NewTimer(delay)
		if err != nil {
			delay = min(delay*2, 2*time.Second)
		} else {
			t.Stop() // registered: wait for a change, not a timer
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-ch:
		case <-n.regKick:
		case <-t.C:
		}
		t.Stop()
	}
}

// ensureRegistered registers this node unless the state already has it
// with its current addresses.
func (n *Node) ensureRegistered(ctx context.Context) error {
	self := n.selfInfo()
	for _, m := range n.fsm.Nodes() {
		if m.Tag == self.Tag {
			n.wasMember.Store(true)
		}
		if m.Tag == self.Tag && m.HttpUrl == self.HttpUrl && m.RaftAddr == self.RaftAddr && m.NatsUrl == self.NatsUrl && m.ID == self.ID {
			return nil
		}
	}
	if n.raft.r.State() == raft.Leader {
		return n.refusedID(n.addMember(ctx, self))
	}
	url := n.leaderURL()
	if url == "" {
		url = n.cfg.Raft.Join
	}
	if url == "" {
		return errors.New("no leader known and no raft.join configured")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, _ := json.Marshal(joinRequest{Node: self, HadState: n.raft.existing || n.wasMember.Load()})
	err := n.postJSON(ctx, url+"/cluster/join", body, nil)
	if ae := (*apiError)(nil); errors.As(err, &ae) && ae.Type == "NodeRemoved" {
		n.removedForGood.Store(true)
		n.refuseOnce.Do(func() { close(n.refused) })
		return fmt.Errorf("%w: %s", ErrRemoved, ae.Msg)
	}
	return n.refusedID(err)
}

// refusedID turns a registration's NodeIdConflict answer into
// ErrNodeIDConflict and stops the node's start on it (see refused).
func (n *Node) refusedID(err error) error {
	if ae := (*apiError)(nil); errors.As(err, &ae) && ae.Type == typeOf(raftfsm.ErrNodeIDConflict) {
		err = n.idConflict(ae.Msg)
		n.logger.Error("the cluster refused this node's registration", "err", err)
		n.refuseOnce.Do(func() {
			n.refuseErr = err
			close(n.refused)
		})
	}
	return err
}

// ErrNodeIDConflict means the cluster has a member under this node's tag
// whose data directory is another one: the node would take over that
// member's raft identity without its log or its replicas.
var ErrNodeIDConflict = errors.New("node tag belongs to another data directory")

func (n *Node) idConflict(msg string) error {
	tag := n.cfg.Node.Tag
	return fmt.Errorf("%w: %s; this data directory (%s) is node id %s. Start this node under a tag no member has; or, if node %s's data directory is lost for good, remove the node (DELETE /cluster/nodes/%s on another member) and start this one again; or, if this directory is node %s's own and its %s file was lost, put the member's node id back in it",
		ErrNodeIDConflict, msg, n.cfg.Node.DataDir, n.nodeID, tag, tag, tag, nodeIDFile)
}

// checkJoinAllowed asks the cluster at raft.join whether this node's tag is
// free for this data directory, before raft listens: 200 goes on, a
// NodeIdConflict stops the start. Unreachable members are asked again until
// ctx ends.
func (n *Node) checkJoinAllowed(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	body, _ := json.Marshal(joinRequest{Node: raftfsm.NodeInfo{Tag: n.cfg.Node.Tag, ID: n.nodeID}, Check: true})
	delay := 100 * time.Millisecond
	for {
		err := n.postJSON(ctx, n.cfg.Raft.Join+"/cluster/join", body, nil)
		ae := (*apiError)(nil)
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ae) && ae.Type == typeOf(raftfsm.ErrNodeIDConflict):
			return n.idConflict(ae.Msg)
		case errors.As(err, &ae) && ae.Status/100 == 4:
			return fmt.Errorf("raft.join %s refused the join: %s", n.cfg.Raft.Join, ae.Msg)
		}
		n.logger.Debug("ask the cluster whether this node may join", "raft.join", n.cfg.Raft.Join, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("ask raft.join %s whether node %s may join: %w (last: %v)", n.cfg.Raft.Join, n.cfg.Node.Tag, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(delay*2, 2*time.Second)
	}
}

// checkNodeID refuses info when the state has a member of its tag with
// another data directory's id. A member from before ids existed, or a
// node that sends none, passes: the first id registered for a tag holds.
func (n *Node) checkNodeID(info raftfsm.NodeInfo) error {
	for _, m := range n.fsm.Nodes() {
		if m.Tag == info.Tag && m.ID != "" && info.ID != "" && m.ID != info.ID {
			return &apiError{Status: http.StatusConflict, Type: typeOf(raftfsm.ErrNodeIDConflict),
				Msg: fmt.Sprintf("node %s is a member with another data directory (node id %s, raft %s, HTTP %s), not node id %s", m.Tag, m.ID, m.RaftAddr, m.HttpUrl, info.ID)}
		}
	}
	return nil
}

// addMember makes info a raft voter and records it; leader only.
func (n *Node) addMember(ctx context.Context, info raftfsm.NodeInfo) error {
	n.joinMu.Lock()
	defer n.joinMu.Unlock()
	// Before raft hears of it: AddVoter under a member's tag would point the
	// member's raft identity at this node's address.
	if err := n.checkNodeID(info); err != nil {
		return err
	}
	f := n.raft.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	present := false
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == info.Tag && string(s.Address) == info.RaftAddr {
			present = true
		}
	}
	if !present {
		// Nothing listening there: adding it as a voter would cost a small
		// cluster its quorum until it is removed again.
		conn, err := net.DialTimeout("tcp", info.RaftAddr, 2*time.Second)
		if err != nil {
			return badRequest("node %s: nothing answers at its raft address %s: %v", info.Tag, info.RaftAddr, err)
		}
		conn.Close()
		if err := n.raft.r.AddVoter(raft.ServerID(info.Tag), raft.ServerAddress(info.RaftAddr), 0, 10*time.Second).Error(); err != nil {
			return fmt.Errorf("add voter %s at %s: %w", info.Tag, info.RaftAddr, err)
		}
		n.logger.Info("added raft voter", "tag", info.Tag, "raft", info.RaftAddr)
	}
	res, err := n.raft.propose(ctx, &raftfsm.AddNode{Meta: raftfsm.Meta{At: time.Now().UTC()}, Node: info})
	if err != nil {
		return err
	}
	return res.Err
}

// checkJoin refuses a join request whose node could never take part: a raft
// voter at an address nobody listens on costs a small cluster its quorum
// (one node of two), and the state records whatever it is given.
func checkJoin(info raftfsm.NodeInfo) error {
	if !config.ValidTag(info.Tag) {
		return badRequest("Node.Tag %q: must be 1 to 4 letters A-Z", info.Tag)
	}
	if info.ID != "" && !validNodeID(info.ID) {
		return badRequest("Node.Id %q: must be 32 lowercase hex digits", info.ID)
	}
	if msg := config.CheckURL(info.HttpUrl, "http", "https"); msg != "" {
		return badRequest("Node.HttpUrl %q: %s", info.HttpUrl, msg)
	}
	if info.NatsUrl != "" {
		if msg := config.CheckURL(info.NatsUrl, "nats", "tls"); msg != "" {
			return badRequest("Node.NatsUrl %q: %s", info.NatsUrl, msg)
		}
	}
	host, port, err := net.SplitHostPort(info.RaftAddr)
	if msg := config.CheckAddr(info.RaftAddr); msg != "" || err != nil || host == "" || port == "0" {
		return badRequest("Node.RaftAddr %q: must be host:port of the node's raft listener", info.RaftAddr)
	}
	return nil
}

// inRaftConfiguration reports whether raft's latest configuration lists
// the node tag (at any address), as this node knows it.
func (n *Node) inRaftConfiguration(tag string) bool {
	f := n.raft.r.GetConfiguration()
	if f.Error() != nil {
		return true // unknown: do not refuse on it
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == tag {
			return true
		}
	}
	return false
}

func (n *Node) selfInfo() raftfsm.NodeInfo {
	return raftfsm.NodeInfo{Tag: n.cfg.Node.Tag, HttpUrl: n.HTTPURL(), RaftAddr: string(n.raft.transport.LocalAddr()), NatsUrl: n.bus.clientURL(), ID: n.nodeID}
}

// leaderURL is the leader's HTTP URL from the state, or "".
func (n *Node) leaderURL() string {
	_, id := n.raft.r.LeaderWithID()
	if id == "" {
		return ""
	}
	for _, m := range n.fsm.Nodes() {
		if m.Tag == string(id) {
			return m.HttpUrl
		}
	}
	return ""
}

func (n *Node) handleJoin(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, 64<<10)
	if err != nil {
		writeError(w, err)
		return
	}
	var req joinRequest
	if err := decodeJSON(body, &req); err != nil {
		writeError(w, err)
		return
	}
	if n.raft.r.State() != raft.Leader {
		n.forwardToLeader(w, r, body)
		return
	}
	if req.Check {
		var err error
		switch {
		case !config.ValidTag(req.Node.Tag):
			err = badRequest("Node.Tag %q: must be 1 to 4 letters A-Z", req.Node.Tag)
		case !validNodeID(req.Node.ID):
			err = badRequest("Node.Id %q: must be 32 lowercase hex digits", req.Node.ID)
		default:
			err = n.checkNodeID(req.Node)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"Leader": n.cfg.Node.Tag})
		return
	}
	if err := checkJoin(req.Node); err != nil {
		writeError(w, err)
		return
	}
	if req.HadState && !n.inRaftConfiguration(req.Node.Tag) {
		writeError(w, &apiError{Status: http.StatusConflict, Type: "NodeRemoved",
			Msg: fmt.Sprintf("node %s was removed from the cluster; its data directory cannot rejoin: start it with an empty data directory to add it again", req.Node.Tag)})
		return
	}
	if err := n.addMember(r.Context(), req.Node); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"Leader": n.cfg.Node.Tag, "Nodes": n.fsm.Nodes()})
}

func (n *Node) handleRemoveNode(w http.ResponseWriter, r *http.Request) {
	tag := r.PathValue("tag")
	if n.raft.r.State() != raft.Leader {
		n.forwardToLeader(w, r, nil)
		return
	}
	known := false
	for _, m := range n.fsm.Nodes() {
		known = known || m.Tag == tag
	}
	if !known {
		writeError(w, notFound("NodeNotFound", "no node %q in the cluster", tag))
		return
	}
	if tag == n.cfg.Node.Tag {
		writeError(w, badRequest("node %s is the leader: remove it from another node after a new leader is elected (or stop it first)", tag))
		return
	}
	// Refuse before touching raft membership what the FSM would refuse.
	for _, rec := range n.fsm.Records() {
		if sh, ok := rec.SoleReplicaShard(tag); ok {
			writeError(w, &apiError{Status: http.StatusConflict, Type: "OnlyReplica", Msg: fmt.Sprintf("node %s holds the only replica of shard %d of %q: its data exists nowhere else; delete the database first", tag, sh, rec.DatabaseName)})
			return
		}
	}
	if err := n.raft.r.RemoveServer(raft.ServerID(tag), 0, 10*time.Second).Error(); err != nil {
		writeError(w, fmt.Errorf("remove raft voter %s: %w", tag, err))
		return
	}
	res, err := n.raft.propose(r.Context(), &raftfsm.RemoveNode{Meta: raftfsm.Meta{At: time.Now().UTC()}, Tag: tag, Candidates: n.upNodes()})
	if err == nil {
		err = res.Err
	}
	if errors.Is(err, raftfsm.ErrNodeNotFound) {
		err = nil // finishRemovals got there first
	}
	if err != nil {
		writeError(w, err)
		return
	}
	n.logger.Info("removed node", "tag", tag, "replacements", res.Value)
	w.WriteHeader(http.StatusNoContent)
}

// finishRemovalsEvery is how often the leader looks for removals that
// stopped halfway.
const finishRemovalsEvery = 5 * time.Second

// finishRemovals completes, on the leader, the removal of nodes that raft's
// configuration no longer lists but the state still does: a removal whose
// raft step committed while its answer was lost (a leader change) and
// whose state step never ran, leaving shards that list a node which will
// never serve them. Joins add the raft voter first, so a node the state
// lists and raft does not is always one being removed.
func (n *Node) finishRemovals(ctx context.Context) {
	for _, m := range n.fsm.Nodes() {
		if m.Tag == n.cfg.Node.Tag || n.inRaftConfiguration(m.Tag) {
			continue
		}
		res, err := n.raft.propose(ctx, &raftfsm.RemoveNode{Meta: raftfsm.Meta{At: time.Now().UTC()}, Tag: m.Tag, Candidates: n.upNodes()})
		if err == nil {
			err = res.Err
		}
		if err != nil {
			n.logger.Warn("finish removing a node raft no longer lists", "tag", m.Tag, "err", err)
			continue
		}
		n.logger.Info("finished removing a node raft no longer lists", "tag", m.Tag, "replacements", res.Value)
	}
}

// handleApply applies a command forwarded by a follower; leader only.
func (n *Node) handleApply(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, 1<<20)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := raftfsm.Check(body); err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	if n.raft.r.State() != raft.Leader {
		n.forwardToLeader(w, r, body)
		return
	}
	f, err := n.leaderApply(body)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := f.Error(); err != nil {
		writeError(w, unavailable("raft apply: %v", err))
		return
	}
	res, _ := f.Response().(raftfsm.Result)
	if res.Err != nil {
		writeError(w, res.Err)
		return
	}
	writeJSON(w, http.StatusOK, applyReply{Index: f.Index(), Duplicate: res.Duplicate})
}

// leaderApply applies an encoded command through raft on this node, the
// leader. Database creates pass one at a time, each checked, once the one
// before it is applied, against the names that differ from it only in
// case: nodes check that before they propose, but two creates sent to two
// nodes at once both passed, and made two databases of one name.
func (n *Node) leaderApply(data []byte) (raft.ApplyFuture, error) {
	if len(data) == 0 || raftfsm.CommandType(data[0]) != raftfsm.TypeCreateDatabase {
		return n.raft.r.Apply(data, 10*time.Second), nil
	}
	var c raftfsm.CreateDatabase
	if err := json.Unmarshal(data[1:], &c); err != nil {
		return n.raft.r.Apply(data, 10*time.Second), nil // the state machine refuses it
	}
	n.createMu.Lock()
	defer n.createMu.Unlock()
	if other := n.sameNameOtherCase(c.Name); other != "" {
		return nil, &apiError{Status: http.StatusConflict, Type: "DatabaseAlreadyExists",
			Msg: fmt.Sprintf("database %q exists: names are case-insensitive, so %q would be the same database", other, c.Name)}
	}
	f := n.raft.r.Apply(data, 10*time.Second)
	_ = f.Error() // applied here before the next create is checked
	return f, nil
}

// remoteError turns a forwarded command's error answer back into the
// sentinel the state machine returned, so callers can test for it.
func remoteError(ae *apiError) error {
	for _, e := range []error{raftfsm.ErrStale, raftfsm.ErrConflict, raftfsm.ErrInvalid, raftfsm.ErrDatabaseExists, raftfsm.ErrDatabaseNotFound, raftfsm.ErrNodeNotFound, raftfsm.ErrNodeIDConflict, raftfsm.ErrOperationNotFound} {
		if ae.Type == typeOf(e) {
			return sentinelError{sentinel: e, msg: ae.Msg}
		}
	}
	return ae
}

// sentinelError carries a forwarded error's message with the sentinel it
// came from, so errors.Is works without repeating the sentinel's text.
type sentinelError struct {
	sentinel error
	msg      string
}

func (e sentinelError) Error() string { return e.msg }
func (e sentinelError) Unwrap() error { return e.sentinel }

// proposeIndex runs a command through raft (forwarding it to the leader
// when this node is a follower), waits until this node applied it, and
// returns its raft index.
func (n *Node) proposeIndex(ctx context.Context, cmd raftfsm.Command) (uint64, error) {
	if s, ok := cmd.(interface{ SetRequestID(string) }); ok && cmd.Request() == "" {
		s.SetRequestID(n.cfg.Node.Tag + "-" + newOperationID())
	}
	if s, ok := cmd.(interface{ StampIfUnset(time.Time) }); ok {
		s.StampIfUnset(time.Now().UTC())
	}
	// Leadership can move under load: retry (the request id makes a retry
	// of an applied command a no-op) until ctx or 15s end.
	deadline := time.Now().Add(15 * time.Second)
	delay := 20 * time.Millisecond
	for {
		index, err := n.proposeOnce(ctx, cmd)
		if err == nil || !transientRaftError(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return index, err
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		delay = min(delay*2, time.Second)
	}
}

// transientRaftError reports errors that a retry may cure: no leader, a
// leadership change, a forward that failed.
func transientRaftError(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable
}

func (n *Node) proposeOnce(ctx context.Context, cmd raftfsm.Command) (uint64, error) {
	if n.raft.r.State() == raft.Leader {
		data, err := raftfsm.Encode(cmd)
		if err != nil {
			return 0, err
		}
		f, err := n.leaderApply(data)
		if err != nil {
			return 0, err
		}
		err = f.Error()
		if err == nil {
			res, _ := f.Response().(raftfsm.Result)
			if res.Err != nil {
				return 0, res.Err
			}
			return f.Index(), nil
		}
		if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
			return 0, unavailable("raft apply: %v", err)
		}
	}
	data, err := raftfsm.Encode(cmd)
	if err != nil {
		return 0, err
	}
	_, leader := n.raft.r.LeaderWithID()
	url := n.leaderURL()
	if url == "" {
		return 0, unavailable("no raft leader is known to node %s", n.cfg.Node.Tag)
	}
	var rep applyReply
	fctx, stop := n.whileLeader(ctx, string(leader))
	err = n.postJSON(fctx, url+"/internal/raft/apply", data, &rep)
	stop()
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return 0, remoteError(ae)
		}
		if ctx.Err() == nil {
			// The leader was replaced or found down while it had the
			// command: retried with the next leader (the request id keeps
			// it from applying twice).
			return 0, unavailable("raft leader %s did not answer: %v", leader, err)
		}
		return 0, err
	}
	if err := n.waitApplied(ctx, rep.Index); err != nil {
		return 0, err
	}
	return rep.Index, nil
}

// whileLeader returns a context that ends when ctx does, or when this node
// sees that leader replaced or down: a command forwarded to a leader that
// hangs is sent to its successor instead of waiting out the forward's
// whole timeout.
func (n *Node) whileLeader(ctx context.Context, leader string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, id := n.raft.r.LeaderWithID(); string(id) != leader || n.health.knownDown(leader) {
				cancel()
				return
			}
		}
	}()
	return ctx, func() {
		cancel()
		<-done
	}
}

// propose runs a command through raft and waits until this node's
// replicas reflect it and every reachable member applied it: for commands
// (creating a database) after which any node must serve at once.
func (n *Node) propose(ctx context.Context, cmd raftfsm.Command) error {
	index, err := n.proposeIndex(ctx, cmd)
	if err != nil {
		return err
	}
	if err := n.replicas.waitFor(ctx, index); err != nil {
		return err
	}
	n.waitMembers(ctx, index)
	return nil
}

// waitMembers waits (bounded by ctx) until every up member node applied
// index and opened its replicas, so a database is usable through any node
// once its creation is acknowledged. Unreachable nodes are skipped: they
// catch up when they return.
func (n *Node) waitMembers(ctx context.Context, index uint64) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range n.fsm.Nodes() {
		if m.Tag == n.cfg.Node.Tag || !n.health.up(m.Tag) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.call(ctx, m.Tag, "node.applied", appliedRequest{Index: index}, nil); err != nil {
				n.logger.Warn("member did not confirm raft index", "member", m.Tag, "index", index, "err", err)
			}
		}()
	}
	wg.Wait()
}

// appliedRequest asks a node to confirm it applied a raft index.
type appliedRequest struct {
	Index uint64 `json:"Index"`
}

func (n *Node) registerClusterRPC() {
	n.rpcHandlers["node.applied"] = func(ctx context.Context, data []byte) (any, error) {
		var req appliedRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return nil, badRequest("decode applied request: %v", err)
		}
		if err := n.waitApplied(ctx, req.Index); err != nil {
			return nil, unavailable("%v", err)
		}
		if err := n.replicas.waitFor(ctx, req.Index); err != nil {
			return nil, unavailable("%v", err)
		}
		return struct{}{}, nil
	}
	// node.cluster answers a restarted node asking whether it was removed
	// (see removedBy).
	n.rpcHandlers["node.cluster"] = func(context.Context, []byte) (any, error) {
		if !n.ready.Load() {
			return nil, unavailable("node %s is starting", n.cfg.Node.Tag)
		}
		return n.clusterAnswer(), nil
	}
}

// waitApplied waits until the local FSM applied index.
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	ch, stop := n.fsm.Watch()
	defer stop()
	for n.fsm.AppliedIndex() < index {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for raft index %d: %w", index, ctx.Err())
		}
	}
	return nil
}

// forwardToLeader replays the request on the leader and copies its answer.
func (n *Node) forwardToLeader(w http.ResponseWriter, r *http.Request, body []byte) {
	url := n.leaderURL()
	if url == "" {
		writeError(w, unavailable("no raft leader is known to node %s", n.cfg.Node.Tag))
		return
	}
	if r.Header.Get("Forwarded-By") != "" {
		writeError(w, unavailable("leadership is changing (request already forwarded by %s)", r.Header.Get("Forwarded-By")))
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, url+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		writeError(w, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Forwarded-By", n.cfg.Node.Tag)
	res, err := n.httpClient.Do(req)
	if err != nil {
		writeError(w, unavailable("forward to leader at %s: %v", url, err))
		return
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode == http.StatusNoContent {
		w.WriteHeader(res.StatusCode)
		return
	}
	writeRaw(w, res.StatusCode, b)
}

// postJSON posts body to url and decodes a 2xx answer into out (if set);
// an error answer comes back as an apiError with the remote status.
func (n *Node) postJSON(ctx context.Context, url string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sent-By", n.cfg.Node.Tag)
	res, err := n.httpClient.Do(req)
	if err != nil {
		return unavailable("post %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		var eb errorBody
		_ = json.Unmarshal(b, &eb)
		if eb.Error == "" {
			eb.Error = string(b)
		}
		return &apiError{Status: res.StatusCode, Type: eb.Type, Msg: eb.Error}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}
