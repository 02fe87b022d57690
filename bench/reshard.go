package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shardnode/shardnode/bucket"
)

// The resharding workloads; each is also the name of its rows. "reshard"
// in Options.Workloads selects them all.
const (
	WorkloadReshardSmall      = "reshard-small-buckets"
	WorkloadReshardBulk       = "reshard-bulk-transfer"
	WorkloadReshardForeground = "reshard-foreground"
	// WorkloadReshardBulkForeground moves one large bucket under a write
	// load elsewhere in the database, unpaced and then paced by the move
	// bandwidth (resharding.max-send-bytes-per-sec).
	WorkloadReshardBulkForeground = "reshard-bulk-foreground"
	// rowReshardBulkPaced is reshard-bulk-foreground's paced pair of rows.
	rowReshardBulkPaced = "reshard-bulk-foreground-paced"
	// rowReshardOpenLoop is reshard-foreground's second pair of rows: the
	// same move under an open-loop load the cluster carries during a move
	// (not a workload of its own: reshard-foreground runs it).
	rowReshardOpenLoop = "reshard-foreground-open-loop"
)

// sysNoMove labels the foreground row's baseline: the same write load on
// the same cluster with no move running.
const sysNoMove = "no-move"

// sysShardnodeRF1 labels the bulk transfer into a database of replication
// factor 1: one destination replica writes the bucket, as the raw copy
// writes it once. With the usual factor 2, both destination replicas write
// it on this one machine's two cores and disk.
const sysShardnodeRF1 = "shardnode-rf1"

// Shape of the resharding datasets.
const (
	reshardShards      = 3
	reshardRF          = 2
	reshardDocsPerBkt  = 10   // documents per small bucket
	bulkDocBytes       = 4096 // size of one document of the bulk bucket
	flipWindow         = 100 * time.Millisecond
	flipSlack          = 10 * time.Millisecond // widens a flip's span for event delivery lag
	reshardMoveTimeout = 30 * time.Minute
)

// ReshardFigures are a resharding row's own figures (JSON; the note says
// the same in words).
type ReshardFigures struct {
	// Buckets is the number of non-empty buckets the operation moved one by
	// one; EmptyBuckets the empty ones it flipped in bulk.
	Buckets      int64 `json:",omitempty"`
	EmptyBuckets int64 `json:",omitempty"`
	// Timed is how many migrations the event stream saw both Moving and
	// OwnershipTransferred of; Coalesced how many it saw only part of (the
	// node's record watch coalesces applies).
	Timed     int `json:",omitempty"`
	Coalesced int `json:",omitempty"`
	// BucketP50Ms, BucketP99Ms and BucketMaxMs are per-bucket times,
	// Moving → OwnershipTransferred as the event stream delivered them.
	BucketP50Ms float64 `json:",omitempty"`
	BucketP99Ms float64 `json:",omitempty"`
	BucketMaxMs float64 `json:",omitempty"`
	// TotalSeconds runs from the POST that starts the operation to its
	// Completed event (every bucket flipped and cleaned up); MsPerBucket
	// divides it by Buckets.
	TotalSeconds float64 `json:",omitempty"`
	MsPerBucket  float64 `json:",omitempty"`
	// SendP50Ms is the median of Moving → Moved (the source streams the
	// bucket until nothing newer is left), ConfirmP50Ms of Moved →
	// OwnershipTransferred (every destination replica confirms), GapP50Ms
	// of one bucket's OwnershipTransferred → the next bucket's Moving.
	SendP50Ms    float64 `json:",omitempty"`
	ConfirmP50Ms float64 `json:",omitempty"`
	GapP50Ms     float64 `json:",omitempty"`
	// TransferSeconds is the bulk bucket's Moving → OwnershipTransferred,
	// split into SendSeconds and ConfirmSeconds as above.
	TransferSeconds float64 `json:",omitempty"`
	SendSeconds     float64 `json:",omitempty"`
	ConfirmSeconds  float64 `json:",omitempty"`
	// CPUCores is the whole process's CPU time (three nodes and the
	// benchmark's clients) during the move divided by its wall time: how
	// many of the machine's cores the move kept busy.
	CPUCores float64 `json:",omitempty"`
	// DocumentsMoved and BytesMoved are the operation's own counts.
	DocumentsMoved int64 `json:",omitempty"`
	BytesMoved     int64 `json:",omitempty"`
	// LoadSeconds is how long loading the dataset took.
	LoadSeconds float64 `json:",omitempty"`
	// Flips is the number of ownership flips seen under the foreground
	// load; FlipsWithWrites those with a write into the flipping bucket in
	// flight within ±100 ms. FlipPause* are, over those flips, the longest
	// such write's latency: the first definition, kept for comparison. On
	// a loaded machine it mostly measures ordinary write latency (the
	// longest of the ~10 writes a 200 ms window holds).
	Flips           int     `json:",omitempty"`
	FlipsWithWrites int     `json:",omitempty"`
	FlipPauseP50Ms  float64 `json:",omitempty"`
	FlipPauseP99Ms  float64 `json:",omitempty"`
	FlipPauseMaxMs  float64 `json:",omitempty"`
	// FlipsMeasured counts the flips with a write into the flipping bucket
	// and a control write in flight during the flip's span: from the first
	// node's OwnershipTransferred event to the last one's, widened by
	// flipSlack. AtFlip* are, over those flips, the longest write into the
	// flipping bucket in flight during the span; Control* the longest
	// write of as many writers outside the moving range in flight during
	// the same span (the same load at the same moment, without a flip);
	// Excess* the per-flip difference: what the flip itself adds.
	FlipsMeasured   int     `json:",omitempty"`
	AtFlipP50Ms     float64 `json:",omitempty"`
	AtFlipP99Ms     float64 `json:",omitempty"`
	AtFlipMaxMs     float64 `json:",omitempty"`
	ControlP50Ms    float64 `json:",omitempty"`
	ControlP99Ms    float64 `json:",omitempty"`
	FlipExcessP50Ms float64 `json:",omitempty"`
	FlipExcessP99Ms float64 `json:",omitempty"`
	FlipExcessMaxMs float64 `json:",omitempty"`
	// NoiseP50Ms / NoiseP99Ms are the same difference between two groups
	// of writers that are both outside the moving range, in the same spans:
	// what Excess* shows when the flip adds nothing.
	NoiseP50Ms float64 `json:",omitempty"`
	NoiseP99Ms float64 `json:",omitempty"`
	// MidMoveExcessP50Ms / MidMoveExcessP99Ms are the same difference as
	// Excess*, taken over a span as long as the flip's, centred between the
	// migration's Moving event and its flip: the same bucket under the
	// same move, without the flip.
	MidMoveExcessP50Ms float64 `json:",omitempty"`
	MidMoveExcessP99Ms float64 `json:",omitempty"`
	// FlipSpanP50Ms / FlipSpanP99Ms are the spans between the first and the
	// last node's flip event: how long the nodes disagree on the owner.
	FlipSpanP50Ms float64 `json:",omitempty"`
	FlipSpanP99Ms float64 `json:",omitempty"`
	// Rerouted* are the server's own measure of the pause (the Reroutes
	// figures of GET /databases/{db}/stats on every node): the writes a
	// shard refused after a flip and the new owner then applied, and the
	// delay the refusal added to each, from the write's first attempt to
	// the start of the one that reached the new owner. P50/P99 are the
	// largest of the nodes' own percentiles, Max the largest delay.
	Rerouted      uint64  `json:",omitempty"`
	ReroutedP50Ms float64 `json:",omitempty"`
	ReroutedP99Ms float64 `json:",omitempty"`
	ReroutedMaxMs float64 `json:",omitempty"`
	// Held* are the other half of the server's measure (the ArrivalHolds
	// figures of the same statistics): the routed writes the new owner's
	// replicas held until the source's last pass after the flip was
	// recorded, and how long each waited. P50/P99 and Max as for Rerouted.
	Held      uint64  `json:",omitempty"`
	HeldP50Ms float64 `json:",omitempty"`
	HeldP99Ms float64 `json:",omitempty"`
	HeldMaxMs float64 `json:",omitempty"`
	// LastPass* are the senders' own figures for what the writes were held
	// for (the LastPasses figures of the same statistics): the last passes
	// after the flips, from the flip seen to the pass stored, and
	// PeerFence* the part of each spent fencing the source shard's other
	// replicas, OwnFence* the wait, at once, for the sender's own writes in
	// flight, and PassSend* the pass after both. P50/P99 as for Rerouted.
	LastPasses     uint64  `json:",omitempty"`
	LastPassP50Ms  float64 `json:",omitempty"`
	LastPassP99Ms  float64 `json:",omitempty"`
	PeerFenceP50Ms float64 `json:",omitempty"`
	PeerFenceP99Ms float64 `json:",omitempty"`
	OwnFenceP50Ms  float64 `json:",omitempty"`
	OwnFenceP99Ms  float64 `json:",omitempty"`
	PassSendP50Ms  float64 `json:",omitempty"`
	PassSendP99Ms  float64 `json:",omitempty"`
	// MovingWrites counts the writes into moving buckets during the move;
	// MovingWritesP99Ms is their p99.
	MovingWrites      int64   `json:",omitempty"`
	MovingWritesP99Ms float64 `json:",omitempty"`
}

