package storage

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
)

// Sentinel errors of the store.
var (
	// ErrNotFound means no live document has the id.
	ErrNotFound = errors.New("document not found")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("store closed")
)

// Options configure one replica's store.
type Options struct {
	// Dir is the replica's directory (<data-dir>/databases/<db>/shard-<n>).
	Dir string
	// NodeTag is the tag of the node that owns this replica; it names the
	// replica's entry in change vectors.
	NodeTag string
	// Cache is a block cache shared by every replica of the node; nil gets
	// a small private one.
	Cache *pebble.Cache
	// Logger receives Pebble's log lines; nil discards them.
	Logger *slog.Logger
	// MemTableSize overrides the memtable size (bytes); 0 picks the default.
	MemTableSize uint64
	// DocCache, shared by the node's replicas, keeps documents point reads
	// found; nil reads Pebble every time.
	DocCache *DocCache
	// Compactions, shared by the node's replicas, grants their
	// compactions; nil gives the replica Pebble's own scheduler (a
	// goroutine per replica that wakes every 100 ms).
	Compactions *Compactions

	// tune, set only by tests, adjusts the Pebble options before opening.
	tune func(*pebble.Options)
	// checkpointBuckets and checkpointEvery, set only by tests, override
	// when bucket statistics are checkpointed.
	checkpointBuckets int
	checkpointEvery   time.Duration
	// checkpointPause, set only by tests, delays each checkpoint's write,
	// so that rounds commit while it runs.
	checkpointPause time.Duration
	// tailEntries and tailBytes bound the feed's tail in memory (0: the
	// defaults), so that tests see it evict.
	tailEntries, tailBytes int
}

// Store is one shard replica's document storage.
type Store struct {
	db     *pebble.DB
	order  readOrder // which key a whole-document read tries first
	dbid   string
	tag    string
	logger *slog.Logger

	reqs   chan *writeReq
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.RWMutex // guards the fields below, written by the committer
	lastEtag uint64
	counters counters
	// progress mirrors the replication progress keys (how far each other
	// replica's feed was applied here) as of the last commit: those keys
	// are overwritten by every replicated batch, so reading them through
	// an iterator walked every overwrite still in the memtable (a sender
	// reads them at every pass of a migration's tail).
	progress map[string]uint64
	closed   bool
	changed  chan struct{} // closed and replaced after each commit
	// dirty holds the statistics of the buckets that changed since the
	// last checkpoint (see checkpoint), which are not in Pebble yet: every
	// reader of bucket statistics looks here first. The committer replaces
	// entries (it never changes a committed bucketState) and reads them
	// without the lock.
	dirty map[uint32]*bucketState
	// flushing holds the statistics a running checkpoint is writing (nil:
	// none); readers look here after dirty.
	flushing map[uint32]*bucketState

	// Group-commit figures, for observing how well commits are shared.
	commits, commitOps, commitNanos, syncNanos uint64

	docs *docShard // this store's part of the node's document cache; nil: none
	tail feedTail  // the newest feed entries, guarded by mu (see feedTail)

	// reads is what Close waits on before it closes Pebble.
	reads *readGate

	// marks are the purge marks of moved-away buckets (see PurgeMark): an
	// immutable map, replaced whole under marksMu by MarkPurged, read by
	// the committer without a lock.
	marks   atomic.Pointer[map[uint32]purgeMarks]
	marksMu sync.Mutex

	// statsCache holds recently checkpointed buckets' statistics, so a
	// write need not read them back from Pebble: a memtable seek costs
	// ~10 µs on these machines, as much as the rest of a write's storage
	// work. Only the committer goroutine touches it.
	statsCache    map[uint32]*bucketState
	statsCacheMax int // entries; tests lower it
	// dirtySince is when dirty last became non-empty; checkpointBuckets
	// and checkpointEvery say when the committer starts a checkpoint (tests
	// lower them); tests that simulate a crash set noFinalCheckpoint, and Close
	// then leaves the dirty statistics unwritten. The committer alone uses
	// them once it runs.
	dirtySince        time.Time
	checkpointBuckets int
	checkpointEvery   time.Duration
	noFinalCheckpoint atomic.Bool
	// ckptDone reports the running checkpoint's outcome (nil: none runs);
	// spare is the map of the last finished one, cleared for reuse as dirty.
	// Only the committer touches them.
	ckptDone  chan error
	spare     map[uint32]*bucketState
	ckptPause time.Duration // see Options.checkpointPause
	// used has a bit for every bucket that has statistics on disk, i.e. that
	// ever held an item here: a write into any other bucket reads nothing
	// back (neither its statistics nor the item can exist). Built at open
	// from the statistics keys; only the committer touches it afterwards.
	used bucketSet
}

