package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Batches of the raw copy: the same bounds as the resharding sender's
// (resharding.batchItems, resharding.batchBytes), so both copy in the same
// steps.
const (
	copyBatchItems = 512
	copyBatchBytes = 4 << 20
)

// rawPebbleCopy is the bulk transfer's storage limit. It writes n values
// (item(i) gives key and value; keys must ascend with i) in key order into
// a fresh Pebble instance with storage's tuned options and flushes it, so
// the data sits in sstables as a loaded source's does; then it times reading
// everything back in key order and writing it into a second instance in
// batches, the last one synced. Both instances share one 256 MiB block
// cache, as a node's replicas do. It returns the timed copy as a round of
// n documents and their key and value bytes.
func rawPebbleCopy(dir string, n int, item func(i int, buf []byte) (key, value []byte)) (roundResult, error) {
	if err := os.RemoveAll(dir); err != nil {
		return roundResult{}, err
	}
	defer os.RemoveAll(dir)
	cache := pebble.NewCache(baselineCacheBytes())
	defer cache.Unref()
	src, err := pebble.Open(filepath.Join(dir, "src"), pebbleOptions(cache))
	if err != nil {
		return roundResult{}, fmt.Errorf("open source: %w", err)
	}
	defer src.Close()
	var buf []byte
	b := src.NewBatch()
	for i := range n {
		k, v := item(i, buf[:0])
		buf = v[:0]
		if err := b.Set(k, v, nil); err != nil {
			return roundResult{}, err
		}
		if int(b.Count()) >= copyBatchItems || i == n-1 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return roundResult{}, fmt.Errorf("load source: %w", err)
			}
			_ = b.Close()
			b = src.NewBatch()
		}
	}
	_ = b.Close()
	if err := src.Flush(); err != nil {
		return roundResult{}, fmt.Errorf("flush source: %w", err)
	}
	dst, err := pebble.Open(filepath.Join(dir, "dst"), pebbleOptions(cache))
	if err != nil {
		return roundResult{}, fmt.Errorf("open destination: %w", err)
	}
	defer dst.Close()

	start := time.Now()
	it, err := src.NewIter(nil)
	if err != nil {
		return roundResult{}, err
	}
	var bytes int64
	var docs int64
	b = dst.NewBatch()
	size := 0
	commit := func(opts *pebble.WriteOptions) error {
		err := b.Commit(opts)
		_ = b.Close()
		b, size = dst.NewBatch(), 0
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return roundResult{}, err
		}
		if err := b.Set(it.Key(), v, nil); err != nil {
			_ = it.Close()
			return roundResult{}, err
		}
		size += len(it.Key()) + len(v)
		bytes += int64(len(it.Key()) + len(v))
		docs++
		if int(b.Count()) >= copyBatchItems || size >= copyBatchBytes {
			if err := commit(pebble.NoSync); err != nil {
				_ = it.Close()
				return roundResult{}, fmt.Errorf("copy: %w", err)
			}
		}
	}
	if err := it.Close(); err != nil {
		return roundResult{}, err
	}
	if err := commit(pebble.Sync); err != nil { // the final sync covers every batch before it
		return roundResult{}, fmt.Errorf("copy: %w", err)
	}
	elapsed := time.Since(start)
	if docs != int64(n) {
		return roundResult{}, errors.New("raw copy: read back " + fmt.Sprint(docs) + " of " + fmt.Sprint(n) + " values")
	}
	return roundResult{ops: docs, units: docs, bytes: bytes, elapsed: elapsed}, nil
}
