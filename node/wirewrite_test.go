package node

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/shardnode/shardnode/replication"
	"github.com/shardnode/shardnode/storage"
)

func sampleWriteRequest() writeRequest {
	return writeRequest{DB: "orders", Shard: 2, WaitFor: 1, WaitTimeout: 1500 * time.Millisecond, RecordEtag: 77, Ops: []storage.Op{
		{Kind: storage.OpPut, ID: "orders/1", Collection: "Orders", Body: []byte(`{"a":1}`), IfMatch: "A:1-x"},
		{Kind: storage.OpDelete, ID: "orders/2"},
		{Kind: storage.OpPut, ID: "ünïcode$x", Body: []byte(`{}`)},
		{Kind: storage.OpPut, ID: "orders/3", Body: []byte(`{}`), IfNew: true},
	}}
}

// FuzzWriteRequest: a binary write request decodes to what was encoded, and
// any other input is an error, never a panic or an over-long read.
func FuzzWriteRequest(f *testing.F) {
	r := sampleWriteRequest()
	enc := appendWriteRequest(nil, r)
	f.Add(enc)
	f.Add(enc[:len(enc)-3])
	f.Add([]byte{writeRequestVersion})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeWriteRequest(data)
		if err != nil {
			return
		}
		again := appendWriteRequest(nil, got)
		back, err := decodeWriteRequest(again)
		if err != nil || !reflect.DeepEqual(back, got) {
			t.Fatalf("re-encoding %+v gave %+v, %v", got, back, err)
		}
	})
}

func TestWriteRequestRoundTrip(t *testing.T) {
	r := sampleWriteRequest()
	enc := appendWriteRequest(nil, r)
	if len(enc) > writeRequestLen(r) {
		t.Fatalf("encoded %d bytes, bound %d", len(enc), writeRequestLen(r))
	}
	got, err := decodeWriteRequest(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("decoded %+v, want %+v", got, r)
	}
	for i := range enc {
		if _, err := decodeWriteRequest(enc[:i]); err == nil {
			t.Fatalf("a request cut at %d of %d bytes decoded", i, len(enc))
		}
	}
}

// TestUnknownOpIsRecognised: the refusal of an op a node does not serve,
// as every version words it, is what makes a write fall back to JSON.
func TestUnknownOpIsRecognised(t *testing.T) {
	n := testNode(t, t.TempDir())
	_, err := n.callRaw(context.Background(), n.cfg.Node.Tag, "shard.no-such-op", nil)
	if !isUnknownOp(err) {
		t.Fatalf("unknown op answered %v", err)
	}
	if isUnknownOp(badRequest("decode shard write: %v", replication.ErrMalformed)) {
		t.Fatal("a malformed request counted as an unknown op")
	}
}