// bucketSet is a set of bucket numbers (one bit each, 128 KiB).
type bucketSet []uint64

func newBucketSet() bucketSet { return make(bucketSet, bucket.Count/64) }

func (s bucketSet) has(b uint32) bool { return s[b/64]&(1<<(b%64)) != 0 }

func (s bucketSet) add(b uint32) { s[b/64] |= 1 << (b % 64) }

// counters are the replica-wide figures kept in one meta key.
type counters struct {
	Documents  int64
	Tombstones int64
	CV         changevector.Vector
}

// Open opens (creating if needed) the store in opts.Dir.
func Open(opts Options) (*Store, error) {
	if opts.NodeTag == "" {
		return nil, errors.New("open store: empty node tag")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("open store %s: %w", opts.Dir, err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	db, err := openPebble(opts.Dir, pebbleOptions(opts, logger))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", opts.Dir, err)
	}
	if err := upgradeBodies(db, logger); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", opts.Dir, err)
	}
	s := &Store{db: db, tag: opts.NodeTag, logger: logger, reqs: make(chan *writeReq, 1024), done: make(chan struct{}), changed: make(chan struct{}), docs: opts.DocCache.open(),
		dirty: map[uint32]*bucketState{}, statsCache: map[uint32]*bucketState{}, statsCacheMax: statsCacheMax, used: newBucketSet(), reads: newReadGate(),
		checkpointBuckets: cmp.Or(opts.checkpointBuckets, checkpointBuckets), checkpointEvery: cmp.Or(opts.checkpointEvery, checkpointEvery), ckptPause: opts.checkpointPause}
	s.tail.maxEntries, s.tail.maxBytes = cmp.Or(opts.tailEntries, tailMaxEntries), cmp.Or(opts.tailBytes, tailMaxBytes)
	if err := s.load(); err != nil {
		s.docs.close()
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", opts.Dir, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.commitLoop(ctx)
	return s, nil
}

// pebbleOptions is the tuned profile: Pebble's defaults stall random-order
// ingest on these machines (DESIGN §8).
func pebbleOptions(opts Options, logger *slog.Logger) *pebble.Options {
	o := PebbleOptions(opts.Cache, opts.MemTableSize, logger)
	if opts.Compactions != nil {
		o.Experimental.CompactionScheduler = opts.Compactions.forReplica()
	}
	if opts.tune != nil {
		opts.tune(o)
	}
	return o
}

// l0CompactionThreshold is how many level-0 files (sublevels, strictly)
// make Pebble compact them into the next level; see PebbleOptions.
const l0CompactionThreshold = 8

// PebbleOptions returns the Pebble options every replica opens with, for a
// memtable of memTableSize bytes (0 picks the default) and a block cache
// shared by the node's replicas (nil gets a private one); logger receives
// Pebble's log lines (nil discards them). It is exported so that the raw
// Pebble baselines of the benchmarks run with exactly the same profile.
func PebbleOptions(cache *pebble.Cache, memTableSize uint64, logger *slog.Logger) *pebble.Options {
	if memTableSize == 0 {
		memTableSize = 32 << 20
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	o := &pebble.Options{
		Cache:                       cache,
		MemTableSize:                memTableSize,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       l0CompactionThreshold,
		L0StopWritesThreshold:       1000,
		LBaseMaxBytes:               256 << 20,
		CompactionConcurrencyRange:  func() (int, int) { return 1, 2 },
		Logger:                      pebbleLogger{logger},
		// Value separation needs this format (an older store is upgraded
		// in place when it opens).
		FormatMajorVersion: pebble.FormatValueSeparation,
	}
	// Value separation: a document with a body of 256 bytes or more (the
	// value under its doc key, see bodyKeyMin) is written once to a blob file,
	// and compactions move only its key and a handle.
	// Documents land in random buckets, so every compaction of the item
	// family would otherwise rewrite the bodies again at every level: at
	// 600k 1 KiB documents it cut storage CPU per document by a quarter
	// (go test ./storage -bench BulkWrites). A blob file is rewritten once a
	// fifth of it is garbage, so overwritten bodies do not pile up.
	//
	// Every flush makes a blob file spanning the whole key space, so an
	// sstable soon references many overlapping ones; past
	// MaxBlobReferenceDepth a compaction copies the values into new blob
	// files, which at 10 (Pebble's usual figure) took 18% of the CPU of a
	// 1M-document load. Point reads name one blob file each, and scans of
	// a bucket are rare, so a deep reference stack costs little here.
	//
	// With bodies out of the sstables, an L0 compaction rewrites only keys
	// and handles, but it rewrites all of Lbase that they overlap, which
	// for random keys is all of it: compacting four flushes at a time
	// instead of two took CPU per document from 49.5 to 38.5 µs (median of
	// three alternating runs of BenchmarkBulkWrites at 1M documents; a
	// 64 MiB memtable measured 46.5), and eight instead of four from
	// 51.5 / 50.5 to 44.4 / 43.0 µs (two alternating runs; sixteen: 39.4 /
	// 39.6). A point read checks each L0 file its key falls in (their bloom
	// filters, mostly): BenchmarkPointReads after 100k documents measured
	// 11.6 / 12.7 µs at four, 13.3 / 11.9 at eight, 16.4 / 16.5 at sixteen.
	o.Experimental.EnableColumnarBlocks = func() bool { return true }
	o.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           256,
			MaxBlobReferenceDepth: 100,
			RewriteMinimumAge:     5 * time.Minute,
			TargetGarbageRatio:    0.2,
		}
	}
	// Only bodies are separated. Every other family stays in the sstables,
	// whatever its size: an item of a mid-size document (its body inline,
	// under 256 bytes, plus metadata) or of a long id or change vector is
	// read by every write, replication and purge that touches it, and a
	// blob file would make each of those a second read.
	o.Experimental.SpanPolicyFunc = separateBodiesOnly
	// Bloom filters: a write looks up its key first, and new keys are
	// mostly absent from every sstable.
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	o.EnsureDefaults()
	return o
}