// reshard runs one resharding workload and returns its rows.
func (r *run) reshard(ctx context.Context, w string) []Row {
	if !r.ownNode {
		skip := "skipped: needs a 3-node cluster of its own (not with --url)"
		rows := []Row{{Workload: w, System: sysShardnode, Skipped: skip}}
		switch w {
		case WorkloadReshardTwoSources:
			rows = append(rows, Row{Workload: w, System: sysOneSource, Baseline: true, Skipped: skip})
		case WorkloadReshardBulk:
			rows = append(rows, Row{Workload: w, System: sysShardnodeRF1, Skipped: skip}, Row{Workload: w, System: sysPebble, Baseline: true, Skipped: skip})
		case WorkloadReshardForeground:
			rows = append(rows, Row{Workload: w, System: sysNoMove, Baseline: true, Skipped: skip},
				Row{Workload: rowReshardOpenLoop, System: sysShardnode, Skipped: skip}, Row{Workload: rowReshardOpenLoop, System: sysNoMove, Baseline: true, Skipped: skip})
		case WorkloadReshardSparse:
			rows = append(rows, Row{Workload: w, System: sysNoMove, Baseline: true, Skipped: skip})
		case WorkloadReshardBulkForeground:
			rows = append(rows, Row{Workload: w, System: sysNoMove, Baseline: true, Skipped: skip},
				Row{Workload: rowReshardBulkPaced, System: sysShardnode, Skipped: skip}, Row{Workload: rowReshardBulkPaced, System: sysNoMove, Baseline: true, Skipped: skip})
		}
		return rows
	}
	switch w {
	case WorkloadReshardSmall:
		return []Row{r.reshardSmall(ctx)}
	case WorkloadReshardTwoSources:
		return r.reshardTwoSources(ctx)
	case WorkloadReshardBulk:
		return r.reshardBulk(ctx)
	case WorkloadReshardBulkForeground:
		return r.reshardBulkForeground(ctx)
	case WorkloadReshardSparse:
		return r.reshardSparse(ctx)
	default:
		return append(r.reshardForeground(ctx, false), r.reshardForeground(ctx, true)...)
	}
}

// reshardEnv is one resharding row's cluster and database.
type reshardEnv struct {
	r    *run
	rf   int // the database's replication factor
	c    *benchCluster
	hc   *http.Client
	db   string
	base string // node A
}

// newReshardEnv starts a cluster in its own directory and creates the
// database: 3 shards, replication factor rf.
func (r *run) newReshardEnv(ctx context.Context, name string, clients, rf int) (*reshardEnv, error) {
	hc := newHTTPClient(clients)
	start := time.Now()
	c, err := startCluster(ctx, hc, filepath.Join(r.root, name), r.o.Binary, r.o.Logger)
	if err != nil {
		hc.CloseIdleConnections()
		return nil, err
	}
	e := &reshardEnv{r: r, rf: rf, c: c, hc: hc, db: "reshard", base: c.urls[0]}
	body := fmt.Appendf(nil, `{"Shards":%d,"ReplicationFactor":%d}`, reshardShards, rf)
	if err := sendJSON(ctx, hc, http.MethodPut, e.base+"/admin/databases/"+e.db, body, http.StatusCreated, nil); err != nil {
		e.close()
		return nil, fmt.Errorf("create database: %w", err)
	}
	r.logf("%-12s started a %d-node cluster in %.1fs", name, reshardNodes, time.Since(start).Seconds())
	return e, nil
}

func (e *reshardEnv) close() {
	e.hc.CloseIdleConnections()
	if err := e.c.close(); err != nil {
		e.r.logf("close resharding cluster: %v", err)
	}
}

func (e *reshardEnv) dbURL() string { return e.base + "/databases/" + e.db }

// pickTenants returns n tenant ids prefix+i with distinct buckets that the
// even split gives to shard, ascending by bucket, each checked against the
// node's GET /sharding/bucket.
func (e *reshardEnv) pickTenants(ctx context.Context, prefix string, n int, shard int) ([]string, []uint32, error) {
	ranges := bucket.EvenSplit(reshardShards)
	seen := map[uint32]bool{}
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := prefix + strconv.Itoa(i)
		b := bucket.ForID(id)
		if ranges.ShardOf(b) != shard || seen[b] {
			continue
		}
		seen[b] = true
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return int(bucket.ForID(a)) - int(bucket.ForID(b)) })
	buckets := make([]uint32, n)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for w := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n && errs[w] == nil; i += len(errs) {
				var got struct {
					Bucket uint32
					Shard  int
				}
				if err := getJSON(ctx, e.hc, e.dbURL()+"/sharding/bucket?id="+url.QueryEscape(ids[i]), &got); err != nil {
					errs[w] = err
					break
				}
				if got.Shard != shard || got.Bucket != bucket.ForID(ids[i]) {
					errs[w] = fmt.Errorf("tenant %s: node says bucket %d on shard %d, want bucket %d on shard %d", ids[i], got.Bucket, got.Shard, bucket.ForID(ids[i]), shard)
					break
				}
				buckets[i] = got.Bucket
			}
		}()
	}
	wg.Wait()
	return ids, buckets, errors.Join(errs...)
}

