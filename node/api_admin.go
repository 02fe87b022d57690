package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/raftfsm"
)

func (n *Node) handleHealth(w http.ResponseWriter, r *http.Request) {
	leader, _ := n.raft.r.LeaderWithID()
	removed := n.removed.Load() || n.removedForGood.Load()
	fresh := n.fresh.fresh()
	status := http.StatusOK
	if leader == "" || !n.ready.Load() || removed || !fresh {
		status = http.StatusServiceUnavailable
	}
	body := map[string]any{
		"Status":   http.StatusText(status),
		"Node":     n.cfg.Node.Tag,
		"Leader":   leader != "",
		"Ready":    n.ready.Load(),
		"Removed":  removed,
		"Current":  fresh,
		"Raft":     n.raft.r.State().String(),
		"Nats":     n.bus.nc.Status().String(),
		"UptimeMs": time.Since(n.started).Milliseconds(),
	}
	if behind := n.catchUps.n.Load(); behind > 0 {
		// Its routers send those replicas' requests to other members. A
		// rolling restart waits for this to go before it stops the next
		// node: stopped meanwhile, a member holding writes these lack
		// would leave them to serve older versions.
		body["CatchingUp"] = behind
	}
	if failing, last := n.replicas.failures(); failing > 0 {
		// The node serves its other replicas; these are retried.
		body["ReplicasFailing"] = failing
		body["ReplicaError"] = last
	}
	writeJSON(w, status, body)
}

// clusterNode is one entry of GET /cluster.
type clusterNode struct {
	Tag      string `json:"Tag"`
	HttpUrl  string `json:"HttpUrl"`
	RaftAddr string `json:"RaftAddr"`
	Status   string `json:"Status"`
	Voter    bool   `json:"Voter"`
	LastSeen string `json:"LastSeen,omitempty"`
	// Id is the node's data directory id (raftfsm.NodeInfo.ID).
	Id string `json:"Id,omitempty"`
}

// clusterAnswer is GET /cluster's answer.
type clusterAnswer struct {
	Leader string        `json:"Leader"`
	Term   uint64        `json:"Term"`
	Nodes  []clusterNode `json:"Nodes"`
}

func (n *Node) handleCluster(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, n.clusterAnswer())
}

// clusterAnswer is this node's view of the cluster: the leader it follows
// and the members the state lists.
func (n *Node) clusterAnswer() clusterAnswer {
	_, leaderID := n.raft.r.LeaderWithID()
	voters := map[string]bool{}
	if f := n.raft.r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			voters[string(s.ID)] = s.Suffrage == raft.Voter
		}
	}
	out := clusterAnswer{Leader: string(leaderID), Nodes: []clusterNode{}}
	out.Term, _ = strconv.ParseUint(n.raft.r.Stats()["term"], 10, 64)
	for _, m := range n.fsm.Nodes() {
		status := "Up"
		if !n.health.up(m.Tag) {
			status = "Down"
		}
		cn := clusterNode{Tag: m.Tag, HttpUrl: m.HttpUrl, RaftAddr: m.RaftAddr, Status: status, Voter: voters[m.Tag], Id: m.ID}
		if seen := n.health.lastSeen(m.Tag); !seen.IsZero() && m.Tag != n.cfg.Node.Tag {
			cn.LastSeen = seen.UTC().Format(time.RFC3339Nano)
		}
		out.Nodes = append(out.Nodes, cn)
	}
	return out
}

// handleTopology answers RavenDB clients' GET /topology?name={db}: the
// nodes a client may send that database's requests to. A client adopts a
// topology only if its Etag is above the one it holds, so the Etag moves
// with anything in the answer: it is the later of the record's latest
// change and the node list's (both raft indexes, so it never goes back).
func (n *Node) handleTopology(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	t, err := n.resolve(name)
	if err != nil {
		writeError(w, err)
		return
	}
	type topoNode struct {
		Url        string `json:"Url"`
		ClusterTag string `json:"ClusterTag"`
		Database   string `json:"Database"`
		ServerRole string `json:"ServerRole"`
	}
	nodes := []topoNode{}
	members, changed := n.fsm.NodesAndIndex()
	for _, m := range members {
		nodes = append(nodes, topoNode{Url: m.HttpUrl, ClusterTag: m.Tag, Database: t.rec.DatabaseName, ServerRole: "Member"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"Nodes": nodes, "Etag": max(t.rec.Etag, changed)})
}

func (n *Node) handleListDatabases(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"Databases": n.fsm.Records()})
}

