package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestCloseWaitsForAReadInFlight: Close does not close Pebble under a walk
// that is still reading, and reads after it get ErrClosed (Pebble panics on
// a read of a closed DB). A read nested in the walk's callback, once Close
// has begun, is refused rather than deadlocking.
func TestCloseWaitsForAReadInFlight(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), NodeTag: "A"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(context.Background(), []Op{put("a", `{}`), put("b", `{}`)}); err != nil {
		t.Fatal(err)
	}
	inWalk, release := make(chan struct{}), make(chan struct{})
	var nested error
	walked := make(chan error, 1)
	go func() {
		first := true
		walked <- s.Scan(func(*Document) bool {
			if first {
				first = false
				close(inWalk)
				<-release
				_, nested = s.Get("a") // Close is waiting by now
			}
			return true
		})
	}()
	<-inWalk
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a walk was reading", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-walked; err != nil {
		t.Fatalf("the walk in flight: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(nested, ErrClosed) {
		t.Fatalf("a read nested in the walk once Close began: %v", nested)
	}
	if _, err := s.Get("a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := s.Scan(func(*Document) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Scan after Close: %v", err)
	}
	if _, err := s.Changes(0, 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("Changes after Close: %v", err)
	}
	_ = s.Stats() // no panic
}

// TestReadsRacingCloseNeverPanic: every kind of read, from many goroutines,
// while the store closes, either works or gets ErrClosed.
func TestReadsRacingCloseNeverPanic(t *testing.T) {
	for round := 0; round < 5; round++ {
		s, err := Open(Options{Dir: t.TempDir(), NodeTag: "A", DocCache: NewDocCache(1 << 20)})
		if err != nil {
			t.Fatal(err)
		}
		ops := make([]Op, 300)
		for i := range ops {
			ops[i] = put(fmt.Sprintf("d%d", i), `{"v":1}`)
		}
		if _, err := s.Write(context.Background(), ops); err != nil {
			t.Fatal(err)
		}
		reads := []func() error{
			func() error { _, err := s.Get("d7"); return err },
			func() error { return s.Scan(func(*Document) bool { return true }) },
			func() error { _, err := s.Changes(0, 100); return err },
			func() error { return s.RangeStats(0, 1<<20-1, func(BucketStats) error { return nil }) },
			func() error { _, err := s.BucketStats(5); return err },
			func() error { _, err := s.Conflicts(10); return err },
			func() error { s.ReplicationProgress("x"); _ = s.Stats(); return nil },
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, read := range reads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 200; i++ {
					if err := read(); err != nil && !errors.Is(err, ErrClosed) {
						t.Error(err)
						return
					}
				}
			}()
		}
		close(start)
		time.Sleep(time.Duration(round) * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}

// TestWritesRacingCloseAreAppliedExactlyWhenAcknowledged: writes racing
// Close either succeed and are there after reopening, or get ErrClosed and
// are not: the node sends a write refused with ErrClosed to another
// replica, so one that was applied must never be reported so.
func TestWritesRacingCloseAreAppliedExactlyWhenAcknowledged(t *testing.T) {
	for round := 0; round < 5; round++ {
		dir := t.TempDir()
		s, err := Open(Options{Dir: dir, NodeTag: "A"})
		if err != nil {
			t.Fatal(err)
		}
		const writers = 16
		var mu sync.Mutex
		outcome := map[string]bool{} // id -> acknowledged
		var wg sync.WaitGroup
		started := make(chan struct{}, writers)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					id := fmt.Sprintf("w%d/%d", w, i)
					_, err := s.Write(context.Background(), []Op{put(id, `{}`)})
					if err != nil && !errors.Is(err, ErrClosed) {
						t.Error(err)
						return
					}
					mu.Lock()
					outcome[id] = err == nil
					mu.Unlock()
					if i == 0 {
						started <- struct{}{}
					}
					if err != nil {
						return
					}
				}
			}()
		}
		for w := 0; w < writers; w++ {
			<-started
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		s, err = Open(Options{Dir: dir, NodeTag: "A"})
		if err != nil {
			t.Fatal(err)
		}
		for id, acked := range outcome {
			_, err := s.Get(id)
			if acked && err != nil {
				t.Fatalf("round %d: acknowledged %s is missing: %v", round, id, err)
			}
			if !acked && !errors.Is(err, ErrNotFound) {
				t.Fatalf("round %d: %s was refused with ErrClosed but is there (%v)", round, id, err)
			}
		}
		s.Close()
	}
}

// TestAnAnsweredWriteIsNeverReportedClosed: when the committer has
// answered a write and stopped, the writer gets the answer, never
// ErrClosed, whichever of the two it notices first.
func TestAnAnsweredWriteIsNeverReportedClosed(t *testing.T) {
	done := make(chan struct{})
	close(done)
	s := &Store{done: done}
	for i := 0; i < 1000; i++ {
		req := &writeReq{resp: make(chan writeResp, 1)}
		req.resp <- writeResp{results: []Result{{ID: "a"}}}
		res, err := s.answer(req)
		if err != nil || len(res) != 1 {
			t.Fatalf("try %d: an answered write got %v, %v", i, res, err)
		}
	}
	if _, err := s.answer(&writeReq{resp: make(chan writeResp, 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("an unanswered write of a stopped store: %v", err)
	}
}
