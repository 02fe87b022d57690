package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/storage"
)

// pebbleOptions is the profile every shardnode replica opens Pebble with,
// so the raw baseline differs from shardnode only by what shardnode adds
// on top of Pebble.
// Every value of a baseline is a document body, so every value is stored as
// a replica stores bodies (separated into blob files from 256 bytes), not
// as it stores its other key families.
func pebbleOptions(cache *pebble.Cache) *pebble.Options {
	o := storage.PebbleOptions(cache, 0, nil)
	o.Experimental.SpanPolicyFunc = func([]byte) (pebble.SpanPolicy, []byte, error) { return pebble.SpanPolicy{}, nil, nil }
	return o
}

// pebbleSystem is the raw Pebble baseline: one Pebble instance per shard,
// as a shardnode node keeps, sharing one 256 MiB block cache as the node's
// replicas do; records go to the instance that owns the bucket of their
// id, under their big-endian key number.
type pebbleSystem struct {
	dir    string
	shards int
	cache  *pebble.Cache
}

// baselineCacheBytes is the raw Pebble baselines' block cache: the
// node's default (storage.block-cache-bytes), so that both read through
// caches of one size.
func baselineCacheBytes() int64 { return config.Default().Storage.BlockCacheBytes }

func newPebbleSystem(dir string, shards int) *pebbleSystem {
	return &pebbleSystem{dir: dir, shards: shards, cache: pebble.NewCache(baselineCacheBytes())}
}

func (s *pebbleSystem) name() string { return "pebble" }

func (s *pebbleSystem) close() error {
	s.cache.Unref()
	return nil
}

func (s *pebbleSystem) dataset(_ context.Context, name string, _ bool) (dataset, error) {
	d := &pebbleDataset{dir: filepath.Join(s.dir, name), ranges: bucket.EvenSplit(s.shards)}
	if err := os.RemoveAll(d.dir); err != nil {
		return nil, fmt.Errorf("clear %s: %w", d.dir, err)
	}
	for i := range s.shards {
		db, err := pebble.Open(filepath.Join(d.dir, "shard-"+strconv.Itoa(i)), pebbleOptions(s.cache))
		if err != nil {
			_ = d.drop(context.Background())
			return nil, fmt.Errorf("open pebble %s: %w", d.dir, err)
		}
		d.dbs = append(d.dbs, db)
	}
	return d, nil
}

// pebbleDataset is one set of per-shard Pebble instances.
type pebbleDataset struct {
	dir    string
	ranges bucket.Ranges
	dbs    []*pebble.DB
}

// shardOf routes key number k as shardnode routes its id.
func (d *pebbleDataset) shardOf(k int64) *pebble.DB {
	return d.dbs[d.ranges.ShardOf(bucket.ForID(keyName(k)))]
}

func (d *pebbleDataset) client(context.Context, int) (client, error) {
	return &pebbleClient{d: d}, nil
}

// settled reports whether every instance has no compaction running or
// owed.
func (d *pebbleDataset) settled(context.Context) (bool, error) {
	for _, db := range d.dbs {
		m := db.Metrics()
		if m.Compact.NumInProgress > 0 || m.Compact.EstimatedDebt > 0 {
			return false, nil
		}
	}
	return true, nil
}

func (d *pebbleDataset) drop(context.Context) error {
	var errs []error
	for _, db := range d.dbs {
		errs = append(errs, db.Close())
	}
	d.dbs = nil
	errs = append(errs, os.RemoveAll(d.dir))
	return errors.Join(errs...)
}

// pebbleClient calls Pebble directly; Pebble's commit pipeline shares
// fsyncs between concurrent synced writes.
type pebbleClient struct {
	d   *pebbleDataset
	buf []byte
}

func (c *pebbleClient) close() {}

func (c *pebbleClient) read(_ context.Context, k int64) error {
	v, closer, err := c.d.shardOf(k).Get(pebbleKey(k))
	if err != nil {
		return fmt.Errorf("get %d: %w", k, err)
	}
	c.buf = append(c.buf[:0], v...)
	return closer.Close()
}

func (c *pebbleClient) write(_ context.Context, k int64, rec []byte) error {
	if err := c.d.shardOf(k).Set(pebbleKey(k), rec, pebble.Sync); err != nil {
		return fmt.Errorf("set %d: %w", k, err)
	}
	return nil
}

// scan range-scans every instance, as a query fans out to every shard.
func (c *pebbleClient) scan(_ context.Context, k int64, n int) error {
	for _, db := range c.d.dbs {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: pebbleKey(k), UpperBound: pebbleKey(k + int64(n))})
		if err != nil {
			return fmt.Errorf("scan from %d: %w", k, err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			c.buf = append(c.buf[:0], it.Value()...)
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("scan from %d: %w", k, err)
		}
	}
	return nil
}

// writeBatch commits one synced batch per instance, instances in
// parallel, as shardnode's bulk_docs does.
func (c *pebbleClient) writeBatch(_ context.Context, keys []int64, recs [][]byte) error {
	batches := make([]*pebble.Batch, len(c.d.dbs))
	for i, k := range keys {
		shard := c.d.ranges.ShardOf(bucket.ForID(keyName(k)))
		if batches[shard] == nil {
			batches[shard] = c.d.dbs[shard].NewBatch()
		}
		if err := batches[shard].Set(pebbleKey(k), recs[i], nil); err != nil {
			return err
		}
	}
	errs := make([]error, len(batches))
	var wg sync.WaitGroup
	for i, b := range batches {
		if b == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.Commit(pebble.Sync)
			_ = b.Close()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("commit batch: %w", err)
	}
	return nil
}
