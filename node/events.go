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
// an operation's progress. Each event's data is JSON; its id is the raft
// index that caused it.
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
	prev := t.rec
	for _, op := range prev.Sharding.Resharding {
		if !send("operation", prev.Etag, viewOperation(prev, op)) {
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
			cur := n.recordOf(db)
			if cur == nil {
				send("deleted", n.fsm.AppliedIndex(), map[string]string{"Database": db})
				return
			}
			if cur == prev {
				continue
			}
			for _, e := range diffRecords(prev, cur) {
				if !send(e.event, cur.Etag, e.data) {
					return
				}
			}
			prev = cur
		}
	}
}

type sseEvent struct {
	event string
	data  any
}

// migrationEvent is a "migration" event's data.
type migrationEvent struct {
	Bucket           uint32 `json:"Bucket"`
	MigrationIndex   uint64 `json:"MigrationIndex"`
	SourceShard      int    `json:"SourceShard"`
	DestinationShard int    `json:"DestinationShard"`
	Step             string `json:"Step"`
	OperationID      string `json:"OperationId,omitempty"`
	Error            string `json:"Error,omitempty"`
}

// diffRecords lists the events between two versions of a record.
func diffRecords(prev, cur *raftfsm.DatabaseRecord) []sseEvent {
	var out []sseEvent
	ev := func(m *raftfsm.BucketMigration, step string) {
		out = append(out, sseEvent{"migration", migrationEvent{m.Bucket, m.MigrationIndex, m.SourceShard, m.DestinationShard, step, m.OperationID, m.LastError}})
	}
	for b, m := range cur.Sharding.BucketMigrations {
		old, ok := prev.Sharding.BucketMigrations[b]
		switch {
		case !ok || old.MigrationIndex != m.MigrationIndex:
			if ok {
				ev(old, "Completed")
			}
			ev(m, string(m.Status))
		case old.Status != m.Status:
			ev(m, string(m.Status))
		case old.Failures != m.Failures:
			ev(m, "Error")
		}
	}
	for b, old := range prev.Sharding.BucketMigrations {
		if _, ok := cur.Sharding.BucketMigrations[b]; !ok {
			ev(old, "Completed")
		}
	}
	for id, op := range cur.Sharding.Resharding {
		old, ok := prev.Sharding.Resharding[id]
		if !ok || old.BucketsDone != op.BucketsDone || old.Status != op.Status || len(old.Errors) != len(op.Errors) {
			out = append(out, sseEvent{"operation", viewOperation(cur, op)})
		}
	}
	return out
}