// load stores count documents through bulk_docs, batch per request, from
// senders concurrent senders, each request acknowledged by both replicas
// of its shard. doc(i, buf) appends document i's body to buf and returns
// its id.
func (e *reshardEnv) load(ctx context.Context, count, batch, senders int, doc func(i int, buf []byte) (string, []byte)) (time.Duration, error) {
	start := time.Now()
	var next int
	var mu sync.Mutex
	errs := make([]error, senders)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body, doc1 []byte
			for {
				mu.Lock()
				from := next
				next += batch
				mu.Unlock()
				if from >= count || ctx.Err() != nil {
					return
				}
				body = append(body[:0], `{"Commands":[`...)
				for i := from; i < min(from+batch, count); i++ {
					if i > from {
						body = append(body, ',')
					}
					var id string
					id, doc1 = doc(i, doc1[:0])
					qid, _ := json.Marshal(id)
					body = append(body, `{"Type":"PUT","Id":`...)
					body = append(body, qid...)
					body = append(body, `,"Document":`...)
					body = append(body, doc1...)
					body = append(body, '}')
				}
				body = append(body, "]}"...)
				err := sendJSON(ctx, e.hc, http.MethodPost, e.dbURL()+"/bulk_docs?waitForReplicas="+strconv.Itoa(e.rf), body, http.StatusCreated, nil)
				if err != nil {
					errs[s] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// events runs a no-op operation (so the stream has something to send at
// once and its headers arrive) and opens the database's event stream.
func (e *reshardEnv) events(ctx context.Context, onStep func(migrationStep)) (*eventStream, error) {
	// Bucket 1,048,575 is shard 2's already: this operation completes as
	// it starts and moves nothing.
	body := fmt.Appendf(nil, `{"FromBucket":%d,"ToBucket":%d,"ToShard":%d}`, bucket.MaxID, bucket.MaxID, reshardShards-1)
	if err := sendJSON(ctx, e.hc, http.MethodPost, e.dbURL()+"/resharding", body, http.StatusAccepted, nil); err != nil {
		return nil, fmt.Errorf("no-op operation: %w", err)
	}
	return openEvents(ctx, e.hc, e.dbURL()+"/events", onStep)
}

// startMove starts moving buckets [from, to] to shard and returns the
// operation id and when the request was sent.
func (e *reshardEnv) startMove(ctx context.Context, from, to uint32, shard int) (string, time.Time, error) {
	start := time.Now()
	var got struct {
		OperationID string `json:"OperationId"`
	}
	body := fmt.Appendf(nil, `{"FromBucket":%d,"ToBucket":%d,"ToShard":%d}`, from, to, shard)
	if err := sendJSON(ctx, e.hc, http.MethodPost, e.dbURL()+"/resharding", body, http.StatusAccepted, &got); err != nil {
		return "", start, fmt.Errorf("start resharding: %w", err)
	}
	return got.OperationID, start, nil
}

// waitMove waits until operation id is no longer running (the event
// stream says so; a GET every 2 s backs it up) and returns its final
// state and when the end was seen.
func (e *reshardEnv) waitMove(ctx context.Context, es *eventStream, id string) (operationState, time.Time, error) {
	fin := es.finished(id)
	poll := time.NewTicker(2 * time.Second)
	defer poll.Stop()
	timeout := time.NewTimer(reshardMoveTimeout)
	defer timeout.Stop()
	var op operationState
	for done := false; !done; {
		select {
		case <-fin:
			done = true
		case <-poll.C:
			if err := getJSON(ctx, e.hc, e.dbURL()+"/resharding/"+id, &op); err == nil && op.Status != "Running" {
				done = true
			}
		case <-timeout.C:
			return op, time.Now(), fmt.Errorf("operation %s still %s after %s: %d of %d buckets done, errors %v", id, op.Status, reshardMoveTimeout, op.BucketsDone, op.BucketsTotal, op.Errors)
		case <-ctx.Done():
			return op, time.Now(), ctx.Err()
		}
	}
	end := time.Now()
	if err := getJSON(ctx, e.hc, e.dbURL()+"/resharding/"+id, &op); err != nil {
		return op, end, err
	}
	if op.Status != "Completed" {
		return op, end, fmt.Errorf("operation %s ended %s: errors %v", id, op.Status, op.Errors)
	}
	return op, end, nil
}

// reroutes fills the server-measured flip pause from every node's
// database statistics.
func (e *reshardEnv) reroutes(ctx context.Context, f *ReshardFigures) error {
	for _, u := range e.c.urls {
		var st struct {
			Reroutes struct {
				WritesRerouted                     uint64
				DelayP50Ms, DelayP99Ms, DelayMaxMs float64
			}
			ArrivalHolds struct {
				WritesHeld                         uint64
				DelayP50Ms, DelayP99Ms, DelayMaxMs float64
			}
			LastPasses struct {
				Passes                             uint64
				TotalP50Ms, TotalP99Ms, TotalMaxMs float64
				FencePeersP50Ms, FencePeersP99Ms   float64
				FenceWritesP50Ms, FenceWritesP99Ms float64
				SendP50Ms, SendP99Ms               float64
			}
		}
		if err := getJSON(ctx, e.hc, u+"/databases/"+e.db+"/stats", &st); err != nil {
			return fmt.Errorf("reroute figures of %s: %w", u, err)
		}
		r := st.Reroutes
		f.Rerouted += r.WritesRerouted
		f.ReroutedP50Ms = max(f.ReroutedP50Ms, r.DelayP50Ms)
		f.ReroutedP99Ms = max(f.ReroutedP99Ms, r.DelayP99Ms)
		f.ReroutedMaxMs = max(f.ReroutedMaxMs, r.DelayMaxMs)
		h := st.ArrivalHolds
		f.Held += h.WritesHeld
		f.HeldP50Ms = max(f.HeldP50Ms, h.DelayP50Ms)
		f.HeldP99Ms = max(f.HeldP99Ms, h.DelayP99Ms)
		f.HeldMaxMs = max(f.HeldMaxMs, h.DelayMaxMs)
		p := st.LastPasses
		f.LastPasses += p.Passes
		f.LastPassP50Ms = max(f.LastPassP50Ms, p.TotalP50Ms)
		f.LastPassP99Ms = max(f.LastPassP99Ms, p.TotalP99Ms)
		f.PeerFenceP50Ms = max(f.PeerFenceP50Ms, p.FencePeersP50Ms)
		f.PeerFenceP99Ms = max(f.PeerFenceP99Ms, p.FencePeersP99Ms)
		f.OwnFenceP50Ms = max(f.OwnFenceP50Ms, p.FenceWritesP50Ms)
		f.OwnFenceP99Ms = max(f.OwnFenceP99Ms, p.FenceWritesP99Ms)
		f.PassSendP50Ms = max(f.PassSendP50Ms, p.SendP50Ms)
		f.PassSendP99Ms = max(f.PassSendP99Ms, p.SendP99Ms)
	}
	return nil
}

// waitClean waits until the record lists no bucket migration (every
// cleanup done, no documents-migrator leftovers).
func (e *reshardEnv) waitClean(ctx context.Context) error {
	return waitUntil(ctx, 2*time.Minute, func() error {
		var rec struct {
			Sharding struct {
				BucketMigrations map[string]json.RawMessage
			}
		}
		if err := getJSON(ctx, e.hc, e.base+"/admin/databases/"+e.db, &rec); err != nil {
			return err
		}
		if n := len(rec.Sharding.BucketMigrations); n > 0 {
			return fmt.Errorf("%d bucket migrations left in the record", n)
		}
		return nil
	})
}

// breakdown fills the figures' per-phase medians from the migrations of
// one or more operations, each operation's in start order.
func (f *ReshardFigures) breakdown(ops ...[]migrationTiming) {
	var send, confirm, gap []time.Duration
	for _, ts := range ops {
		for i, t := range ts {
			if s, c, ok := t.phases(); ok {
				send = append(send, s)
				confirm = append(confirm, c)
			}
			if i > 0 && t.FirstStep == stepMoving && !ts[i-1].Flip.IsZero() && t.Start.After(ts[i-1].Flip) {
				gap = append(gap, t.Start.Sub(ts[i-1].Flip))
			}
		}
	}
	f.SendP50Ms, _, _ = durationsMs(send)
	f.ConfirmP50Ms, _, _ = durationsMs(confirm)
	f.GapP50Ms, _, _ = durationsMs(gap)
}

// cpuTime is the user and system CPU time so far of this process and of
// the cluster's node processes (when they are children): the cores the
// nodes and their load used.
func (e *reshardEnv) cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	t := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	for _, p := range e.c.procs {
		t += procCPU(p.pid())
	}
	return t
}

// procCPU is the user and system CPU time so far of process pid, from
// /proc/<pid>/stat (0 when it cannot be read). Linux counts it in ticks
// of USER_HZ, which is 100 on every architecture Go supports there.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(procDir(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')') // the command name may hold spaces
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:])) // from field 3 (state) on
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * (time.Second / 100)
}

