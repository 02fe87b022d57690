package replication

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/shardnode/shardnode/storage"
)

// Item is one replicated document or tombstone.
type Item struct {
	ID           string          `json:"Id"`
	Collection   string          `json:"Collection,omitempty"`
	ChangeVector string          `json:"ChangeVector"`
	LastModified time.Time       `json:"LastModified"`
	Flags        storage.Flags   `json:"Flags,omitempty"`
	Body         json.RawMessage `json:"Body,omitempty"`
	// Stub marks an item sent by its version alone, without its body: one
	// that came to the sender by a bucket migration, which sent it to the
	// receiver too. A receiver that does not hold it at that version (or
	// a newer one) soon answers Missing, and the sender sends it whole.
	// Only binary format 3 carries it.
	Stub bool `json:"-"`
}

// Batch is a run of one replica's feed sent to another replica of the same
// shard.
type Batch struct {
	// DB and Shard name the shard.
	DB    string `json:"Db"`
	Shard int    `json:"Shard"`
	// Source is the sending replica's database id; SourceTag its node.
	Source    string `json:"Source"`
	SourceTag string `json:"SourceTag"`
	// Items are the changes, in the source's etag order.
	Items []Item `json:"Items"`
	// LastEtag is the source etag the batch covers up to (it may cover
	// items that are not sent, such as local-only tombstones).
	LastEtag uint64 `json:"LastEtag"`
	// After is the source etag the batch's items follow: what the sender
	// believes the receiver holds. A receiver that holds less (a replica
	// recreated empty while the sender kept sending) would be left with a
	// hole: it applies nothing and answers what it holds, and the sender
	// resends from there. 0 is not checked: from older senders, or to
	// receivers that do not take format 2 (a batch with After 0 goes in
	// format 1).
	After uint64 `json:"After,omitempty"`
}

// ProgressRequest asks a replica how far it applied a source's feed.
type ProgressRequest struct {
	DB     string `json:"Db"`
	Shard  int    `json:"Shard"`
	Source string `json:"Source"`
}

// ProgressReply answers ProgressRequest and Batch.
type ProgressReply struct {
	Etag uint64 `json:"Etag"`
	// DatabaseID is the receiving replica's own database id (in answers to
	// ProgressRequest; empty from older nodes): the sender does not send it
	// items that came from it.
	DatabaseID string `json:"DatabaseId,omitempty"`
	// BatchFormat is the newest binary batch format the receiving replica
	// decodes (in answers to ProgressRequest; 0 from nodes that know only
	// format 1). A sender checks the receiver for holes (Batch.After) only
	// when it takes format 2.
	BatchFormat int `json:"BatchFormat,omitempty"`
	// Lost lists, in answers to a batch, its items that lost a conflict
	// with the receiver's own version (storage.Result.Lost): the receiver
	// holds them only in its conflict log. A write waiting for replicas
	// must not count such a receiver as holding it. Empty from older
	// nodes.
	Lost []LostItem `json:"Lost,omitempty"`
	// Missing, in answers to a batch, says that some of its stubs
	// (Item.Stub) named items this replica did not hold at their version
	// or a newer one within StubWait: it applied nothing, and the sender
	// sends the items whole.
	Missing bool `json:"Missing,omitempty"`

	// superseded are the receiver's own versions that lost a conflict to
	// the batch's items (a storage.Result Conflict not Lost), for its
	// Replicator (see Replicator.Apply); not sent.
	superseded []conflictLoss
}

// LostItem is a batch item that lost a conflict on the receiver.
type LostItem struct {
	// Index is the item's position in the batch.
	Index int `json:"Index"`
	// Winner is the version part of the receiver's version that won,
	// before the two were merged: the writes it does not cover are lost.
	Winner string `json:"Winner"`
}

// StubWait bounds how long a replica waits for its own commits to bring
// the items a batch's stubs name before it answers Missing. The migration
// sends each batch to every replica of the destination at once, so a
// sibling's stubs of it usually arrive while this replica is storing the
// same batch.
const StubWait = 200 * time.Millisecond

// Apply applies a batch to the receiving replica and returns the source
// etag it now holds. Items and progress commit together. Stubs are skipped
// once the replica holds what they name (see waitForStubs).
func Apply(ctx context.Context, s *storage.Store, b *Batch) (ProgressReply, error) {
	have := s.ReplicationProgress(b.Source)
	if b.LastEtag <= have {
		return ProgressReply{Etag: have}, nil // a resend of what we hold
	}
	if b.After > have {
		return ProgressReply{Etag: have}, nil // items before After are missing here: resend from have
	}
	held, err := waitForStubs(ctx, s, b.Items)
	if err != nil {
		return ProgressReply{Etag: have}, fmt.Errorf("apply batch from %s (%s) up to etag %d: %w", b.SourceTag, b.Source, b.LastEtag, err)
	}
	if !held {
		return ProgressReply{Etag: have, Missing: true}, nil
	}
	ops := make([]storage.Op, 0, len(b.Items)+1)
	index := make([]int, 0, len(b.Items)) // the batch item of each op
	for i, it := range b.Items {
		if it.Stub {
			continue
		}
		ops = append(ops, storage.Op{Kind: storage.OpReplicate, ID: it.ID, Collection: it.Collection, Body: it.Body,
			ChangeVector: it.ChangeVector, LastModified: it.LastModified, Flags: it.Flags, Source: b.Source})
		index = append(index, i)
	}
	ops = append(ops, storage.Op{Kind: storage.OpSetProgress, Source: b.Source, Etag: b.LastEtag})
	res, err := s.Write(ctx, ops)
	if err != nil {
		return ProgressReply{Etag: have}, fmt.Errorf("apply batch from %s (%s) up to etag %d: %w", b.SourceTag, b.Source, b.LastEtag, err)
	}
	reply := ProgressReply{Etag: b.LastEtag}
	for j, i := range index {
		if j >= len(res) {
			break
		}
		switch r := res[j]; {
		case r.Lost:
			reply.Lost = append(reply.Lost, LostItem{Index: i, Winner: r.WinnerVersion})
		case r.Conflict:
			if l, err := newConflictLoss(r.ID, r.LoserVersion, r.WinnerVersion); err == nil {
				reply.superseded = append(reply.superseded, l)
			}
		}
	}
	return reply, nil
}

// waitForStubs reports whether the replica holds every item that a stub
// among items names, waiting up to StubWait for its own commits (a
// migration batch on its way here) to bring those it does not hold yet.
// What a replica holds only ever gets newer, so a stub found held stays
// held until the batch's other items commit.
func waitForStubs(ctx context.Context, s *storage.Store, items []Item) (bool, error) {
	var pending []Item
	for _, it := range items {
		if it.Stub {
			pending = append(pending, it)
		}
	}
	if len(pending) == 0 {
		return true, nil
	}
	timer := time.NewTimer(StubWait)
	defer timer.Stop()
	for {
		changed := s.Changed() // before reading: no commit slips between
		// In order, stopping at the first not held: a wake by a commit
		// that did not bring it (a client's write) costs one read.
		for len(pending) > 0 {
			ok, err := s.Holds(pending[0].ID, pending[0].ChangeVector)
			if err != nil {
				return false, err
			}
			if !ok {
				break
			}
			pending = pending[1:]
		}
		if len(pending) == 0 {
			return true, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}
