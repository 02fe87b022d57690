package node

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/shardnode/shardnode/replication"
	"github.com/shardnode/shardnode/storage"
)

// opShardWriteBin is the binary form of a client write to a replica on
// another node. The JSON form ("shard.write", still served for nodes of
// earlier versions) made the sender re-validate and copy every document
// body and the receiver scan it again: in a 3-node load it was a fifth of
// the CPU.
const opShardWriteBin = "shard.write.bin"

// writeRequestVersion is the first byte of a binary write request.
const writeRequestVersion = 1

// writeRequest is a client write for one shard replica.
type writeRequest struct {
	DB          string
	Shard       int
	WaitFor     int
	WaitTimeout time.Duration
	RecordEtag  uint64
	Ops         []storage.Op // puts and deletes: Kind, ID, Collection, Body, IfMatch
}

// ifNewOnWire is an op's If-Match on the bus when the op asks for a new
// document. It is not a change vector, so a node of an earlier version,
// which does not know IfNew, refuses the write instead of skipping the
// check.
const ifNewOnWire = "(new)"

// wireIfMatch is the concurrency check of op as it travels between nodes.
func wireIfMatch(op storage.Op) string {
	if op.IfNew {
		return ifNewOnWire
	}
	return op.IfMatch
}

// fromWireIfMatch sets op's concurrency check from its form on the bus.
func fromWireIfMatch(op *storage.Op, s string) {
	if s == ifNewOnWire {
		op.IfNew, op.IfMatch = true, ""
		return
	}
	op.IfMatch = s
}

// appendWriteRequest lays r out as: version, db, shard, wait-for, wait
// timeout (ns), record etag, op count, then per op its kind, id,
// collection, If-Match and body (strings and body length-prefixed), with
// the field encoding of replication's binary batches.
func appendWriteRequest(b []byte, r writeRequest) []byte {
	e := replication.Encoder{Buf: append(b, writeRequestVersion)}
	e.String(r.DB)
	e.Varint(int64(r.Shard))
	e.Varint(int64(r.WaitFor))
	e.Varint(int64(r.WaitTimeout))
	e.Uvarint(r.RecordEtag)
	e.Uvarint(uint64(len(r.Ops)))
	for _, op := range r.Ops {
		e.Buf = append(e.Buf, byte(op.Kind))
		e.String(op.ID)
		e.String(op.Collection)
		e.String(wireIfMatch(op))
		e.Bytes(op.Body)
	}
	return e.Buf
}

// writeRequestLen is an upper bound of r's encoded length.
func writeRequestLen(r writeRequest) int {
	n := 1 + 5*binary.MaxVarintLen64 + len(r.DB)
	for _, op := range r.Ops {
		n += 1 + 4*binary.MaxVarintLen64 + len(op.ID) + len(op.Collection) + len(wireIfMatch(op)) + len(op.Body)
	}
	return n
}

// minOpBytes is the least an encoded op takes (its kind and four empty
// lengths); it bounds how many ops a count may claim.
const minOpBytes = 5

// decodeWriteRequest reads a request appendWriteRequest laid out. The ops'
// bodies share data's memory.
func decodeWriteRequest(data []byte) (writeRequest, error) {
	var r writeRequest
	if len(data) == 0 || data[0] != writeRequestVersion {
		return r, fmt.Errorf("binary write request: unknown version: %w", replication.ErrMalformed)
	}
	d := replication.NewDecoder(data[1:])
	r.DB = d.String("db")
	r.Shard = d.Int("shard")
	r.WaitFor = d.Int("wait-for")
	r.WaitTimeout = time.Duration(d.Varint("wait timeout"))
	r.RecordEtag = d.Uvarint("record etag")
	n := d.Uvarint("op count")
	if n > uint64(len(data)/minOpBytes) {
		return r, fmt.Errorf("binary write request: %d ops in %d bytes: %w", n, len(data), replication.ErrMalformed)
	}
	r.Ops = make([]storage.Op, 0, n)
	for range n {
		op := storage.Op{Kind: storage.OpKind(d.Byte("op kind"))}
		op.ID = d.String("op id")
		op.Collection = d.String("op collection")
		fromWireIfMatch(&op, d.String("op If-Match"))
		op.Body = d.Bytes("op body")
		r.Ops = append(r.Ops, op)
	}
	if err := d.Finish(); err != nil {
		return writeRequest{}, fmt.Errorf("binary write request: %w", err)
	}
	return r, nil
}