// kind names the cluster's arrangement in the rows' notes.
func (e *reshardEnv) kind() string {
	if len(e.c.procs) > 0 {
		return "cluster of node processes"
	}
	return "in-process cluster"
}

// cores is CPU time over wall time.
func cores(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return cpu.Seconds() / wall.Seconds()
}

// spanOf returns the smallest range covering buckets (sorted).
func spanOf(buckets []uint32) (uint32, uint32) { return buckets[0], buckets[len(buckets)-1] }

// smallDoc appends small document i of tenant (a ~1 KiB YCSB record) to
// buf and returns its anchored id.
// smallBucketsEnv starts a cluster and loads n buckets of shard 0 (tenants
// named prefix+i) with reshardDocsPerBkt small documents each.
func (r *run) smallBucketsEnv(ctx context.Context, w string, clients int, prefix string, n int) (*reshardEnv, []string, []uint32, time.Duration, error) {
	e, err := r.newReshardEnv(ctx, w, clients, reshardRF)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	tenants, buckets, err := e.pickTenants(ctx, prefix, n, 0)
	if err != nil {
		e.close()
		return nil, nil, nil, 0, err
	}
	seed := r.nextSeed()
	loadTime, err := e.load(ctx, n*reshardDocsPerBkt, 1000, r.o.Senders, func(i int, buf []byte) (string, []byte) {
		return smallDoc(seed, tenants, i, buf)
	})
	if err != nil {
		e.close()
		return nil, nil, nil, 0, fmt.Errorf("load: %w", err)
	}
	return e, tenants, buckets, loadTime, nil
}

func smallDoc(seed uint64, tenants []string, i int, buf []byte) (string, []byte) {
	t := tenants[i/reshardDocsPerBkt]
	id := "d" + strconv.Itoa(i%reshardDocsPerBkt) + "$" + t
	return id, appendRecord(buf, newRand(seed, i), int64(i), true)
}

// durationsMs sorts ds and returns its p50, p99 and maximum in ms.
func durationsMs(ds []time.Duration) (p50, p99, maxv float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return ms(percentile(ds, 50)), ms(percentile(ds, 99)), ms(ds[len(ds)-1])
}

