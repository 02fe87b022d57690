package node

import (
	"strconv"
	"strings"

	"github.com/shardnode/shardnode/raftfsm"
	"github.com/shardnode/shardnode/storage"
)

// target is what a /databases/{db} path names: a whole database, or with
// the "{db}${n}" form one shard replica on this node.
type target struct {
	rec   *raftfsm.DatabaseRecord
	shard int // -1 for the whole database
}

// resolve finds the record for a {db} path element.
func (n *Node) resolve(name string) (target, error) {
	shard := -1
	if i := strings.LastIndexByte(name, '$'); i >= 0 {
		s, err := strconv.Atoi(name[i+1:])
		if err != nil || s < 0 || name[i+1:] != strconv.Itoa(s) {
			return target{}, badRequest("database %q: the part after '$' must be a shard number", name)
		}
		name, shard = name[:i], s
	}
	if err := raftfsm.ValidateDatabaseName(name); err != nil {
		return target{}, badRequest("%v", err)
	}
	rec, ok := n.fsm.Database(name)
	if !ok {
		return target{}, notFound("DatabaseDoesNotExist", "database %q does not exist", name)
	}
	if shard >= 0 {
		if _, ok := rec.Sharding.Shards[shard]; !ok {
			return target{}, notFound("ShardDoesNotExist", "database %q has no shard %d (shards: %v)", name, shard, rec.ShardNumbers())
		}
	}
	return target{rec: rec, shard: shard}, nil
}

// localReplica returns this node's replica of the target's shard, or a
// 404 naming the nodes that hold it.
func (n *Node) localReplica(t target) (*storage.Store, error) {
	s, ok := n.replicas.get(t.rec.DatabaseName, t.shard)
	if !ok {
		return nil, notFound("ShardNotOnThisNode", "shard %d of %q is not on node %s; it is held by %v",
			t.shard, t.rec.DatabaseName, n.cfg.Node.Tag, t.rec.Sharding.Shards[t.shard].Members)
	}
	return s, nil
}

// shardStore returns a replica to serve shard of rec. On one node every
// shard is local; routing to other nodes comes with the cluster work.
func (n *Node) shardStore(rec *raftfsm.DatabaseRecord, shard int) (*storage.Store, error) {
	s, ok := n.replicas.get(rec.DatabaseName, shard)
	if !ok {
		return nil, unavailable("no replica of shard %d of %q is reachable from node %s (members: %v)",
			shard, rec.DatabaseName, n.cfg.Node.Tag, rec.Sharding.Shards[shard].Members)
	}
	return s, nil
}
