package storage

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestItemEncodingLength: the length the committer reserves in a batch is
// exactly what the encoding writes, and the encoding decodes back.
func TestItemEncodingLength(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := &Document{
			Bucket:       rapid.Uint32Range(0, 1<<20-1).Draw(t, "bucket"),
			ID:           rapid.String().Draw(t, "id"),
			Collection:   rapid.String().Draw(t, "collection"),
			ChangeVector: rapid.String().Draw(t, "cv"),
			Etag:         rapid.Uint64().Draw(t, "etag"),
			LastModified: time.Unix(0, rapid.Int64().Draw(t, "ns")).UTC(),
			Flags:        Flags(rapid.IntRange(0, 255).Draw(t, "flags")),
			Body:         rapid.SliceOfN(rapid.Byte(), 0, 3000).Draw(t, "body"),
		}
		if d.Deleted() {
			d.Body = nil
		}
		enc := d.encode()
		if len(enc) != d.encodedLen() {
			t.Fatalf("encoding is %d bytes, encodedLen says %d", len(enc), d.encodedLen())
		}
		back, err := decodeItem(d.Bucket, enc)
		if err != nil {
			t.Fatal(err)
		}
		if back.ID != d.ID || back.Collection != d.Collection || back.ChangeVector != d.ChangeVector ||
			back.Etag != d.Etag || !back.LastModified.Equal(d.LastModified) || back.Flags != d.Flags || string(back.Body) != string(d.Body) {
			t.Fatalf("decoded %+v, want %+v", back, d)
		}
	})
}
