package node

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/shardnode/shardnode/raftfsm"
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
	rec, ok := n.recordByName(name)
	if !ok {
		// A database created through another node a moment ago may not be
		// applied here yet: before saying it does not exist, catch up with
		// what the leader has committed.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := n.catchUpWithLeader(ctx)
		cancel()
		if err == nil {
			rec, ok = n.recordByName(name)
		}
	}
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

// recordByName finds a database by any spelling of its name (names are
// case-insensitive, as in RavenDB: SHOP is shop).
func (n *Node) recordByName(name string) (*raftfsm.DatabaseRecord, bool) {
	rec, ok := n.fsm.Record(name)
	if !ok {
		if other := n.sameNameOtherCase(name); other != "" {
			rec, ok = n.fsm.Record(other)
		}
	}
	return rec, ok
}

// sameNameOtherCase returns the name of the database whose name differs
// from name only in case, or "" if there is none.
func (n *Node) sameNameOtherCase(name string) string {
	for _, r := range n.fsm.Records() {
		if r.DatabaseName != name && strings.EqualFold(r.DatabaseName, name) {
			return r.DatabaseName
		}
	}
	return ""
}
