package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/shardnode/shardnode/raftfsm"
)

// handleEvents streams a database's resharding progress as server-sent
// events: one "migration" event per bucket migration step (started, Moved,
// OwnershipTransferred, completed) and one "operation" event per change of
// an operation's progress, from the FSM's journal of changes, so none is
// skipped however fast the steps follow each other. Each event's data is
// JSON; its id is the raft index that caused it. A stream that falls more
// than the journal's length behind gets a "resync" event and the current
// state.
func (n *Node) handleEvents(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, fmt.Errorf("streaming unsupported"))
		return
	}
	db := t.rec.DatabaseName
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher.Flush() // a client waits for the headers before reading events
	send := func(event string, id uint64, v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "event: %s\nid: %d\ndata: %s\n\n", event, id, b); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	ch, stop := n.fsm.Watch()
	defer stop()
	// last is the raft index this stream has seen the database as of:
	// every change of it after last is still to send. It follows the
	// applied index, not the record's Etag, so a database that does not
	// change keeps up with the journal while others fill it.
	rec, last, ok := n.fsm.RecordAt(db)
	if !ok {
		send("deleted", last, map[string]string{"Database": db})
		return
	}
	// The operations as they stand, newest first as GET .../resharding
	// lists them (the record holds them by id, in no order).
	views := make([]operationView, 0, len(rec.Sharding.Resharding))
	for _, op := range rec.Sharding.Resharding {
		views = append(views, n.viewOperation(r.Context(), rec, op))
	}
	sortOperations(views)
	for _, v := range views {
		if !send("operation", rec.Etag, v) {
			return
		}
	}
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-n.runCtxDone():
			return
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-ch:
			changes, through, complete := n.fsm.Changes(db, last)
			if !complete {
				// This stream fell too far behind the journal: say so, and
				// send the current state instead of the steps missed.
				cur, at, ok := n.fsm.RecordAt(db)
				if !ok {
					send("deleted", at, map[string]string{"Database": db})
					return
				}
				if !send("resync", cur.Etag, map[string]string{"Database": db, "Reason": "this stream fell behind; what follows is the current state, steps in between were not sent"}) {
					return
				}
				for _, m := range cur.Sharding.BucketMigrations {
					if !send("migration", cur.Etag, newMigrationEvent(m, string(m.Status))) {
						return
					}
				}
				for _, op := range cur.Sharding.Resharding {
					if !send("operation", cur.Etag, n.viewOperation(r.Context(), cur, op)) {
						return
					}
				}
				last = max(last, at) // cur is the database as of at
				continue
			}
			for _, c := range changes {
				var ok bool
				switch c.Kind {
				case raftfsm.ChangeMigration:
					ok = send("migration", c.Index, newMigrationEvent(c.Migration, c.Step))
				case raftfsm.ChangeOperation:
					ok = send("operation", c.Index, n.viewOperationOf(r.Context(), db, n.shardsOf(db), c.Operation, c.Migrations))
				case raftfsm.ChangeDeleted:
					send("deleted", c.Index, map[string]string{"Database": db})
					return
				}
				if !ok {
					return
				}
				last = c.Index
			}
			// The batch held every change of the database up to through.
			last = max(last, through)
		}
	}
}

// migrationEvent is a "migration" event's data.
type migrationEvent struct {
	Bucket           uint32 `json:"Bucket"`
	MigrationIndex   uint64 `json:"MigrationIndex"`
	SourceShard      int    `json:"SourceShard"`
	DestinationShard int    `json:"DestinationShard"`
	Step             string `json:"Step"`
	OperationID      string `json:"OperationId,omitempty"`
	// Leftovers marks a migration the documents migrator started.
	Leftovers bool   `json:"Leftovers,omitempty"`
	Error     string `json:"Error,omitempty"`
}

func newMigrationEvent(m *raftfsm.BucketMigration, step string) migrationEvent {
	return migrationEvent{m.Bucket, m.MigrationIndex, m.SourceShard, m.DestinationShard, step, m.OperationID, m.Leftovers, m.LastError}
}

// shardsOf is db's current topology, or nil once it is deleted.
func (n *Node) shardsOf(db string) map[int]*raftfsm.ShardTopology {
	if rec := n.recordOf(db); rec != nil {
		return rec.Sharding.Shards
	}
	return nil
}
