package replication

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/shardnode/shardnode/storage"
)

// genItems draws items with any strings, times (in any zone) and bodies,
// empty or nil included.
func genItems(t *rapid.T) []Item {
	return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Item {
		sec := rapid.Int64Range(-62135596800, 253402300799).Draw(t, "sec") // years 1..9999
		nsec := rapid.Int64Range(0, 999_999_999).Draw(t, "nsec")
		zone := time.FixedZone("z", rapid.IntRange(-12*3600, 14*3600).Draw(t, "offset"))
		var body []byte
		stub := rapid.Bool().Draw(t, "stub")
		if !stub && rapid.Bool().Draw(t, "hasBody") {
			body = rapid.SliceOf(rapid.Byte()).Draw(t, "body")
		}
		return Item{
			ID:           rapid.String().Draw(t, "id"),
			Collection:   rapid.String().Draw(t, "collection"),
			ChangeVector: rapid.String().Draw(t, "cv"),
			LastModified: time.Unix(sec, nsec).In(zone),
			Flags:        storage.Flags(rapid.Byte().Draw(t, "flags") &^ itemStub),
			Body:         body,
			Stub:         stub,
		}
	}), 0, 20).Draw(t, "items")
}

// ItemsEqual reports whether two item lists carry the same data: the same
// instants, and an empty body the same as none (as in JSON, where an
// empty body is omitted).
func itemsEqual(a, b []Item) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.ID != y.ID || x.Collection != y.Collection || x.ChangeVector != y.ChangeVector || x.Flags != y.Flags || x.Stub != y.Stub ||
			!x.LastModified.Equal(y.LastModified) || !bytes.Equal(x.Body, y.Body) || (len(y.Body) == 0) != (y.Body == nil) {
			return false
		}
	}
	return true
}

func TestBatchBinaryRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := &Batch{
			DB:        rapid.String().Draw(t, "db"),
			Shard:     rapid.Int().Draw(t, "shard"),
			Source:    rapid.String().Draw(t, "source"),
			SourceTag: rapid.String().Draw(t, "sourceTag"),
			LastEtag:  rapid.Uint64().Draw(t, "lastEtag"),
			After:     rapid.Uint64().Draw(t, "after"),
			Items:     genItems(t),
		}
		data, err := in.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 64+len(in.DB)+len(in.Source)+len(in.SourceTag)+ItemsSize(in.Items) {
			t.Fatalf("encoded %d bytes, more than ItemsSize allows", len(data))
		}
		out, err := DecodeBatch(data)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if out.DB != in.DB || out.Shard != in.Shard || out.Source != in.Source || out.SourceTag != in.SourceTag || out.LastEtag != in.LastEtag || out.After != in.After {
			t.Fatalf("header: got %+v, want %+v", out, in)
		}
		if !itemsEqual(in.Items, out.Items) {
			t.Fatalf("items: got %+v, want %+v", out.Items, in.Items)
		}
		// Every strict prefix is incomplete: an error, never a panic or a
		// shorter batch.
		cut := rapid.IntRange(0, len(data)-1).Draw(t, "cut")
		if _, err := DecodeBatch(data[:cut]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix of %d of %d bytes: err %v, want ErrMalformed", cut, len(data), err)
		}
	})
}

// An older sender's JSON batch still decodes.
func TestDecodeBatchAcceptsJSON(t *testing.T) {
	in := &Batch{DB: "shop", Shard: 2, Source: "src", SourceTag: "A", LastEtag: 9, Items: []Item{
		{ID: "users/1", Collection: "Users", ChangeVector: "A:1-x", LastModified: time.Date(2026, 11, 30, 1, 2, 3, 4, time.UTC), Body: json.RawMessage(`{"a":1}`)},
		{ID: "users/2", ChangeVector: "A:2-x", LastModified: time.Date(2026, 11, 30, 1, 2, 3, 5, time.UTC), Flags: storage.FlagDeleted},
	}}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	if out.DB != in.DB || out.Shard != in.Shard || out.Source != in.Source || out.LastEtag != in.LastEtag || !itemsEqual(in.Items, out.Items) {
		t.Fatalf("got %+v, want %+v", out, in)
	}
}

