package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
)

// BenchmarkConcurrentDurableWrites measures single-document durable writes
// from 64 goroutines over 3 stores (one node's 3 shards), the storage part
// of the API's PUT. Compare with a raw Pebble synced Set per write (the
// bench command's baseline).
const benchWriters = 64

// benchStores opens n stores in temporary directories, closed at the
// benchmark's end.
// benchStores opens n stores sharing one 256 MiB block cache, as a node's
// replicas do: with each store's small private cache, reads of bucket
// statistics would go to the file system and the figures would not be a
// node's.
func benchStores(b *testing.B, n int) []*Store {
	cache := pebble.NewCache(256 << 20)
	b.Cleanup(cache.Unref)
	var stores []*Store
	for i := 0; i < n; i++ {
		s, err := Open(Options{Dir: b.TempDir(), NodeTag: "A", Cache: cache})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	return stores
}

// rawPebble opens the baselines' Pebble instance, closed at the
// benchmark's end: the replicas' options, with every value stored as a
// replica stores document bodies.
func rawPebble(b *testing.B, cache *pebble.Cache) *pebble.DB {
	o := PebbleOptions(cache, 0, nil)
	o.Experimental.SpanPolicyFunc = func([]byte) (pebble.SpanPolicy, []byte, error) { return pebble.SpanPolicy{}, nil, nil }
	db, err := pebble.Open(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func BenchmarkConcurrentDurableWrites(b *testing.B) {
	stores := benchStores(b, 3)
	runPuts(b, stores)
	var c, ops uint64
	var sync float64
	for _, s := range stores {
		st := s.Stats()
		c += st.Commits
		ops += st.CommittedOps
		sync += st.SyncMillis
	}
	b.ReportMetric(float64(ops)/float64(c), "ops/commit")
	b.ReportMetric(sync/float64(c), "sync-ms/commit")
}

// runPuts runs runWriters' writers over stores, each writing new 1 KiB
// documents, one per durable write.
func runPuts(b *testing.B, stores []*Store) {
	body := []byte(`{"f":"` + strings.Repeat("x", 1000) + `"}`)
	runWriters(b, func(w int) func(i int) error {
		s := stores[w%len(stores)]
		return func(i int) error {
			_, err := s.Write(context.Background(), []Op{{Kind: OpPut, ID: fmt.Sprintf("w%d/%d", w, i), Body: body}})
			return err
		}
	})
}

// runWriters runs benchWriters closed-loop writers, b.N writes in all: the
// write of writer w is write(w), called with 0, 1, 2 ... It reports writes
// per second and CPU µs per write (steadier than throughput on a shared
// machine).
func runWriters(b *testing.B, write func(w int) func(i int) error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), processCPU()
	per := b.N/benchWriters + 1
	for w := 0; w < benchWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one := write(w)
			for i := 0; i < per; i++ {
				if err := one(i); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	el, cpu := time.Since(start), processCPU()-cpu0
	b.ReportMetric(float64(n.Load())/el.Seconds(), "writes/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n.Load()), "cpu-us/write")
}

// processCPU is the process's user plus system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bulkGroup is how many documents one write of BenchmarkBulkWrites holds.
const bulkGroup = 1000

// BenchmarkBulkWrites measures the storage part of bulk_docs: 4 writers
// each writing groups of bulkGroup new 1 KiB documents into 3 stores,
// beside raw Pebble batches of the same keys and values with the same
// options (the bench command's baseline), and raw Pebble batches of the
// keys a replica writes for those documents (layout).
func BenchmarkBulkWrites(b *testing.B) {
	const writers = 4
	body := []byte(`{"f":"` + strings.Repeat("x", 1000) + `"}`)
	run := func(b *testing.B, write func(w, g int) error) {
		var wg sync.WaitGroup
		start, cpu0 := time.Now(), processCPU()
		groups := b.N/bulkGroup + 1
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for g := w; g < groups; g += writers {
					if err := write(w, g); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		el, cpu := time.Since(start), processCPU()-cpu0
		docs := float64(groups * bulkGroup)
		b.ReportMetric(docs/el.Seconds(), "docs/s")
		b.ReportMetric(float64(cpu.Microseconds())/docs, "cpu-us/doc")
	}
	b.Run("store", func(b *testing.B) {
		stores := benchStores(b, 3)
		run(b, func(w, g int) error {
			per := make([][]Op, 3)
			for i := 0; i < bulkGroup; i++ {
				id := fmt.Sprintf("bulk/%d/%d", g, i)
				k := int(bucket.ForID(id)) % 3
				per[k] = append(per[k], Op{Kind: OpPut, ID: id, Collection: "Users", Body: body})
			}
			return onEachShard(func(k int) error {
				_, err := stores[k].Write(context.Background(), per[k])
				return err
			})
		})
	})
	// pebble writes each document's body under its item key: one key per
	// document, in the order they come, as the bench command's baseline
	// does.
	b.Run("pebble", func(b *testing.B) {
		rawBatches(b, run, false, func(dst []kv, etag uint64, bk uint32, id string) []kv {
			return append(dst, kv{itemKey(bk, id), body})
		})
	})
	// layout writes what a replica's commit writes for a new document,
	// with the replicas' own options and in its order (ascending keys), but
	// none of its logic: the whole item under its doc key, its metadata
	// under its item key and its feed entry. Its distance to pebble is the
	// cost of the key layout; store's distance to layout is the replica's
	// own work (lookups, bucket statistics, change vectors, its commit
	// loop).
	b.Run("layout", func(b *testing.B) {
		now := time.Now()
		rawBatches(b, run, true, func(dst []kv, etag uint64, bk uint32, id string) []kv {
			d := &Document{ID: id, Collection: "Users", Body: body, LastModified: now, Etag: etag, Bucket: bk,
				ChangeVector: nextChangeVector(changevector.ChangeVector{}, "A", etag, "bench-database-id-0123").String()}
			ik := itemKey(bk, id)
			return append(dst, kv{docKey(ik), d.appendDocValue(nil)}, kv{ik, d.appendEncoded(nil)}, kv{etagKey(etag), feedRef("", ik[1:])})
		})
	})
}

// onEachShard runs write for the 3 shards of BenchmarkBulkWrites at once,
// as a node writes one bulk_docs request's parts, and joins their errors.
func onEachShard(write func(k int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for k := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = write(k)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// kv is one key and its value for a raw Pebble batch.
type kv struct{ k, v []byte }

// rawBatches runs BenchmarkBulkWrites' groups of bulkGroup documents on 3
// raw Pebble instances: set appends to dst the keys of the document id
// (in bucket bk, etag the next of its instance), and each group commits
// its 3 batches at once, synced. asReplica writes as a replica's commit
// does: with the replicas' options (PebbleOptions) and its keys in
// ascending order. Otherwise the baselines' span policy (every value of
// 256 bytes or more separated) is used and keys go into the batch as they
// come.
func rawBatches(b *testing.B, run func(*testing.B, func(w, g int) error), asReplica bool, set func(dst []kv, etag uint64, bk uint32, id string) []kv) {
	var dbs []*pebble.DB
	cache := pebble.NewCache(256 << 20)
	b.Cleanup(cache.Unref) // after the instances close (cleanups run last first)
	for i := 0; i < 3; i++ {
		if !asReplica {
			dbs = append(dbs, rawPebble(b, cache))
			continue
		}
		db, err := pebble.Open(b.TempDir(), PebbleOptions(cache, 0, nil))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	var etags [3]atomic.Uint64
	run(b, func(w, g int) error {
		per := make([][]kv, 3)
		for i := 0; i < bulkGroup; i++ {
			id := fmt.Sprintf("bulk/%d/%d", g, i)
			bk := bucket.ForID(id)
			k := int(bk) % 3
			per[k] = set(per[k], etags[k].Add(1), bk, id)
		}
		return onEachShard(func(k int) error {
			if asReplica {
				slices.SortFunc(per[k], func(a, b kv) int { return bytes.Compare(a.k, b.k) })
			}
			batch := dbs[k].NewBatch()
			defer batch.Close()
			for _, e := range per[k] {
				if err := batch.Set(e.k, e.v, nil); err != nil {
					return err
				}
			}
			return batch.Commit(pebble.Sync)
		})
	})
}

// BenchmarkOverwrites: 64 writers replace random documents of 200k already
// on disk (flushed, their bodies in blob files), as YCSB's updates do; each
// write first reads the stored version's change vector.
func BenchmarkOverwrites(b *testing.B) {
	const docs = 200_000
	stores := benchStores(b, 1)
	s := stores[0]
	body := []byte(`{"f":"` + strings.Repeat("x", 1000) + `"}`)
	for i := 0; i < docs; i += 1000 {
		ops := make([]Op, 0, 1000)
		for j := i; j < i+1000; j++ {
			ops = append(ops, Op{Kind: OpPut, ID: fmt.Sprintf("doc/%d", j), Body: body})
		}
		if _, err := s.Write(context.Background(), ops); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	runWriters(b, func(w int) func(i int) error {
		r := rand.New(rand.NewPCG(uint64(w), 1))
		return func(int) error {
			_, err := s.Write(context.Background(), []Op{{Kind: OpPut, ID: fmt.Sprintf("doc/%d", r.IntN(docs)), Body: body}})
			return err
		}
	})
}

// BenchmarkPointReads reads random documents of 100k on disk (flushed,
// their bodies in blob files) with no document cache: the storage part of a
// GET that misses the cache, beside a raw Pebble Get of the same body under
// the same options.
func BenchmarkPointReads(b *testing.B) {
	const docs = 100_000
	body := []byte(`{"f":"` + strings.Repeat("x", 1000) + `"}`)
	id := func(i int) string { return fmt.Sprintf("doc/%d", i) }
	store := func(body []byte) func(b *testing.B) {
		return func(b *testing.B) {
			s := benchStores(b, 1)[0]
			for i := 0; i < docs; i += 1000 {
				ops := make([]Op, 0, 1000)
				for j := i; j < i+1000; j++ {
					ops = append(ops, Op{Kind: OpPut, ID: id(j), Collection: "Users", Body: body})
				}
				if _, err := s.Write(context.Background(), ops); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.db.Flush(); err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Get(id(r.IntN(docs))); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("store", store(body))
	// Documents small enough to stay inline in their item.
	b.Run("store-small", store([]byte(`{"f":"`+strings.Repeat("x", 100)+`"}`)))
	b.Run("pebble", func(b *testing.B) {
		cache := pebble.NewCache(256 << 20)
		b.Cleanup(cache.Unref)
		db := rawPebble(b, cache)
		for i := 0; i < docs; i += 1000 {
			batch := db.NewBatch()
			for j := i; j < i+1000; j++ {
				k := id(j)
				if err := batch.Set(itemKey(bucket.ForID(k), k), body, nil); err != nil {
					b.Fatal(err)
				}
			}
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 2))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			k := id(r.IntN(docs))
			v, closer, err := db.Get(itemKey(bucket.ForID(k), k))
			if err != nil {
				b.Fatal(err)
			}
			_ = append([]byte(nil), v...)
			closer.Close()
		}
	})
}

// BenchmarkTailedWrites measures what tailing the changes feed adds to
// single-document durable writes: the writes of
// BenchmarkConcurrentDurableWrites, with no tailer, then with two per store
// (a replica of a shard with three replicas sends its feed to two peers).
// Each tailer reads what is new as soon as the store says so, as a
// replicator does; compare cpu-us/write between the two.
func BenchmarkTailedWrites(b *testing.B) {
	for _, tailers := range []int{0, 2} {
		b.Run(fmt.Sprintf("tailers=%d", tailers), func(b *testing.B) {
			stores := benchStores(b, 3)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var read atomic.Int64
			for _, s := range stores {
				for range tailers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var progress uint64
						for {
							changed := s.Changed()
							docs, err := s.Changes(progress, 1024)
							if err != nil {
								b.Error(err)
								return
							}
							if len(docs) > 0 {
								progress = docs[len(docs)-1].Etag
								read.Add(int64(len(docs)))
								continue
							}
							select {
							case <-ctx.Done():
								return
							case <-changed:
							}
						}
					}()
				}
			}
			runPuts(b, stores)
			cancel()
			wg.Wait()
			if tailers > 0 {
				b.ReportMetric(float64(read.Load())/float64(b.N*tailers), "reads/write")
			}
		})
	}
}