// separateBodiesOnly is the span policy that lets Pebble separate values
// of the doc family (and of the retired body family) only.
func separateBodiesOnly(start []byte) (pebble.SpanPolicy, []byte, error) {
	inPlace := pebble.SpanPolicy{ValueStoragePolicy: pebble.ValueStorageLowReadLatency}
	switch {
	case len(start) == 0 || start[0] < prefixOldBody:
		return inPlace, []byte{prefixOldBody}, nil
	case start[0] <= prefixDoc:
		return pebble.SpanPolicy{}, []byte{prefixDoc + 1}, nil
	default:
		return inPlace, nil, nil
	}
}

// openPebble is pebble.Open with a panic during the open (a Fatalf: out of
// file descriptors, Pebble could not set its MANIFEST marker) returned as
// an error. Pebble's Open releases what it took before it re-panics, and a
// replica that fails to open is retried while the node serves the others;
// the panic took the whole node down.
func openPebble(dir string, o *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("pebble failed while opening: %v", r)
		}
	}()
	return pebble.Open(dir, o)
}

// pebbleLogger routes Pebble's log lines to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	panic(fmt.Sprintf(format, args...))
}

// load reads the database id (creating one for a new replica), the last
// etag and the counters, and brings bucket statistics up to date (see
// recoverStats).
func (s *Store) load() error {
	v, closer, err := s.db.Get(metaDatabaseID)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		s.dbid = changevector.NewDatabaseID()
		if err := s.db.Set(metaDatabaseID, []byte(s.dbid), pebble.Sync); err != nil {
			return fmt.Errorf("write database id: %w", err)
		}
	case err != nil:
		return fmt.Errorf("read database id: %w", err)
	default:
		s.dbid = string(v)
		_ = closer.Close()
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEtag}, UpperBound: []byte{prefixEtag + 1}})
	if err != nil {
		return err
	}
	if it.Last() {
		s.lastEtag = binary.BigEndian.Uint64(it.Key()[1:])
	}
	s.tail.reset(s.lastEtag)
	if err := it.Close(); err != nil {
		return err
	}
	if err := s.recoverStats(); err != nil {
		return err
	}
	if err := s.loadUsedBuckets(); err != nil {
		return err
	}
	if err := s.loadPurgeMarks(); err != nil {
		return err
	}
	if s.progress, err = s.loadProgress(); err != nil {
		return err
	}
	v, closer, err = s.db.Get(metaCounters)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read counters: %w", err)
	default:
		defer closer.Close()
		c, err := decodeCounters(v)
		if err != nil {
			return err
		}
		s.counters = c
	}
	return nil
}

