package storage

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
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
	if n := cache.size.Load(); n > cache.max || n < 0 {
		t.Fatalf("cache holds %d bytes, budget %d", n, cache.max)
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
	if _, ok := s.docs.get(string(itemKey(bucket.ForID("a"), "a"))); !ok {
		t.Fatal("a read document is not cached")
	}
	d, _ := s.Get("a")
	d.ChangeVector = "changed" // a caller's copy is its own (bodies are never written)
	again, _ := s.Get("a")
	if again.ChangeVector == "changed" {
		t.Fatal("a caller's change to its document reached the cache")
	}
	// The store counts where its reads were answered: the written
	// document four times from the cache, an absent id from Pebble each
	// time (absence is not cached).
	for range 2 {
		if _, err := s.Get("nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("absent id: %v", err)
		}
	}
	if got := s.Stats().DocCache; got != (DocCacheStats{Hits: 4, Misses: 2}) {
		t.Fatalf("cache counts %+v, want 4 hits and 2 misses", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if len(cache.parts) != 0 || cache.size.Load() != 0 {
		t.Fatalf("closed store left %d parts, %d bytes", len(cache.parts), cache.size.Load())
	}
}

// TestDocCacheRefusesAReadThatRacedACommit: what a read found before a
// commit of its key is not cached after it.
func TestDocCacheRefusesAReadThatRacedACommit(t *testing.T) {
	c := NewDocCache(1 << 20)
	p := c.open()
	old := &Document{ID: "k", ChangeVector: "A:1-x", Body: []byte(`{}`)}
	gen := p.generation()                // the read begins
	p.written([]cachedWrite{{key: "k"}}) // a commit of k lands
	p.put("k", old, gen)                 // the read's old result arrives
	if _, ok := p.get("k"); ok {
		t.Fatal("a result read before a commit was cached after it")
	}
	p.put("k", old, p.generation())
	if _, ok := p.get("k"); !ok {
		t.Fatal("a read after the commit was not cached")
	}
	p.close()
	p.put("k", old, p.generation()) // a read that finished after the close
	if _, ok := p.get("k"); ok || c.size.Load() != 0 {
		t.Fatalf("a closed part cached a read (%d bytes held)", c.size.Load())
	}
	if NewDocCache(0) != nil {
		t.Fatal("a zero budget must disable the cache")
	}
}

// cachedStores opens n stores sharing cache, each holding documents d0 to
// d<docs-1> with body; they close at the test's end.
func cachedStores(t *testing.T, cache *DocCache, n, docs int, body string) []*Store {
	stores := make([]*Store, n)
	for i := range stores {
		s, err := Open(Options{Dir: t.TempDir(), NodeTag: "A", DocCache: cache})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
		ops := make([]Op, docs)
		for k := range ops {
			ops[k] = put(fmt.Sprintf("d%d", k), body)
		}
		if _, err := s.Write(context.Background(), ops); err != nil {
			t.Fatal(err)
		}
	}
	return stores
}

// TestDocCacheGivesAColdStoresMemoryToTheOneBeingRead: the replicas share
// one budget, and the part of a replica no longer read is the one evicted
// when another one's reads need the room.
func TestDocCacheGivesAColdStoresMemoryToTheOneBeingRead(t *testing.T) {
	const docs = 100
	body := `{"f":"` + strings.Repeat("x", 1000) + `"}`
	cache := NewDocCache(docs * 1300) // about 100 such documents
	stores := cachedStores(t, cache, 2, docs, body)
	read := func(s *Store) {
		for k := 0; k < docs; k++ {
			if _, err := s.Get(fmt.Sprintf("d%d", k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	read(stores[0])
	cold := stores[0].docs.size.Load()
	// Eviction picks at random: read the second store until the first,
	// no longer read, holds less than a tenth of what it held.
	for pass := 0; stores[0].docs.size.Load() > cold/10; pass++ {
		if pass == 200 {
			t.Fatalf("after %d passes over the read store the cold one still holds %d of %d bytes (the read one %d)",
				pass, stores[0].docs.size.Load(), cold, stores[1].docs.size.Load())
		}
		read(stores[1])
		if total, parts := cache.size.Load(), stores[0].docs.size.Load()+stores[1].docs.size.Load(); total > cache.max || total != parts {
			t.Fatalf("cache holds %d bytes (parts %d), budget %d", total, parts, cache.max)
		}
	}
}

// TestDocCacheAccountsUnderConcurrentReadsAndACloses: replicas read in
// parallel through a cache too small for them (so puts evict from each
// other's parts) while one of them closes; afterwards the cache's size is
// exactly what the open parts hold, and within budget.
func TestDocCacheAccountsUnderConcurrentReadsAndACloses(t *testing.T) {
	const docs = 200
	body := `{"f":"` + strings.Repeat("y", 500) + `"}`
	cache := NewDocCache(docs * 700)
	stores := cachedStores(t, cache, 3, docs, body)
	var wg sync.WaitGroup
	for i, s := range stores {
		for r := 0; r < 2; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 3000; k++ {
					if i == 0 && r == 0 && k == 1500 {
						_ = s.Close()
					}
					_, err := s.Get(fmt.Sprintf("d%d", (k*7+r)%docs))
					if err != nil && !(i == 0 && errors.Is(err, ErrClosed)) {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	held := stores[1].docs.size.Load() + stores[2].docs.size.Load()
	if n := cache.size.Load(); n != held || n > cache.max {
		t.Fatalf("cache holds %d bytes, the open parts %d, budget %d", n, held, cache.max)
	}
}

// TestDocCacheHoldsWhatClientsWrote: a client's write puts the committed
// version in the cache exactly as a read from Pebble would find it (a
// delete its tombstone); replicated versions and bulk loads do not enter
// it.
func TestDocCacheHoldsWhatClientsWrote(t *testing.T) {
	ctx := context.Background()
	s, err := Open(Options{Dir: t.TempDir(), NodeTag: "A", DocCache: NewDocCache(1 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body := []byte(`{"x":1}`)
	if _, err := s.Write(ctx, []Op{{Kind: OpPut, ID: "a", Collection: "Users", Body: body}, put("b", `{"big":"`+strings.Repeat("y", 600)+`"}`), put("c", `{}`)}); err != nil {
		t.Fatal(err)
	}
	body[2] = 'z' // the writer's buffer is its own again once the write returns
	if _, err := s.Write(ctx, []Op{{Kind: OpDelete, ID: "c"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		b := bucket.ForID(id)
		key := itemKey(b, id)
		cached, ok := s.docs.get(string(key))
		if !ok {
			t.Fatalf("%s: a client's write is not cached", id)
		}
		stored, err := s.get(key, b) // from Pebble, around the cache
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cached, stored) {
			t.Fatalf("%s: cached %+v, Pebble holds %+v", id, cached, stored)
		}
	}
	other, err := Open(Options{Dir: t.TempDir(), NodeTag: "B", DocCache: NewDocCache(1 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ship(t, s, other)
	if n := len(other.docs.m); n != 0 {
		t.Fatalf("replicated versions entered the cache: %d entries", n)
	}
	load := make([]Op, writeThroughMaxOps+1)
	for i := range load {
		load[i] = put(fmt.Sprintf("load%d", i), `{}`)
	}
	if _, err := s.Write(ctx, load); err != nil {
		t.Fatal(err)
	}
	if n := len(s.docs.m); n != 3 {
		t.Fatalf("a bulk load entered the cache: %d entries, want the 3 written before", n)
	}
}

// TestDocCacheKeepsReadDocumentsThroughAWriteLoad: documents being read
// stay cached while a write load many times the cache's size streams
// through it (second chance), where picking victims blindly evicts them.
func TestDocCacheKeepsReadDocumentsThroughAWriteLoad(t *testing.T) {
	ctx := context.Background()
	const hot, perRound, rounds = 30, 10, 60
	body := `{"f":"` + strings.Repeat("x", 1000) + `"}`
	cache := NewDocCache(100 * 1300) // about 100 such documents
	s, err := Open(Options{Dir: t.TempDir(), NodeTag: "A", DocCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keyOf := func(id string) string { return string(itemKey(bucket.ForID(id), id)) }
	for i := range hot {
		if _, err := s.Write(ctx, []Op{put(fmt.Sprintf("hot%d", i), body)}); err != nil {
			t.Fatal(err)
		}
	}
	misses := 0
	for r := range rounds {
		ops := make([]Op, perRound)
		for k := range ops {
			ops[k] = put(fmt.Sprintf("bulk%d-%d", r, k), body)
		}
		if _, err := s.Write(ctx, ops); err != nil {
			t.Fatal(err)
		}
		for i := range hot {
			id := fmt.Sprintf("hot%d", i)
			if _, ok := s.docs.get(keyOf(id)); !ok {
				misses++
				if _, err := s.Get(id); err != nil { // read from Pebble, cached again
					t.Fatal(err)
				}
			}
		}
	}
	// 600 documents written through a cache of 100, the hot ones read
	// between every two rounds of 10 writes: with second chance they
	// missed 5% of the time at most (200 runs), evicted blindly 16-22%.
	if max := hot * rounds / 10; misses > max {
		t.Fatalf("%d misses of %d reads of documents read every round (at most %d expected)", misses, hot*rounds, max)
	}
	if held, _ := cache.Usage(); held > 100*1300 {
		t.Fatalf("cache holds %d bytes over its budget", held)
	}
}

// TestDocCacheWritesDoNotPushOutWhatIsRead: documents written and never
// read, in the same store and in another, are evicted before any document
// being read, however many are written; the unread queue stays in
// proportion to what it names.
func TestDocCacheWritesDoNotPushOutWhatIsRead(t *testing.T) {
	ctx := context.Background()
	cache := NewDocCache(1 << 20)
	open := func(tag string) *Store {
		s, err := Open(Options{Dir: t.TempDir(), NodeTag: tag, DocCache: cache})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	read, other := open("A"), open("B")
	body := `{"f":"` + strings.Repeat("x", 1000) + `"}`
	const kept = 300 // ~350 KiB with their keys and metadata: a third of the budget
	for i := range kept {
		id := fmt.Sprintf("read/%d", i)
		if _, err := read.Write(ctx, []Op{put(id, body)}); err != nil {
			t.Fatal(err)
		}
		if _, err := read.Get(id); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3000 { // three times the budget, into both stores
		s := other
		if i%2 == 0 {
			s = read
		}
		if _, err := s.Write(ctx, []Op{put(fmt.Sprintf("written/%d", i), body)}); err != nil {
			t.Fatal(err)
		}
	}
	before := read.Stats().DocCache
	for i := range kept {
		if _, err := read.Get(fmt.Sprintf("read/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := read.Stats().DocCache; got.Hits-before.Hits != kept {
		t.Fatalf("%d of the %d documents being read were still cached after the writes", got.Hits-before.Hits, kept)
	}
	if n := cache.size.Load(); n > cache.max || n != read.docs.size.Load()+other.docs.size.Load() {
		t.Fatalf("cache holds %d bytes, its parts %d and %d, budget %d", n, read.docs.size.Load(), other.docs.size.Load(), cache.max)
	}
	for _, s := range []*Store{read, other} {
		p := s.docs
		p.mu.Lock()
		unread := 0
		for _, e := range p.m {
			if e.unread {
				unread++
			}
		}
		queued := len(p.unread) - p.unreadHead
		p.mu.Unlock()
		if int64(unread) != p.nUnread.Load() || queued > 2*unread+1024 {
			t.Fatalf("%d unread entries, counted %d, %d keys queued", unread, p.nUnread.Load(), queued)
		}
	}
}