// reshardSmall is reshard-small-buckets: the fixed cost of moving a small
// bucket.
func (r *run) reshardSmall(ctx context.Context) Row {
	w := WorkloadReshardSmall
	fail := func(err error) Row {
		r.logf("%-12s %v", w, err)
		return makeRow(w, sysShardnode, "buckets/s", nil, err, "")
	}
	n := int(r.o.ReshardBuckets)
	e, _, buckets, loadTime, err := r.smallBucketsEnv(ctx, w, 16, "t/", n)
	if err != nil {
		return fail(err)
	}
	defer e.close()
	r.logf("%-12s loaded %d buckets × %d docs in %.1fs", w, n, reshardDocsPerBkt, loadTime.Seconds())
	es, err := e.events(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer es.close()
	m, err := e.moveSets(ctx, es, buckets)
	if err != nil {
		return fail(err)
	}
	fig := m.fig
	fig.LoadSeconds = loadTime.Seconds()
	row := m.row(w, sysShardnode)
	if fig.Timed == 0 {
		row.Error = "the event stream timed no migration"
	}
	row.Note = fmt.Sprintf("%d non-empty buckets of %d ~1 KiB docs (+%d empty buckets flipped in bulk) moved shard 0→2 in one operation: %.1f s total, %.1f ms per non-empty bucket; p50/p99 per bucket = Moving→OwnershipTransferred on the event stream (%d timed, %d coalesced, max %.0f ms), medians Moving→Moved %.1f ms, Moved→OwnershipTransferred %.1f ms, flip→next Moving %.1f ms; process CPU %.2f cores; %d-node %s, RF %d",
		n, reshardDocsPerBkt, fig.EmptyBuckets, fig.TotalSeconds, fig.MsPerBucket, fig.Timed, fig.Coalesced, fig.BucketMaxMs,
		fig.SendP50Ms, fig.ConfirmP50Ms, fig.GapP50Ms, fig.CPUCores, reshardNodes, e.kind(), reshardRF)
	if m.migrations != n {
		row.Note += fmt.Sprintf("; WARNING: the operation ran %d migrations for %d non-empty buckets", m.migrations, n)
	}
	r.logf("%-12s %d buckets: %.1f s, %.1f ms/bucket, per bucket p50 %.1f ms p99 %.1f ms", w, n, fig.TotalSeconds, fig.MsPerBucket, fig.BucketP50Ms, fig.BucketP99Ms)
	return row
}

// bulkDoc appends bulk document i (bulkDocBytes of JSON) to buf.
func bulkDoc(seed uint64, i int, buf []byte) []byte {
	buf = append(buf, `{"@metadata":{"@collection":"blobs"},"N":`...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, `,"Data":"`...)
	buf = appendRandom(buf, newRand(seed, i), max(0, bulkDocBytes-len(buf)-2))
	return append(buf, `"}`...)
}

// bulkID is bulk document i's id, anchored on the bucket's tenant;
// zero-padded, so ids ascend with i.
func bulkID(i int) string { return fmt.Sprintf("d%08d$big/1", i) }

// reshardBulk is reshard-bulk-transfer: one large bucket's transfer rate
// beside a raw Pebble copy of the same data.
func (r *run) reshardBulk(ctx context.Context) []Row {
	w := WorkloadReshardBulk
	docs := int(math.Ceil(float64(r.o.ReshardBulkMB) * 1e6 / bulkDocBytes))
	seed := r.nextSeed()
	sn := r.reshardBulkNode(ctx, docs, seed, reshardRF)
	sn1 := r.reshardBulkNode(ctx, docs, seed, 1)
	var s sample
	res, err := rawPebbleCopy(filepath.Join(r.root, "reshard-pebble"), docs, func(i int, buf []byte) ([]byte, []byte) {
		return []byte(bulkID(i)), bulkDoc(seed, i, buf)
	})
	if err == nil {
		s.addRound(res)
		r.logf("%-12s %-10s copied %d docs: %.1f MB/s", w, sysPebble, docs, res.bytesPerSec()/1e6)
	}
	pb := makeRow(w, sysPebble, "docs/s", &s, err, "")
	pb.Note = fmt.Sprintf("raw Pebble copy of the same %d values of %d B: written in key order to an instance with storage's tuned options and flushed, then read back in order and written to a second instance in batches of %d (≤ %d MiB), the last synced; MB/s of keys and values; sn/base compares docs/s",
		docs, bulkDocBytes, copyBatchItems, copyBatchBytes>>20)
	if sn1.Measured() && pb.Measured() {
		sn1.Note += fmt.Sprintf("; %.2f of the raw copy's docs/s (like for like: one copy written)", opsRatio(sn1, pb))
	}
	return []Row{sn, sn1, pb}
}

// bulkBucket is where the bulk bucket lives before it moves.
type bulkBucket struct {
	Bucket uint32
	Shard  int
}

// loadBulkBucket loads docs bulk documents into the bucket of bulkID's
// anchor, and says which bucket and shard that is.
func (e *reshardEnv) loadBulkBucket(ctx context.Context, docs, senders int, seed uint64) (bulkBucket, time.Duration, error) {
	var where bulkBucket
	if err := getJSON(ctx, e.hc, e.dbURL()+"/sharding/bucket?id="+url.QueryEscape("big/1"), &where); err != nil {
		return where, 0, err
	}
	took, err := e.load(ctx, docs, 250, senders, func(i int, buf []byte) (string, []byte) {
		return bulkID(i), bulkDoc(seed, i, buf)
	})
	if err != nil {
		return where, 0, fmt.Errorf("load: %w", err)
	}
	return where, took, nil
}

// reshardBulkNode loads and moves the bulk bucket on a cluster, in a
// database of replication factor rf.
func (r *run) reshardBulkNode(ctx context.Context, docs int, seed uint64, rf int) Row {
	w := WorkloadReshardBulk
	sys := sysShardnode
	if rf == 1 {
		sys = sysShardnodeRF1
	}
	fail := func(err error) Row {
		r.logf("%-12s %v", w, err)
		return makeRow(w, sys, "docs/s", nil, err, "")
	}
	e, err := r.newReshardEnv(ctx, w+"-rf"+strconv.Itoa(rf), 16, rf)
	if err != nil {
		return fail(err)
	}
	defer e.close()
	where, loadTime, err := e.loadBulkBucket(ctx, docs, r.o.Senders, seed)
	if err != nil {
		return fail(err)
	}
	r.logf("%-12s loaded %d docs of %d B into bucket %d in %.1fs", w, docs, bulkDocBytes, where.Bucket, loadTime.Seconds())
	es, err := e.events(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer es.close()
	dst := (where.Shard + 1) % reshardShards
	cpu0 := e.cpuTime()
	id, start, err := e.startMove(ctx, where.Bucket, where.Bucket, dst)
	if err != nil {
		return fail(err)
	}
	op, end, err := e.waitMove(ctx, es, id)
	if err != nil {
		return fail(err)
	}
	cpu := e.cpuTime() - cpu0
	if err := e.waitClean(ctx); err != nil {
		return fail(err)
	}
	var transfer, send, confirm time.Duration
	ts := timings(es.migrationSteps(), id)
	for _, t := range ts {
		if t.Bucket == where.Bucket {
			transfer, _ = t.transfer()
			send, confirm, _ = t.phases()
		}
	}
	if transfer <= 0 {
		return fail(fmt.Errorf("the event stream did not time the move (%d migrations seen)", len(ts)))
	}
	var s sample
	s.addRound(roundResult{ops: op.DocumentsMoved, units: op.DocumentsMoved, bytes: op.BytesMoved, elapsed: transfer})
	row := makeRow(w, sys, "docs/s", &s, nil, "")
	row.Reshard = &ReshardFigures{Buckets: 1, TransferSeconds: transfer.Seconds(), SendSeconds: send.Seconds(), ConfirmSeconds: confirm.Seconds(),
		TotalSeconds: end.Sub(start).Seconds(), DocumentsMoved: op.DocumentsMoved, BytesMoved: op.BytesMoved, LoadSeconds: loadTime.Seconds(),
		CPUCores: cores(cpu, end.Sub(start))}
	row.Note = fmt.Sprintf("one bucket of %d docs of %d B (%.0f MB) moved shard %d→%d: %.0f MB BytesMoved (bodies, ids, change vectors + 64 B each) in %.2f s Moving→OwnershipTransferred (Moving→Moved %.2f s, Moved→OwnershipTransferred %.2f s; %.2f s POST→Completed); every destination replica confirms; process CPU %.2f cores; %d-node %s, RF %d",
		docs, bulkDocBytes, float64(docs)*bulkDocBytes/1e6, where.Shard, dst, float64(op.BytesMoved)/1e6, transfer.Seconds(),
		send.Seconds(), confirm.Seconds(), end.Sub(start).Seconds(), row.Reshard.CPUCores, reshardNodes, e.kind(), rf)
	if op.DocumentsMoved != int64(docs) {
		row.Note += fmt.Sprintf("; WARNING: DocumentsMoved %d, loaded %d", op.DocumentsMoved, docs)
	}
	r.logf("%-12s %-10s moved %d docs (%.0f MB) in %.2fs: %.1f MB/s", w, sys, op.DocumentsMoved, float64(op.BytesMoved)/1e6, transfer.Seconds(), row.MBPerSec)
	return row
}

// reshardBulkForeground measures what moving one large bucket (the bulk
// transfer's) costs a closed-loop write load elsewhere in the database:
// the load alone, then during the move unpaced, then during the move back
// with every node's move bandwidth at ReshardSendLimit. Its rows are the
// two moves, each beside the load alone.
func (r *run) reshardBulkForeground(ctx context.Context) []Row {
	w := WorkloadReshardBulkForeground
	fail := func(err error) []Row {
		r.logf("%-12s %v", w, err)
		return []Row{makeRow(w, sysShardnode, "ops/s", nil, err, ""), makeRow(w, sysNoMove, "ops/s", nil, err, ""),
			makeRow(rowReshardBulkPaced, sysShardnode, "ops/s", nil, err, ""), makeRow(rowReshardBulkPaced, sysNoMove, "ops/s", nil, err, "")}
	}
	docs := int(math.Ceil(float64(r.o.ReshardBulkMB) * 1e6 / bulkDocBytes))
	seed := r.nextSeed()
	clients := r.o.ReshardClients
	e, err := r.newReshardEnv(ctx, w, clients+8, reshardRF)
	if err != nil {
		return fail(err)
	}
	defer e.close()
	where, _, err := e.loadBulkBucket(ctx, docs, r.o.Senders, seed)
	if err != nil {
		return fail(err)
	}
	es, err := e.events(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer es.close()
	// Every writer inserts new documents outside the moving bucket.
	phase := func(stop <-chan struct{}) fgResult {
		return e.foreground(ctx, clients, 0, seed, where.Bucket, where.Bucket, nil, 0, stop)
	}
	dur := time.Duration(r.o.ReshardForegroundSeconds * float64(time.Second))
	stop := make(chan struct{})
	time.AfterFunc(dur, func() { close(stop) })
	idle := phase(stop)
	if idle.err != nil {
		return fail(fmt.Errorf("foreground load without a move: %d errors, first: %w", idle.errors, idle.err))
	}
	r.logf("%-12s %-10s %d writes in %.1fs", w, sysNoMove, len(idle.writes), idle.elapsed.Seconds())
	move := func(to int, limit int64) (fgResult, operationState, time.Duration, error) {
		for _, u := range e.c.urls {
			body := []byte(fmt.Sprintf(`{"BytesPerSecond":%d}`, limit))
			if err := do(ctx, e.hc, http.MethodPut, u+"/admin/resharding/send-limit", body, http.StatusOK, &bytes.Buffer{}); err != nil {
				return fgResult{}, operationState{}, 0, fmt.Errorf("set the move bandwidth: %w", err)
			}
		}
		stop := make(chan struct{})
		busyc := make(chan fgResult, 1)
		go func() { busyc <- phase(stop) }()
		id, start, err := e.startMove(ctx, where.Bucket, where.Bucket, to)
		var op operationState
		var end time.Time
		if err == nil {
			op, end, err = e.waitMove(ctx, es, id)
		}
		close(stop)
		busy := <-busyc
		if err == nil && busy.err != nil {
			err = fmt.Errorf("foreground load during the move: %d errors, first: %w", busy.errors, busy.err)
		}
		if err == nil {
			err = e.waitClean(ctx)
		}
		return busy, op, end.Sub(start), err
	}
	dst := (where.Shard + 1) % reshardShards
	unpaced, op1, took1, err := move(dst, 0)
	if err != nil {
		return fail(err)
	}
	r.logf("%-12s %-10s %d writes in %.1fs during the unpaced move (%.1f s)", w, sysShardnode, len(unpaced.writes), unpaced.elapsed.Seconds(), took1.Seconds())
	paced, op2, took2, err := move(where.Shard, r.o.ReshardSendLimit)
	if err != nil {
		return fail(err)
	}
	r.logf("%-12s %-10s %d writes in %.1fs during the move back at %d B/s (%.1f s)", w, sysShardnode, len(paced.writes), paced.elapsed.Seconds(), r.o.ReshardSendLimit, took2.Seconds())
	rows := []Row{unpaced.row(w, sysShardnode), idle.row(w, sysNoMove), paced.row(rowReshardBulkPaced, sysShardnode), idle.row(rowReshardBulkPaced, sysNoMove)}
	for i, m := range []struct {
		op    operationState
		took  time.Duration
		limit string
	}{{op1, took1, "unpaced"}, {op2, took2, fmt.Sprintf("paced at %.1f MiB/s (resharding.max-send-bytes-per-sec on every node)", float64(r.o.ReshardSendLimit)/(1<<20))}} {
		rows[2*i].Note = fmt.Sprintf("%d clients' durable PUTs of ~1 KiB into other buckets while one bucket of %d docs (%.0f MB moved) moves between shards, %s: %.1f s, %.1f MB/s; %d-node %s, RF %d",
			clients, docs, float64(m.op.BytesMoved)/1e6, m.limit, m.took.Seconds(), float64(m.op.BytesMoved)/1e6/m.took.Seconds(), reshardNodes, e.kind(), reshardRF)
		rows[2*i+1].Note = fmt.Sprintf("the same load on the same cluster for %.0f s before the moves; sn/base = during the move / without", dur.Seconds())
	}
	return rows
}

// fgWrite is one foreground write.
type fgWrite struct {
	start, end time.Time
	bucket     uint32
	client     int
	moving     bool // into one of the moving buckets
}

// migKey names one migration.
type migKey struct {
	bucket uint32
	index  uint64
}

// flipSpans returns, per migration of operation op, the first and the last
// arrival of its OwnershipTransferred event over the streams (one per
// node): the span in which the nodes disagree on the bucket's owner.
func flipSpans(streams []*eventStream, op string) map[migKey][2]time.Time {
	out := map[migKey][2]time.Time{}
	for _, es := range streams {
		for _, t := range timings(es.migrationSteps(), op) {
			if t.Flip.IsZero() {
				continue
			}
			k := migKey{t.Bucket, t.Index}
			sp, ok := out[k]
			if !ok {
				sp = [2]time.Time{t.Flip, t.Flip}
			}
			if t.Flip.Before(sp[0]) {
				sp[0] = t.Flip
			}
			if t.Flip.After(sp[1]) {
				sp[1] = t.Flip
			}
			out[k] = sp
		}
	}
	return out
}

// atFlip fills the flip pause figures: per flip, the longest write into
// the flipping bucket in flight during its span (±flipSlack), and the
// longest write of the control writers (clients [movers, 2*movers), which
// write outside the moving range) in the same span; and, for the noise
// floor, the longest write of the next as many writers.
func (f *ReshardFigures) atFlip(writes []fgWrite, spans map[migKey][2]time.Time, starts map[migKey]time.Time, movers int) {
	var at, control, excess, noise, span, mid []time.Duration
	for k, sp := range spans {
		lo, hi := sp[0].Add(-flipSlack), sp[1].Add(flipSlack)
		if st, ok := starts[k]; ok && st.Before(sp[0]) {
			c := st.Add(sp[0].Sub(st) / 2)
			half := hi.Sub(lo) / 2
			if l := longestIn(writes, k.bucket, movers, c.Add(-half), c.Add(half)); l.seen[0] && l.seen[1] {
				mid = append(mid, l.d[0]-l.d[1])
			}
		}
		l := longestIn(writes, k.bucket, movers, lo, hi)
		if !l.seen[0] || !l.seen[1] {
			continue
		}
		flip, ctl := l.d[0], l.d[1]
		if l.seen[2] {
			noise = append(noise, l.d[2]-ctl)
		}
		at = append(at, flip)
		control = append(control, ctl)
		excess = append(excess, flip-ctl)
		span = append(span, sp[1].Sub(sp[0]))
	}
	f.FlipsMeasured = len(at)
	f.AtFlipP50Ms, f.AtFlipP99Ms, f.AtFlipMaxMs = durationsMs(at)
	f.ControlP50Ms, f.ControlP99Ms, _ = durationsMs(control)
	f.FlipExcessP50Ms, f.FlipExcessP99Ms, f.FlipExcessMaxMs = durationsMs(excess)
	f.FlipSpanP50Ms, f.FlipSpanP99Ms, _ = durationsMs(span)
	f.NoiseP50Ms, f.NoiseP99Ms, _ = durationsMs(noise)
	f.MidMoveExcessP50Ms, f.MidMoveExcessP99Ms, _ = durationsMs(mid)
}

// longest holds, for one span, the longest write of each group of writers
// in flight in it: [0] into the flipping bucket, [1] of the control writers
// (clients [movers, 2*movers)), [2] of the next as many (the noise floor);
// seen says which groups had one.
type longest struct {
	d    [3]time.Duration
	seen [3]bool
}

// longestIn returns the longest writes of each group in flight in [lo, hi)
// (writes sorted by start).
func longestIn(writes []fgWrite, b uint32, movers int, lo, hi time.Time) longest {
	var l longest
	for _, wr := range writes {
		if !wr.start.Before(hi) {
			break // sorted by start
		}
		if !wr.end.After(lo) {
			continue
		}
		g := -1
		switch {
		case wr.moving && wr.bucket == b:
			g = 0
		case !wr.moving && wr.client >= movers && wr.client < 2*movers:
			g = 1
		case !wr.moving && wr.client >= 2*movers && wr.client < 3*movers:
			g = 2
		}
		if g >= 0 {
			l.seen[g] = true
			l.d[g] = max(l.d[g], wr.end.Sub(wr.start))
		}
	}
	return l
}

// fgResult is one phase of the foreground load.
type fgResult struct {
	writes  []fgWrite
	elapsed time.Duration
	errors  int64
	err     error // the first error
}

// reshardForeground is reshard-foreground: a write load with and without a
// move of small buckets, and the write pause at each ownership flip.
//
// The load is closed-loop, which keeps the 2-core machine saturated, so
// every write waits in queues and a flip's extra round trip is lost in
// them. With open set it runs on a cluster of its own as an open-loop load
// at openLoopShare of the rate the closed-loop writers reached there
// (measured first), as latency targets are usually stated: then a write is
// slow only for what the move and the flip add to it.
func (r *run) reshardForeground(ctx context.Context, open bool) []Row {
	w := WorkloadReshardForeground
	if open {
		w = rowReshardOpenLoop
	}
	fail := func(err error) []Row {
		r.logf("%-12s %v", w, err)
		return []Row{makeRow(w, sysShardnode, "ops/s", nil, err, ""), makeRow(w, sysNoMove, "ops/s", nil, err, "")}
	}
	n := int(r.o.ReshardForegroundBuckets)
	clients := r.o.ReshardClients
	movers := max(1, clients/4)
	e, tenants, buckets, loadTime, err := r.smallBucketsEnv(ctx, w, clients+8, "f/", n)
	if err != nil {
		return fail(err)
	}
	defer e.close()
	seed := r.nextSeed() // the foreground writers' payloads
	from, to := spanOf(buckets)
	tenantOf := map[uint32]string{}
	for i, b := range buckets {
		tenantOf[b] = tenants[i]
	}
	// The movers write into the bucket migrating now, as the event stream
	// tells, and keep writing into it until the next one starts: so every
	// flip has writes in flight around it.
	var cur sync.Mutex
	current := ""
	es, err := e.events(ctx, func(s migrationStep) {
		if t, ok := tenantOf[s.Bucket]; ok && s.Step == stepMoving {
			cur.Lock()
			current = t
			cur.Unlock()
		}
	})
	if err != nil {
		return fail(err)
	}
	defer es.close()
	// Every node's stream, to time each flip from the first node applying
	// it to the last.
	streams := []*eventStream{es}
	for _, u := range e.c.urls[1:] {
		other, err := openEvents(ctx, e.hc, u+"/databases/"+e.db+"/events", nil)
		if err != nil {
			return fail(err)
		}
		defer other.close()
		streams = append(streams, other)
	}
	pick := func(rnd func(int) int) string {
		cur.Lock()
		t := current
		cur.Unlock()
		if t == "" {
			t = tenants[rnd(len(tenants))]
		}
		return t
	}
	var every time.Duration // 0: closed loop
	phase := func(stop <-chan struct{}) fgResult {
		return e.foreground(ctx, clients, movers, seed, from, to, pick, every, stop)
	}
	dur := time.Duration(r.o.ReshardForegroundSeconds * float64(time.Second))
	loadNote := "closed-loop"
	if open {
		stop := make(chan struct{})
		time.AfterFunc(dur/2, func() { close(stop) })
		capacity := phase(stop)
		if capacity.err != nil || len(capacity.writes) == 0 {
			return fail(fmt.Errorf("closed-loop capacity before the open-loop load: %d writes, %d errors, first: %v", len(capacity.writes), capacity.errors, capacity.err))
		}
		rate := float64(len(capacity.writes)) / capacity.elapsed.Seconds()
		offered := rate * openLoopShare
		every = time.Duration(float64(clients) / offered * float64(time.Second))
		loadNote = fmt.Sprintf("open-loop at %.0f writes/s, %.0f%% of the %.0f/s the same clients reached closed-loop without a move; latency from when each write was due", offered, 100*openLoopShare, rate)
		r.logf("%-12s closed-loop capacity %.0f writes/s; open loop at %.0f/s", w, rate, offered)
	}
	stop := make(chan struct{})
	time.AfterFunc(dur, func() { close(stop) })
	idle := phase(stop)
	if idle.err != nil {
		return fail(fmt.Errorf("foreground load without a move: %d errors, first: %w", idle.errors, idle.err))
	}
	r.logf("%-12s %-10s %d writes in %.1fs", w, sysNoMove, len(idle.writes), idle.elapsed.Seconds())

	stop = make(chan struct{})
	busyc := make(chan fgResult, 1)
	go func() { busyc <- phase(stop) }()
	cpu0 := e.cpuTime()
	id, start, err := e.startMove(ctx, from, to, 2)
	var op operationState
	var end time.Time
	if err == nil {
		op, end, err = e.waitMove(ctx, es, id)
	}
	close(stop)
	cpu := e.cpuTime() - cpu0
	busy := <-busyc
	if err != nil {
		return fail(err)
	}
	if busy.err != nil {
		return fail(fmt.Errorf("foreground load during the move: %d errors, first: %w", busy.errors, busy.err))
	}
	if err := e.waitClean(ctx); err != nil {
		return fail(err)
	}
	fig := &ReshardFigures{Buckets: int64(n), EmptyBuckets: op.BucketsTotal - int64(n), TotalSeconds: end.Sub(start).Seconds(),
		MsPerBucket: ms(end.Sub(start)) / float64(n), DocumentsMoved: op.DocumentsMoved, BytesMoved: op.BytesMoved, LoadSeconds: loadTime.Seconds(),
		CPUCores: cores(cpu, end.Sub(start))}
	if err := e.reroutes(ctx, fig); err != nil {
		return fail(err)
	}
	// The write pause at each flip: the longest write into the flipping
	// bucket in flight within ±flipWindow of the flip's event.
	byBucket := map[uint32][]fgWrite{}
	var movingLat []time.Duration
	for _, wr := range busy.writes {
		if wr.moving {
			byBucket[wr.bucket] = append(byBucket[wr.bucket], wr)
			movingLat = append(movingLat, wr.end.Sub(wr.start))
		}
	}
	var pauses, per []time.Duration
	ts := timings(es.migrationSteps(), id)
	fig.breakdown(ts)
	for _, t := range ts {
		if d, ok := t.transfer(); ok {
			per = append(per, d)
		}
		if t.Flip.IsZero() {
			continue
		}
		fig.Flips++
		lo, hi := t.Flip.Add(-flipWindow), t.Flip.Add(flipWindow)
		var longest time.Duration
		seen := false
		for _, wr := range byBucket[t.Bucket] {
			if wr.start.Before(hi) && wr.end.After(lo) {
				seen = true
				longest = max(longest, wr.end.Sub(wr.start))
			}
		}
		if seen {
			pauses = append(pauses, longest)
		}
	}
	fig.FlipsWithWrites = len(pauses)
	fig.FlipPauseP50Ms, fig.FlipPauseP99Ms, fig.FlipPauseMaxMs = durationsMs(pauses)
	starts := map[migKey]time.Time{}
	for _, t := range ts {
		if t.FirstStep == stepMoving {
			starts[migKey{t.Bucket, t.Index}] = t.Start
		}
	}
	fig.atFlip(busy.writes, flipSpans(streams, id), starts, movers)
	fig.MovingWrites = int64(len(movingLat))
	_, fig.MovingWritesP99Ms, _ = durationsMs(movingLat)
	fig.Timed = len(per)
	fig.BucketP50Ms, fig.BucketP99Ms, fig.BucketMaxMs = durationsMs(per)

	rows := []Row{busy.row(w, sysShardnode), idle.row(w, sysNoMove)}
	rows[0].Reshard = fig
	rows[0].Note = fmt.Sprintf("%d clients' durable PUTs of ~1 KiB, %s (%d into the bucket migrating now, %d outside the moving range) during a move of %d non-empty buckets (+%d empty) shard 0→2, %.1f s (per bucket p50 %.1f ms; process CPU %.2f cores); flip pause, per flip the longest write into the flipping bucket in flight while the nodes applied the flip (first to last node's event ±%d ms, span p50 %.1f / p99 %.1f ms): p50 %.1f / p99 %.1f / max %.1f ms, against %.1f / %.1f ms for %d writers outside the moving range in the same spans, so the flip adds p50 %.1f / p99 %.1f / max %.1f ms (%d flips; the same difference between two such groups of writers, the noise floor: p50 %.1f / p99 %.1f ms; the same difference for the same bucket halfway between Moving and the flip, the move without the flip: p50 %.1f / p99 %.1f ms); old definition (longest write into the flipping bucket within ±%d ms of OwnershipTransferred) p50 %.1f / p99 %.1f / max %.1f ms over %d of %d flips; measured by the nodes (the delay a refusal after a flip added to each write until its attempt at the new owner began) p50 %.1f / p99 %.1f / max %.1f ms over %d rerouted writes, and the wait of the writes the new owner held for the source's last pass p50 %.1f / p99 %.1f / max %.1f ms over %d held writes, the senders' last passes (flip seen to pass stored) p50 %.1f / p99 %.1f ms over %d passes, of which fencing the source's other replicas p50 %.1f / p99 %.1f ms, at once its own writes in flight p50 %.1f / p99 %.1f ms, then the pass p50 %.1f / p99 %.1f ms; writes into moving buckets p99 %.1f ms; %d-node %s, RF %d",
		clients, loadNote, movers, clients-movers, n, fig.EmptyBuckets, fig.TotalSeconds, fig.BucketP50Ms, fig.CPUCores,
		flipSlack.Milliseconds(), fig.FlipSpanP50Ms, fig.FlipSpanP99Ms, fig.AtFlipP50Ms, fig.AtFlipP99Ms, fig.AtFlipMaxMs, fig.ControlP50Ms, fig.ControlP99Ms, movers,
		fig.FlipExcessP50Ms, fig.FlipExcessP99Ms, fig.FlipExcessMaxMs, fig.FlipsMeasured, fig.NoiseP50Ms, fig.NoiseP99Ms, fig.MidMoveExcessP50Ms, fig.MidMoveExcessP99Ms, flipWindow.Milliseconds(),
		fig.FlipPauseP50Ms, fig.FlipPauseP99Ms, fig.FlipPauseMaxMs, fig.FlipsWithWrites, fig.Flips, fig.ReroutedP50Ms, fig.ReroutedP99Ms, fig.ReroutedMaxMs, fig.Rerouted, fig.HeldP50Ms, fig.HeldP99Ms, fig.HeldMaxMs, fig.Held, fig.LastPassP50Ms, fig.LastPassP99Ms, fig.LastPasses, fig.PeerFenceP50Ms, fig.PeerFenceP99Ms, fig.OwnFenceP50Ms, fig.OwnFenceP99Ms, fig.PassSendP50Ms, fig.PassSendP99Ms, fig.MovingWritesP99Ms, reshardNodes, e.kind(), reshardRF)
	rows[1].Note = fmt.Sprintf("the same load on the same cluster for %.0f s before the move (movers write into random buckets of the range); sn/base = with move / without", dur.Seconds())
	if open {
		rows[1].Note += "; " + loadNote
	}
	r.logf("%-12s %-10s %d writes in %.1fs during the move; flip pause p99 %.1f ms, control %.1f ms, added p50 %.1f / p99 %.1f ms (%d flips; noise floor p50 %.1f / p99 %.1f ms; mid-move p50 %.1f / p99 %.1f ms); old definition p99 %.1f ms; measured by the nodes p50 %.1f / p99 %.1f / max %.1f ms over %d rerouted writes, held p50 %.1f / p99 %.1f / max %.1f ms over %d held writes; last passes p50 %.1f / p99 %.1f ms (%d), peer fence p50 %.1f / p99 %.1f ms, own %.1f / %.1f, pass %.1f / %.1f", w, sysShardnode, len(busy.writes), busy.elapsed.Seconds(),
		fig.AtFlipP99Ms, fig.ControlP99Ms, fig.FlipExcessP50Ms, fig.FlipExcessP99Ms, fig.FlipsMeasured, fig.NoiseP50Ms, fig.NoiseP99Ms, fig.MidMoveExcessP50Ms, fig.MidMoveExcessP99Ms, fig.FlipPauseP99Ms, fig.ReroutedP50Ms, fig.ReroutedP99Ms, fig.ReroutedMaxMs, fig.Rerouted, fig.HeldP50Ms, fig.HeldP99Ms, fig.HeldMaxMs, fig.Held, fig.LastPassP50Ms, fig.LastPassP99Ms, fig.LastPasses, fig.PeerFenceP50Ms, fig.PeerFenceP99Ms, fig.OwnFenceP50Ms, fig.OwnFenceP99Ms, fig.PassSendP50Ms, fig.PassSendP99Ms)
	return rows
}

// row is the write load's row: its throughput and the latency of every
// write.
func (f fgResult) row(workload, system string) Row {
	lat := make([]time.Duration, len(f.writes))
	for j, wr := range f.writes {
		lat[j] = wr.end.Sub(wr.start)
	}
	var s sample
	s.addRound(roundResult{ops: int64(len(lat)), elapsed: f.elapsed, lat: lat})
	return makeRow(workload, system, "ops/s", &s, nil, "")
}

// openLoopShare is the open-loop rows' offered rate, as a share of the
// closed-loop rate without a move: a move takes about half the capacity
// of this 2-core machine (the closed-loop rows' throughput ratio is
// 0.42-0.62), and at half of what is left a write queues only briefly.
// At half the idle rate the load outran the cluster during the move, and
// every write's latency grew with the backlog (p50 1 s).
const openLoopShare = 0.25

// foreground runs the write load until stop closes: clients writers spread
// over the nodes; the first movers write into pick()'s tenant bucket (64
// ids each, overwritten), the others insert new documents whose buckets
// lie outside [from, to] (anywhere when from > to). The first error is
// kept and counted, and the load goes on.
//
// With every 0 the writers are closed-loop (each sends its next write when
// the last is answered). Otherwise each sends one write every `every`, on
// a fixed schedule (open loop), and a write's latency runs from when it
// was due, so a write held up behind a slow one counts the wait too.
func (e *reshardEnv) foreground(ctx context.Context, clients, movers int, seed uint64, from, to uint32, pick func(func(int) int) string, every time.Duration, stop <-chan struct{}) fgResult {
	res := make([]fgResult, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := newRand(seed, 1000+c)
			base := e.c.urls[c%len(e.c.urls)] + "/databases/" + e.db + "/docs?id="
			var body []byte
			var buf bytes.Buffer
			out := &res[c]
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				var id string
				moving := c < movers
				if moving {
					id = "w" + strconv.Itoa(c) + "-" + strconv.Itoa(k%64) + "$" + pick(rnd.IntN)
				} else {
					for {
						id = "o" + strconv.Itoa(c) + "-" + strconv.FormatUint(rnd.Uint64()&0xffffffffff, 36)
						if b := bucket.ForID(id); b < from || b > to {
							break
						}
					}
				}
				body = appendRecord(body[:0], rnd, int64(k), true)
				t0 := time.Now()
				if every > 0 {
					// Clients start spread over one interval.
					due := start.Add(time.Duration(k)*every + every*time.Duration(c)/time.Duration(clients))
					if wait := time.Until(due); wait > 0 {
						select {
						case <-stop:
							return
						case <-time.After(wait):
						}
					}
					t0 = due
				}
				err := do(ctx, e.hc, http.MethodPut, base+url.QueryEscape(id), body, http.StatusCreated, &buf)
				t1 := time.Now()
				if err != nil {
					out.errors++
					if out.err == nil {
						out.err = err
					}
					if ctx.Err() != nil {
						return
					}
					continue
				}
				out.writes = append(out.writes, fgWrite{start: t0, end: t1, bucket: bucket.ForID(id), client: c, moving: moving})
			}
		}()
	}
	wg.Wait()
	total := fgResult{elapsed: time.Since(start)}
	for _, r := range res {
		total.writes = append(total.writes, r.writes...)
		total.errors += r.errors
		if total.err == nil {
			total.err = r.err
		}
	}
	sort.Slice(total.writes, func(i, j int) bool { return total.writes[i].start.Before(total.writes[j].start) })
	return total
}