// loadUsedBuckets marks every bucket that has statistics.
func (s *Store) loadUsedBuckets() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixBktStat}, UpperBound: []byte{prefixBktStat + 1}})
	if err != nil {
		return fmt.Errorf("scan bucket statistics: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if k := it.Key(); len(k) == 5 {
			if b := binary.BigEndian.Uint32(k[1:]); b <= bucket.MaxID {
				s.used.add(b)
			}
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("scan bucket statistics: %w", err)
	}
	return nil
}

func (c counters) encode() []byte {
	b := binary.AppendVarint(nil, c.Documents)
	b = binary.AppendVarint(b, c.Tombstones)
	return append(b, c.CV.String()...)
}

func decodeCounters(v []byte) (counters, error) {
	var c counters
	var n int
	if c.Documents, n = binary.Varint(v); n <= 0 {
		return c, fmt.Errorf("counters: %w", errCorruptItem)
	}
	v = v[n:]
	if c.Tombstones, n = binary.Varint(v); n <= 0 {
		return c, fmt.Errorf("counters: %w", errCorruptItem)
	}
	cv, err := changevector.ParseVector(string(v[n:]))
	if err != nil {
		return c, fmt.Errorf("counters: %w", err)
	}
	c.CV = cv
	return c, nil
}

// DatabaseID is the replica's database id, used in change vectors.
func (s *Store) DatabaseID() string { return s.dbid }

// NodeTag is the tag of the node holding this replica.
func (s *Store) NodeTag() string { return s.tag }

// Close stops the committer (failing queued writes with ErrClosed) and
// closes Pebble.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.done
	s.reads.close() // reads in flight finish; later ones get ErrClosed
	s.docs.close()
	return s.db.Close()
}