// createDatabaseRequest is PUT /admin/databases/{db}'s body.
type createDatabaseRequest struct {
	Shards            int `json:"Shards"`
	ReplicationFactor int `json:"ReplicationFactor"`
}

func (n *Node) handleCreateDatabase(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("db")
	body, err := readBody(r, 64<<10)
	if err != nil {
		writeError(w, err)
		return
	}
	req := createDatabaseRequest{Shards: 1, ReplicationFactor: 1}
	if len(body) > 0 {
		if err := decodeJSON(body, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	rid := r.Header.Get("Request-Id")
	if other := n.sameNameOtherCase(name); other != "" && rid != "" {
		// Names are case-insensitive: a retry that spells the name another
		// way is the same request, answered as the first was, and another
		// request under a used id is refused for that, as with one spelling.
		if used, ok := n.fsm.RequestFingerprint(rid); ok && strings.HasPrefix(strings.ToLower(used), strings.ToLower(fmt.Sprintf("create database %q:", name))) {
			name = other
		}
	}
	cmd := &raftfsm.CreateDatabase{Meta: raftfsm.Meta{RequestID: rid, At: time.Now().UTC()}, Name: name,
		DatabaseID: changevector.NewDatabaseID(), Shards: req.Shards, ReplicationFactor: req.ReplicationFactor, Candidates: n.upNodes(), Spread: true}
	if rid != "" {
		cmd.Fingerprint = createFingerprint(name, req)
	}
	if err := raftfsm.ValidateCreate(cmd); err != nil {
		writeError(w, err)
		return
	}
	if other := n.sameNameOtherCase(name); other != "" {
		writeError(w, &apiError{Status: http.StatusConflict, Type: "DatabaseAlreadyExists",
			Msg: fmt.Sprintf("database %q exists: names are case-insensitive, so %q would be the same database", other, name)})
		return
	}
	if err := n.propose(r.Context(), cmd); err != nil {
		writeError(w, err)
		return
	}
	if err := n.checkRequestID(r, cmd.Fingerprint); err != nil {
		writeError(w, err)
		return
	}
	rec, _ := n.fsm.Database(name)
	index, known := n.fsm.RequestIndex(rid)
	if rec == nil || (rid != "" && known && rec.CreatedIndex != index) {
		// The state machine took the command for a retry of an earlier one
		// with the same Request-Id, and that one did not leave this
		// database behind (or the database was deleted and created again
		// since): the id was reused for something else.
		writeError(w, requestIDReused(r))
		return
	}
	// Answer once every member that is up has opened its replicas: a write
	// sent right after the answer otherwise found its shard's first member
	// without the replica yet and went to the next one, and the first,
	// caught up with what the next had when it asked, took the writes
	// after it: If-Match increments taken by both became conflicts.
	wctx, cancel := context.WithTimeout(r.Context(), createWait)
	if err := n.waitAllApplied(wctx, rec.CreatedIndex); err != nil {
		n.logger.Warn("created database; not every member opened its replicas in time", "db", name, "err", err)
	}
	cancel()
	n.logger.Info("created database", "db", name, "shards", req.Shards, "replication_factor", req.ReplicationFactor)
	writeJSON(w, http.StatusCreated, rec)
}

// createFingerprint names a create request, for telling a retry of it
// from another use of its Request-Id.
func createFingerprint(name string, req createDatabaseRequest) string {
	return fmt.Sprintf("create database %q: Shards %d, ReplicationFactor %d", name, req.Shards, req.ReplicationFactor)
}

// createWait bounds how long a create waits for the members to open the
// new database's replicas before it answers anyway.
const createWait = 30 * time.Second

func (n *Node) handleGetDatabase(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t.rec)
}

func (n *Node) handleDeleteDatabase(w http.ResponseWriter, r *http.Request) {
	name, rid := r.PathValue("db"), r.Header.Get("Request-Id")
	cmd := &raftfsm.DeleteDatabase{Meta: raftfsm.Meta{RequestID: rid, At: time.Now().UTC()}}
	if rid != "" {
		// Names are case-insensitive: any spelling deletes the same database.
		cmd.Fingerprint = fmt.Sprintf("delete database %q", strings.ToLower(name))
	}
	t, err := n.resolve(name)
	var missing *apiError
	switch {
	case err == nil && t.shard >= 0:
		writeError(w, badRequest("delete a whole database, not one shard (%q)", name))
		return
	case err == nil:
		cmd.Name = t.rec.DatabaseName
	case rid != "" && !strings.Contains(name, "$") && errors.As(err, &missing) && missing.Type == "DatabaseDoesNotExist":
		// Perhaps the retry of a delete whose answer was lost: the state
		// machine tells it by its Request-Id. If the id is new, the
		// command finds no database and answers 404.
		cmd.Name = name
	default:
		writeError(w, err)
		return
	}
	if err := n.propose(r.Context(), cmd); err != nil {
		writeError(w, err)
		return
	}
	if err := n.checkRequestID(r, cmd.Fingerprint); err != nil {
		writeError(w, err) // the id's command was not this delete
		return
	}
	// With the id remembered with this delete's fingerprint, the delete
	// applied, now or at an earlier try. Without (no Request-Id, or the
	// id's command came from an older version), judge by the outcome.
	if _, ok := n.fsm.RequestFingerprint(rid); !ok {
		if t.rec == nil {
			writeError(w, err) // the database was missing before, and is
			return
		}
		if rec, _ := n.fsm.Database(t.rec.DatabaseName); rec != nil && rec.CreatedIndex == t.rec.CreatedIndex {
			writeError(w, requestIDReused(r)) // taken for a retry of another command
			return
		}
	}
	if len(n.fsm.Nodes()) > 1 {
		// A node that lost touch with the cluster serves by its records for
		// at most freshFor (see freshness): once this answer is sent, none
		// takes writes into the deleted database's replicas any more, so
		// none is acknowledged and then dropped with them.
		select {
		case <-time.After(freshFor):
		case <-r.Context().Done():
		}
	}
	n.logger.Info("deleted database", "db", cmd.Name)
	w.WriteHeader(http.StatusNoContent)
}

// requestIDReused is the answer to a command the state machine skipped as a
// retry of an earlier one with the same Request-Id, when the outcome shows
// the earlier one was a different command.
func requestIDReused(r *http.Request) error {
	return &apiError{Status: http.StatusConflict, Type: "RequestIdReused",
		Msg: fmt.Sprintf("Request-Id %q was already used by another command, so this one was not applied; send a new id (an id names one command, for retrying it safely)", r.Header.Get("Request-Id"))}
}

// checkRequestID, after r's command was proposed with fingerprint fp
// (raftfsm.Meta.Fingerprint), refuses it with a 409 RequestIdReused if the
// state machine remembers r's Request-Id with another fingerprint: it took
// the command for a retry, and the id's first command asked for something
// else, so nothing was applied. It returns nil when the id is remembered
// with fp (this command applied now, or earlier as a try whose answer was
// lost), and when it is remembered without a fingerprint (a command of an
// older version, which the caller judges by its outcome, as before).
func (n *Node) checkRequestID(r *http.Request, fp string) error {
	rid := r.Header.Get("Request-Id")
	if rid == "" || fp == "" {
		return nil
	}
	used, ok := n.fsm.RequestFingerprint(rid)
	if !ok || used == fp {
		return nil
	}
	return &apiError{Status: http.StatusConflict, Type: "RequestIdReused",
		Msg: fmt.Sprintf("Request-Id %q was already used to %s, so this request (%s) was not applied; send a new id (an id names one command, for retrying it safely)", rid, used, fp)}
}

// upNodes lists the members this node does not know to be down.
func (n *Node) upNodes() []string {
	var out []string
	for _, m := range n.fsm.Nodes() {
		if !n.health.knownDown(m.Tag) {
			out = append(out, m.Tag)
		}
	}
	return out
}
