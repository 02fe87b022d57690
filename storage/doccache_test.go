package storage

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
)

// TestDocCacheNeverServesAnAcknowledgedOverwrite: readers racing writers
// through a small cache (evicting all the time) never read a version older
// than the newest one acknowledged before their read began.
func TestDocCacheNeverServesAnAcknowledgedOverwrite(t *testing.T) {
	cache := NewDocCache(64 << 10)
	s, err := Open(Options{Dir: t.TempDir(), NodeTag: "A", DocCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const keys = 40
	var acked [keys]atomic.Int64
	for k := 0; k < keys; k++ {
		if _, err := s.Write(ctx, []Op{put(fmt.Sprintf("k%d", k), `{"v":0}`)}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var writes atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := int64(1); ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (w*7 + int(v)) % keys
				if k%4 != w {
					continue // each key has one writer, so its versions only grow
				}
				if _, err := s.Write(ctx, []Op{put(fmt.Sprintf("k%d", k), fmt.Sprintf(`{"v":%d}`, v))}); err != nil {
					t.Error(err)
					return
				}
				acked[k].Store(v)
				writes.Add(1)
			}
		}()
	}
	var reads atomic.Int64
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (r*13 + i) % keys
				floor := acked[k].Load()
				d, err := s.Get(fmt.Sprintf("k%d", k))
				if err != nil {
					t.Error(err)
					return
				}
				v, _ := strconv.ParseInt(string(d.Body[5:len(d.Body)-1]), 10, 64)
				reads.Add(1)
				if v < floor {
					t.Errorf("k%d: read version %d after %d was acknowledged", k, v, floor)
					return
				}
			}
		}()
	}
	// Run until readers have raced many acknowledged overwrites.
	deadline := time.Now().Add(60 * time.Second)
	for (reads.Load() < 20000 || writes.Load() < 1000) && !t.Failed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if reads.Load() < 20000 || writes.Load() < 1000 {
		t.Fatalf("only %d reads and %d writes before the deadline", reads.Load(), writes.Load())
	}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if cache.size > cache.max || cache.size < 0 {
		t.Fatalf("cache holds %d bytes, budget %d", cache.size, cache.max)
	}
}

// TestDocCacheHitsAndForgetsClosedStores: a second read is served from the
// cache; closing the store drops its entries.
func TestDocCacheHitsAndForgetsClosedStores(t *testing.T) {
	cache := NewDocCache(1 << 20)
	s, err := Open(Options{Dir: t.TempDir(), NodeTag: "A", DocCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(context.Background(), []Op{put("a", `{"x":1}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := cache.get(s, string(itemKey(bucket.ForID("a"), "a"))); !ok {
		t.Fatal("a read document is not cached")
	}
	d, _ := s.Get("a")
	d.ChangeVector = "changed" // a caller's copy is its own (bodies are never written)
	again, _ := s.Get("a")
	if again.ChangeVector == "changed" {
		t.Fatal("a caller's change to its document reached the cache")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if len(cache.m) != 0 || cache.size != 0 {
		t.Fatalf("closed store left %d entries, %d bytes", len(cache.m), cache.size)
	}
}

// TestDocCacheRefusesAReadThatRacedACommit: what a read found before a
// commit invalidated its key is not cached after it.
func TestDocCacheRefusesAReadThatRacedACommit(t *testing.T) {
	c := NewDocCache(1 << 20)
	s := &Store{}
	old := &Document{ID: "k", ChangeVector: "A:1-x", Body: []byte(`{}`)}
	gen := c.generation(s)         // the read begins
	c.invalidate(s, []string{"k"}) // a commit of k lands
	c.put(s, "k", old, gen)        // the read's old result arrives
	if _, ok := c.get(s, "k"); ok {
		t.Fatal("a result read before a commit was cached after it")
	}
	c.put(s, "k", old, c.generation(s))
	if _, ok := c.get(s, "k"); !ok {
		t.Fatal("a read after the commit was not cached")
	}
	if NewDocCache(0) != nil {
		t.Fatal("a zero budget must disable the cache")
	}
}