// Stats are replica-wide figures.
type Stats struct {
	// DocumentsCount counts live documents.
	DocumentsCount int64
	// TombstonesCount counts tombstones.
	TombstonesCount int64
	// LastEtag is the etag of the latest change.
	LastEtag uint64
	// ChangeVector merges every change this replica holds.
	ChangeVector string
	// Commits counts group commits; CommittedOps the writes they carried;
	// CommitMillis and SyncMillis the time spent per commit in total and in
	// the synced batch commit.
	Commits      uint64  `json:"Commits"`
	CommittedOps uint64  `json:"CommittedOps"`
	CommitMillis float64 `json:"CommitMillis"`
	SyncMillis   float64 `json:"SyncMillis"`
	// Engine is what Pebble reports of the replica's files and background
	// work: what an operator looks at when writes or a move slow down.
	Engine EngineStats `json:"Engine"`
	// DocCache counts the replica's point reads by where they were
	// answered: a GET row slower than usual with many misses is reading
	// Pebble, not waiting on the API.
	DocCache DocCacheStats `json:"DocCache"`
	// Feed counts the reads of the changes feed by where they were
	// answered: a replica whose peers keep reading Pebble has tailers
	// that fell behind the feed's tail in memory.
	Feed FeedStats `json:"Feed"`
}

// FeedStats counts one replica's reads of its changes feed (a batch for
// a replicator, an ETL task, a subscription or a migration's sender).
type FeedStats struct {
	// FromMemory were answered from the feed's newest entries in memory,
	// FromDisk from Pebble (a tailer further behind).
	FromMemory uint64 `json:"FromMemory"`
	FromDisk   uint64 `json:"FromDisk"`
}

// DocCacheStats counts one replica's point reads (documents and
// tombstones by id) by the node's document cache.
type DocCacheStats struct {
	// Hits were answered from the cache, Misses read Pebble (a read of
	// an id that does not exist is a miss: absence is not cached).
	Hits   uint64 `json:"Hits"`
	Misses uint64 `json:"Misses"`
}

// EngineStats are Pebble's figures for one replica.
type EngineStats struct {
	// DiskBytes is the space the replica's files take (sstables, blob
	// files, WAL, manifest).
	DiskBytes uint64 `json:"DiskBytes"`
	// BlobBytes is the part of it in blob files (separated bodies).
	BlobBytes uint64 `json:"BlobBytes"`
	// MemtableBytes is the memory its memtables hold.
	MemtableBytes uint64 `json:"MemtableBytes"`
	// L0Files counts the sstables in level 0: many of them mean flushes
	// outpace compactions, and writes will soon stall.
	L0Files int64 `json:"L0Files"`
	// CompactionDebtBytes estimates the bytes compactions must rewrite to
	// bring the levels back into shape; CompactionsRunning counts the
	// compactions in progress.
	CompactionDebtBytes uint64 `json:"CompactionDebtBytes"`
	CompactionsRunning  int64  `json:"CompactionsRunning"`
}

// Stats returns the replica-wide figures.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Stats{
		DocumentsCount:  s.counters.Documents,
		TombstonesCount: s.counters.Tombstones,
		LastEtag:        s.lastEtag,
		ChangeVector:    s.counters.CV.String(),
		Commits:         s.commits,
		CommittedOps:    s.commitOps,
		CommitMillis:    float64(s.commitNanos) / 1e6,
		SyncMillis:      float64(s.syncNanos) / 1e6,
		Engine:          s.engineStats(),
		DocCache:        s.docs.counts(),
		Feed:            FeedStats{FromMemory: s.tail.fromMemory.Load(), FromDisk: s.tail.fromDisk.Load()},
	}
}

// engineStats reads Pebble's metrics (nothing once the store is closed).
func (s *Store) engineStats() EngineStats {
	if !s.reads.enter() {
		return EngineStats{}
	}
	defer s.reads.leave()
	m := s.db.Metrics()
	return EngineStats{
		DiskBytes:           m.DiskSpaceUsage(),
		BlobBytes:           m.BlobFiles.LiveSize,
		MemtableBytes:       m.MemTable.Size,
		L0Files:             m.Levels[0].TablesCount,
		CompactionDebtBytes: m.Compact.EstimatedDebt,
		CompactionsRunning:  m.Compact.NumInProgress,
	}
}

// Changed returns a channel closed at the next commit after the call: a
// tailer reads its feed, then waits on it, without polling.
func (s *Store) Changed() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.changed
}