func TestDecodeBatchRejectsMalformed(t *testing.T) {
	good, err := (&Batch{DB: "d", Items: []Item{{ID: "x", Body: []byte("{}")}}}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"empty":          nil,
		"unknown format": {0x02, 0, 0},
		"trailing bytes": append(append([]byte(nil), good...), 0),
		"huge count":     {FormatBinaryV1, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge length":    {FormatBinaryV1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		"stub in v2":     stubBatch(t, FormatBinaryV2, nil),
		"stub with body": stubBatch(t, FormatBinaryV3, []byte("{}")),
	} {
		if _, err := DecodeBatch(data); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

// stubBatch is a batch of one stub item in the given format, with body.
func stubBatch(t *testing.T, format byte, body []byte) []byte {
	t.Helper()
	e := Encoder{Buf: []byte{format}}
	e.String("db")
	e.Varint(0)
	e.String("src")
	e.String("A")
	e.Uvarint(9)
	e.Uvarint(8)
	e.Uvarint(1)
	e.String("k1")
	e.String("")
	e.String("A:1-x")
	e.Varint(5)
	e.Uvarint(6)
	e.Buf = append(e.Buf, itemStub)
	e.Bytes(body)
	if _, err := DecodeBatch(stubBatch3(t)); err != nil {
		t.Fatalf("the same stub in format 3 without a body: %v", err)
	}
	return e.Buf
}

// stubBatch3 is stubBatch's well-formed twin: format 3, no body.
func stubBatch3(t *testing.T) []byte {
	t.Helper()
	b := &Batch{DB: "db", Source: "src", SourceTag: "A", LastEtag: 9, After: 8, Items: []Item{{ID: "k1", ChangeVector: "A:1-x", LastModified: time.Unix(5, 6), Stub: true}}}
	data, err := b.MarshalBinary()
	if err != nil || data[0] != FormatBinaryV3 {
		t.Fatalf("stub batch encodes as format %d, %v", data[0], err)
	}
	return data
}

// FuzzDecodeBatch: any input decodes or is an error, never a panic; what
// decodes encodes back to a batch that decodes the same.
func FuzzDecodeBatch(f *testing.F) {
	good, _ := (&Batch{DB: "d", Shard: 1, Source: "s", SourceTag: "A", LastEtag: 3, Items: []Item{
		{ID: "x", Collection: "C", ChangeVector: "A:1-x", LastModified: time.Unix(1, 2), Body: []byte(`{"a":1}`)}}}).MarshalBinary()
	f.Add(good)
	f.Add([]byte(`{"Db":"d","Items":[{"Id":"x","Body":{}}]}`))
	f.Add([]byte{FormatBinaryV1})
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
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if b2.DB != b.DB || b2.Shard != b.Shard || b2.LastEtag != b.LastEtag || !itemsEqual(b.Items, b2.Items) {
			t.Fatalf("re-encoded batch differs: %+v vs %+v", b2, b)
		}
	})
}

// TestDecodesVersion1Batches: a batch from a node that sends format 1 (no
// After) decodes, with After 0 (not checked).
func TestDecodesVersion1Batches(t *testing.T) {
	items := []Item{{ID: "k1", ChangeVector: "A:1-x", LastModified: time.Unix(5, 6).UTC(), Body: []byte(`{"a":1}`)}}
	e := Encoder{Buf: []byte{FormatBinaryV1}}
	e.String("db")
	e.Varint(2)
	e.String("src")
	e.String("A")
	e.Uvarint(9)
	e.Items(items)
	b, err := DecodeBatch(e.Buf)
	if err != nil {
		t.Fatal(err)
	}
	if b.DB != "db" || b.Shard != 2 || b.Source != "src" || b.LastEtag != 9 || b.After != 0 || len(b.Items) != 1 || string(b.Items[0].Body) != `{"a":1}` {
		t.Fatalf("decoded %+v", b)
	}
	b.After = 7
	enc, err := b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeBatch(enc)
	if err != nil || back.After != 7 || back.LastEtag != 9 {
		t.Fatalf("version 2 round trip: %+v %v", back, err)
	}
}
