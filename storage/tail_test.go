package storage

import (
	"context"
	"fmt"
	"testing"
)

// TestFeedTailFillsOnlyWhileRead checks when the feed is read from memory
// and when from Pebble: a tailer that keeps up reads memory; once nothing
// has read the feed for tailIdle, the committer stops copying and a read
// goes to Pebble, answering the same; the next read starts the tail again.
func TestFeedTailFillsOnlyWhileRead(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	write := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := s.Write(ctx, []Op{put(fmt.Sprintf("d/%d", i), `{"x":1}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(after uint64, want int, memory, disk uint64) {
		t.Helper()
		docs, err := s.Changes(after, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(docs) != want {
			t.Fatalf("changes after %d: %d items, want %d", after, len(docs), want)
		}
		for i, d := range docs {
			if d.Etag != after+uint64(i)+1 {
				t.Fatalf("changes after %d: item %d has etag %d", after, i, d.Etag)
			}
		}
		if got := s.Stats().Feed; got.FromMemory != memory || got.FromDisk != disk {
			t.Fatalf("changes after %d: feed reads %+v, want %d from memory and %d from disk", after, got, memory, disk)
		}
	}
	read(0, 0, 1, 0) // a new replica's tail is complete: it holds nothing
	write(0, 5)
	read(0, 5, 2, 0)
	read(3, 2, 3, 0)
	s.tail.lastRead.Store(0) // nothing read the feed for tailIdle
	write(5, 7)
	read(5, 2, 3, 1) // the tail was dropped: Pebble answers
	read(0, 7, 3, 2)
	write(7, 9) // read a moment ago: the tail fills again
	read(7, 2, 4, 2)
	read(6, 3, 4, 3) // behind where it started again
}