// LastEtag is the etag of the latest committed change.
func (s *Store) LastEtag() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastEtag
}

// get returns the committed item (document or tombstone) under key, with
// its body. A split item is kept whole under its doc key, where one read
// finds it; any other item only under its item key. Which key a read
// tries first follows what this replica's recent reads found (see
// readOrder), so a replica of large documents reads once, and one of small
// documents does not pay for a doc key it never has. An item that changed
// between the two reads is read again.
func (s *Store) get(key []byte, bucket uint32) (*Document, error) {
	return s.getFrom(s.db, key, bucket)
}

// getFrom is get from r: the store's latest state, or a snapshot of it.
func (s *Store) getFrom(r pebble.Reader, key []byte, bucket uint32) (*Document, error) {
	dkey := docKey(key)
	docFirst := s.order.docFirst()
	for attempt := 0; ; attempt++ {
		if docFirst {
			d, err := getWhole(r, dkey, bucket)
			if err == nil {
				s.order.note(true)
				return d, nil
			}
			if !errors.Is(err, ErrNotFound) {
				return nil, err
			}
		}
		d, err := getMeta(r, key, bucket)
		if err != nil || !d.bodyElsewhere {
			if err == nil || errors.Is(err, ErrNotFound) {
				s.order.note(false)
			}
			return d, err
		}
		if !docFirst {
			s.order.note(true)
			d, err := getWhole(r, dkey, bucket)
			if !errors.Is(err, ErrNotFound) {
				return d, err
			}
		}
		if attempt == 100 {
			return nil, fmt.Errorf("item %q: split, and its doc key missing: %w", key[5:], errCorruptItem)
		}
		docFirst = true // it is split now: its doc key next
	}
}

// getLeavingBody reads the item under key from r by its metadata first,
// and its body from the doc key only when the body is kept apart and leave
// does not report the item: such an item comes with BodyUnread. r is a
// snapshot, so the two reads see one version.
func getLeavingBody(r pebble.Reader, key []byte, bucket uint32, leave func(*Document) bool) (*Document, error) {
	d, err := getMeta(r, key, bucket)
	if err != nil || !d.bodyElsewhere || leave(d) {
		return d, err
	}
	v, closer, err := r.Get(docKey(key))
	if err != nil {
		return nil, fmt.Errorf("item %q: split, and its doc key unreadable: %w", key[5:], err)
	}
	defer closer.Close()
	if err := d.setBody(v); err != nil {
		return nil, err
	}
	return d, nil
}

// getWhole returns the split item kept whole under doc key dkey, or
// ErrNotFound.
func getWhole(r pebble.Reader, dkey []byte, bucket uint32) (*Document, error) {
	v, closer, err := r.Get(dkey)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	d, err := decodeItem(bucket, v)
	if err != nil {
		return nil, fmt.Errorf("doc key of %q: %w", dkey[5:], err)
	}
	return d, nil
}

// readOrder tells whether this replica's whole-document reads have lately
// found split items (kept under a doc key) more often than others. It is
// a guess that decides which key a read tries first, never what it
// returns; racing updates only blur it.
type readOrder struct {
	split, other atomic.Int64
}

// readOrderSpan is how many reads the guess mostly rests on: past it, both
// counts are halved, so the guess follows a change of workload.
const readOrderSpan = 1 << 12

func (o *readOrder) docFirst() bool { return o.split.Load() >= o.other.Load() }

func (o *readOrder) note(split bool) {
	c := &o.other
	if split {
		c = &o.split
	}
	if c.Add(1) > readOrderSpan {
		o.split.Store(o.split.Load() / 2)
		o.other.Store(o.other.Load() / 2)
	}
}

// getMeta returns the item under key in r, without the body of a split
// item (kept whole under its doc key).
func getMeta(r pebble.Reader, key []byte, bucket uint32) (*Document, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return decodeItem(bucket, v)
}

func closeQuietly(c io.Closer) { _ = c.Close() }
