package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSharedCompactionsKeepLevelsInShape loads several replicas that share
// one Compactions through small memtables, so each flushes many times and
// needs compactions granted, concurrently. Every replica's level 0 must
// come back under Pebble's compaction threshold, and once the load ends
// and the compactions finish, no replica is left waiting: the scheduler's
// goroutine has nothing to wake up for. The replicas then close while the
// scheduler runs, and it stops.
func TestSharedCompactionsKeepLevelsInShape(t *testing.T) {
	c := NewCompactions()
	const replicas = 4
	stores := make([]*Store, replicas)
	for i := range stores {
		s, err := Open(Options{Dir: t.TempDir(), NodeTag: "A", MemTableSize: 2 << 20, Compactions: c})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	body := []byte(`{"v":"` + strings.Repeat("x", 300) + `"}`)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for batch := range 60 {
				ops := make([]Op, 0, 500)
				for range 500 {
					ops = append(ops, Op{Kind: OpPut, ID: fmt.Sprintf("k/%016x", rng.Uint64()), Body: body})
				}
				if _, err := s.Write(context.Background(), ops); err != nil {
					t.Errorf("replica %d batch %d: %v", i, batch, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for {
		settled := true
		for _, s := range stores {
			m := s.db.Metrics()
			if m.Levels[0].TablesCount >= l0CompactionThreshold || m.Compact.NumInProgress > 0 {
				settled = false
			}
		}
		c.mu.Lock()
		waiting := len(c.waiting)
		c.mu.Unlock()
		if settled && waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			for i, s := range stores {
				m := s.db.Metrics()
				t.Logf("replica %d: L0 %d files, %d compactions running, %d done", i, m.Levels[0].TablesCount, m.Compact.NumInProgress, m.Compact.Count)
			}
			t.Fatalf("levels not back in shape after 60 s (%d replicas waiting for a grant)", waiting)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, s := range stores {
		if m := s.db.Metrics(); m.Compact.Count == 0 {
			t.Errorf("replica %d ran no compaction", i)
		}
		if got := s.Stats().DocumentsCount; got != 60*500 {
			t.Errorf("replica %d holds %d documents, want %d", i, got, 60*500)
		}
	}
	for _, s := range stores {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
}

// TestCompactionsCloseDuringLoad closes replicas while they write and
// compact: Unregister must not wait forever on a grant in progress.
func TestCompactionsCloseDuringLoad(t *testing.T) {
	c := NewCompactions()
	defer c.Close()
	body := []byte(`{"v":"` + strings.Repeat("y", 200) + `"}`)
	for round := range 3 {
		s, err := Open(Options{Dir: t.TempDir(), NodeTag: "A", MemTableSize: 2 << 20, Compactions: c})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ctx.Err() == nil; i++ {
				ops := make([]Op, 0, 400)
				for j := range 400 {
					ops = append(ops, Op{Kind: OpPut, ID: fmt.Sprintf("r%d/%d/%d", round, i, j*7919%400), Body: body})
				}
				if _, err := s.Write(ctx, ops); err != nil {
					return
				}
			}
		}()
		waitUntil(t, 30*time.Second, "a compaction to run", func() bool { return s.db.Metrics().Compact.Count > 0 })
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Fatal("closing a compacting replica did not finish in 30 s")
		}
		cancel()
		<-done
	}
}

// waitUntil polls cond until it holds or timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
