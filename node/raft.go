package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/shardnode/shardnode/raftfsm"
)

// ErrNotLeader means this node cannot propose because it is not the raft
// leader and no leader is known.
var ErrNotLeader = errors.New("no raft leader available")

// raftNode owns the raft instance, its stores and transport.
type raftNode struct {
	r         *raft.Raft
	transport *raft.NetworkTransport
	store     *raftboltdb.BoltStore
	leaderCh  chan bool
	// existing: the raft stores held state when the node started, so it
	// was a member once (see removedBy).
	existing bool
}

// startRaft opens the raft stores under dir and starts raft with fsm. A
// fresh directory bootstraps a one-node cluster when bootstrap is set.
// join says raft.join is set (see checkRaftAddr). beforeListen, if not nil,
// runs once the stores say whether they hold state and before the raft
// transport listens; its error stops the start.
func startRaft(dir, tag, addr string, bootstrap, join bool, d dialer, fsm *raftfsm.FSM, beforeListen func(existing bool) error, logger *slog.Logger) (*raftNode, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raft dir: %w", err)
	}
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, DisableTime: true, Output: slogWriter{logger.With("component", "raft")}})
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return nil, fmt.Errorf("raft log store: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("raft snapshot store: %w", err)
	}
	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("raft state: %w", err)
	}
	if beforeListen != nil {
		if err := beforeListen(existing); err != nil {
			store.Close()
			return nil, err
		}
	}
	// No separate advertise address: the listener's own (with the real port
	// when raft.addr asks for port 0) is what peers dial.
	streams, err := listenRaft(addr, d)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("raft transport on %s: %w", addr, err)
	}
	transport := raft.NewNetworkTransportWithLogger(streams, 8, 10*time.Second, hl)
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(tag)
	conf.Logger = hl
	leaderCh := make(chan bool, 16)
	conf.NotifyCh = leaderCh
	// Small clusters on one box: react fast, snapshot the small state often.
	// Loopback clusters on 2 busy cores: fast enough to fail over in about
	// a second, slow enough that CPU starvation does not depose leaders.
	conf.HeartbeatTimeout = 1000 * time.Millisecond
	conf.ElectionTimeout = 1000 * time.Millisecond
	conf.LeaderLeaseTimeout = 500 * time.Millisecond
	conf.SnapshotThreshold = 1024
	// The latest entries stay in memory: a leader sends each new entry to
	// its followers right after storing it, and read it back from bolt
	// for that (3% of a resharding node's CPU).
	logs, err := raft.NewLogCache(raftLogCache, store)
	if err != nil {
		transport.Close()
		store.Close()
		return nil, fmt.Errorf("raft log cache: %w", err)
	}
	r, err := raft.NewRaft(conf, fsm, logs, store, snaps, transport)
	if err != nil {
		transport.Close()
		store.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	if existing && !join {
		if err := checkRaftAddr(r, conf.LocalID, transport.LocalAddr()); err != nil {
			r.Shutdown()
			transport.Close()
			store.Close()
			return nil, err
		}
	}
	if !existing && bootstrap {
		cfg := raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: transport.LocalAddr()}}}
		if err := r.BootstrapCluster(cfg).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			r.Shutdown()
			transport.Close()
			store.Close()
			return nil, fmt.Errorf("bootstrap raft: %w", err)
		}
		logger.Info("bootstrapped a new one-node cluster", "tag", tag, "raft", transport.LocalAddr())
	}
	return &raftNode{r: r, transport: transport, store: store, leaderCh: leaderCh, existing: existing}, nil
}

// raftLogCache is how many of the latest raft entries a node keeps in
// memory (a few hundred bytes each).
const raftLogCache = 512

// ErrRaftAddrChanged means the node restarted, without raft.join, with a
// raft.addr other than the one raft's configuration holds for it, while
// other voters dial that one: it would never hear from them.
var ErrRaftAddrChanged = errors.New("raft.addr changed")

// checkRaftAddr refuses a restart whose raft address differs from the one
// raft's latest configuration holds for this node (id), when the
// configuration has other voters: they dial the old address, so the node
// would wait for a leader for ever. The address is in raft's replicated
// configuration, which only the leader changes (addMember's AddVoter
// updates it), and a node learns the leader's URL from raft itself, which
// it never hears. Two restarts may move: a node that is the only voter
// elects itself whatever its address and re-registers its new one, and a
// node with raft.join set registers it through that URL (startRaft does
// not call this then).
func checkRaftAddr(r *raft.Raft, id raft.ServerID, addr raft.ServerAddress) error {
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("read raft configuration: %w", err)
	}
	var held raft.ServerAddress
	found, others := false, false
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			held, found = s.Address, true
		} else if s.Suffrage == raft.Voter {
			others = true
		}
	}
	if !found || held == addr || !others {
		return nil
	}
	return fmt.Errorf("%w: raft.addr is %s, but the cluster's raft configuration holds node %s at %s, and the other members dial that address, so this node would never hear from a leader; "+
		"start it with raft.addr %s (--raft-addr) again, or, to move it to %s, start it with raft.join (--join) set to a running member's HTTP URL, through which it registers its new address",
		ErrRaftAddrChanged, addr, id, held, held, addr)
}

// propose applies cmd through raft on this node, which must be the leader,
// and returns the command's result.
func (rn *raftNode) propose(ctx context.Context, cmd raftfsm.Command) (raftfsm.Result, error) {
	data, err := raftfsm.Encode(cmd)
	if err != nil {
		return raftfsm.Result{}, err
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	f := rn.r.Apply(data, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return raftfsm.Result{}, ErrNotLeader
		}
		return raftfsm.Result{}, fmt.Errorf("raft apply: %w", err)
	}
	res, _ := f.Response().(raftfsm.Result)
	return res, nil
}

// lastCommandAtOrBefore is the index of the last command entry (one the
// state machine applies) at or before index in the local log, or 0 when
// there is none left in the log: a snapshot, restored before raft started,
// holds everything older.
func (rn *raftNode) lastCommandAtOrBefore(index uint64) (uint64, error) {
	first, err := rn.store.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("raft log: %w", err)
	}
	for i := index; i >= first && i > 0; i-- {
		var l raft.Log
		if err := rn.store.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				return 0, nil // compacted away meanwhile: in the snapshot
			}
			return 0, fmt.Errorf("raft log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			return i, nil
		}
	}
	return 0, nil
}

func (rn *raftNode) close() error {
	err := rn.r.Shutdown().Error()
	if cerr := rn.transport.Close(); err == nil {
		err = cerr
	}
	if cerr := rn.store.Close(); err == nil {
		err = cerr
	}
	return err
}

// slogWriter turns hclog's text lines into slog records.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Warn(string(trimNewline(p)))
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

var _ io.Writer = slogWriter{}
