package resharding

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/shardnode/shardnode/replication"
	"github.com/shardnode/shardnode/storage"
)

func genBatch(t *rapid.T) *Batch {
	items := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) replication.Item {
		var body []byte
		if rapid.Bool().Draw(t, "hasBody") {
			body = rapid.SliceOfN(rapid.Byte(), 1, 64).Draw(t, "body")
		}
		return replication.Item{
			ID:           rapid.String().Draw(t, "id"),
			Collection:   rapid.String().Draw(t, "collection"),
			ChangeVector: rapid.String().Draw(t, "cv"),
			LastModified: time.Unix(rapid.Int64Range(-1<<40, 1<<40).Draw(t, "sec"), rapid.Int64Range(0, 999_999_999).Draw(t, "nsec")),
			Flags:        storage.Flags(rapid.Byte().Draw(t, "flags") & 0x7f), // the top bit marks a replication stub
			Body:         body,
		}
	}), 0, 20).Draw(t, "items")
	return &Batch{
		DB:             rapid.String().Draw(t, "db"),
		Shard:          rapid.Int().Draw(t, "shard"),
		Bucket:         rapid.Uint32().Draw(t, "bucket"),
		MigrationIndex: rapid.Uint64().Draw(t, "migrationIndex"),
		DatabaseID:     rapid.String().Draw(t, "databaseId"),
		Items:          items,
	}
}

func sameBatch(a, b *Batch) bool {
	if a.DB != b.DB || a.Shard != b.Shard || a.Bucket != b.Bucket || a.MigrationIndex != b.MigrationIndex || a.DatabaseID != b.DatabaseID || len(a.Items) != len(b.Items) {
		return false
	}
	for i := range a.Items {
		x, y := a.Items[i], b.Items[i]
		if x.ID != y.ID || x.Collection != y.Collection || x.ChangeVector != y.ChangeVector || x.Flags != y.Flags ||
			!x.LastModified.Equal(y.LastModified) || !bytes.Equal(x.Body, y.Body) {
			return false
		}
	}
	return true
}

func TestBatchBinaryRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genBatch(t)
		data, err := in.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeBatch(data)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !sameBatch(in, out) {
			t.Fatalf("got %+v, want %+v", out, in)
		}
		cut := rapid.IntRange(0, len(data)-1).Draw(t, "cut")
		if _, err := DecodeBatch(data[:cut]); !errors.Is(err, replication.ErrMalformed) {
			t.Fatalf("prefix of %d of %d bytes: err %v, want ErrMalformed", cut, len(data), err)
		}
	})
}

// A JSON batch (an older sender's) decodes to the same batch.
func TestDecodeBatchAcceptsJSON(t *testing.T) {
	in := &Batch{DB: "shop", Shard: 1, Bucket: 77, MigrationIndex: 12, DatabaseID: "dbid", Items: []replication.Item{
		{ID: "a", Collection: "C", ChangeVector: "A:1-x", LastModified: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Body: json.RawMessage(`{"x":[1,2]}`)},
	}}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	if !sameBatch(in, out) {
		t.Fatalf("got %+v, want %+v", out, in)
	}
}

// FuzzDecodeBatch: malformed input is an error, never a panic.
func FuzzDecodeBatch(f *testing.F) {
	good, _ := (&Batch{DB: "d", Shard: 1, Bucket: 5, MigrationIndex: 9, DatabaseID: "x", Items: []replication.Item{{ID: "i", Body: []byte("{}")}}}).MarshalBinary()
	f.Add(good)
	f.Add([]byte(`{"Db":"d","Bucket":5}`))
	f.Add([]byte{replication.FormatBinaryV1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x1f})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBatch(data)
		if err != nil {
			return
		}
		again, err := b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b2, err := DecodeBatch(again)
		if err != nil || !sameBatch(b, b2) {
			t.Fatalf("re-encoded batch: %+v, %v; want %+v", b2, err, b)
		}
	})
}
