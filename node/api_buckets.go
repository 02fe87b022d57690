package node

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/storage"
)

// Limits of the buckets report.
const (
	defaultReportGroups = 32
	maxReportGroups     = 4096
	maxBucketDocIDs     = 10000
	maxConflicts        = 10000
)

// targetShards lists the shards a request covers.
func targetShards(t target) []int {
	if t.shard >= 0 {
		return []int{t.shard}
	}
	return t.rec.ShardNumbers()
}

// eachShard runs fn for every shard of t in parallel, each on one replica.
func (n *Node) eachShard(ctx context.Context, t target, fn func(ctx context.Context, shard int, rep shardReplica) error) error {
	return forShards(targetShards(t), func(_, sn int) error {
		return n.onShard(ctx, t, sn, true, func(ctx context.Context, rep shardReplica) error { return fn(ctx, sn, rep) })
	})
}

// forShards runs fn for every shard (i is its index in shards) at once,
// and returns the error of the first shard, in that order, that failed.
func forShards(shards []int, fn func(i, shard int) error) error {
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, sn := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i, sn)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) handleStats(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	if t.shard >= 0 {
		err := n.onShard(r.Context(), t, t.shard, true, func(ctx context.Context, rep shardReplica) error {
			st, err := rep.stats(ctx)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, map[string]any{
				"DocumentsCount": st.DocumentsCount, "TombstonesCount": st.TombstonesCount,
				"LastEtag": st.LastEtag, "ChangeVector": st.ChangeVector,
				"DatabaseId": st.DatabaseID, "Shard": t.shard, "Node": st.Node, "Replication": st.Replication,
				"GroupCommit": map[string]any{"Commits": st.Commits, "CommittedOps": st.CommittedOps, "CommitMillis": st.CommitMillis, "SyncMillis": st.SyncMillis},
				"Engine":      st.Engine,
				"DocCache":    st.DocCache,
				"Feed":        st.Feed,
			})
			return nil
		})
		if err != nil {
			writeError(w, err)
		}
		return
	}
	type shardStats struct {
		Shard           int      `json:"Shard"`
		Members         []string `json:"Members"`
		ServedBy        string   `json:"ServedBy"`
		DocumentsCount  int64    `json:"DocumentsCount"`
		TombstonesCount int64    `json:"TombstonesCount"`
		LastEtag        uint64   `json:"LastEtag"`
		ChangeVector    string   `json:"ChangeVector"`
	}
	shards := targetShards(t)
	out := make([]shardStats, len(shards))
	var mu sync.Mutex
	err = n.eachShard(r.Context(), t, func(ctx context.Context, sn int, rep shardReplica) error {
		st, err := rep.stats(ctx)
		if err != nil {
			return err
		}
		mu.Lock()
		out[slices.Index(shards, sn)] = shardStats{sn, t.rec.Sharding.Shards[sn].Members, rep.node(), st.DocumentsCount, st.TombstonesCount, st.LastEtag, st.ChangeVector}
		mu.Unlock()
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	var total, tombs int64
	for _, s := range out {
		total += s.DocumentsCount
		tombs += s.TombstonesCount
	}
	writeJSON(w, http.StatusOK, map[string]any{"DocumentsCount": total, "TombstonesCount": tombs, "Shards": out,
		"Reroutes":     n.reroutes.stats(n.cfg.Node.Tag, t.rec.DatabaseName, t.rec.CreatedIndex),
		"ArrivalHolds": holdStats(n.holds, n.cfg.Node.Tag, t.rec.DatabaseName, t.rec.CreatedIndex),
		"LastPasses":   n.lastPassStats(t.rec.DatabaseName, t.rec.CreatedIndex)})
}

// bucketParam parses a bucket number from the query or path.
func bucketParam(name, v string, def uint32) (uint32, error) {
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseUint(v, 10, 32)
	if err != nil || b > bucket.MaxID {
		return 0, badRequest("%s %q: must be a bucket number 0..%d", name, v, bucket.MaxID)
	}
	return uint32(b), nil
}

// reportGroup is one entry of the buckets report. DocumentsCount and Size
// count what each shard holds in the buckets it owns, so a document whose
// bucket is moving (on the source and the destination) counts once, as
// queries count it; ByShard shows every copy.
type reportGroup struct {
	From           uint32         `json:"From"`
	To             uint32         `json:"To"`
	Shards         []int          `json:"Shards"`
	DocumentsCount int64          `json:"DocumentsCount"`
	Size           int64          `json:"Size"`
	ByShard        []shardHolding `json:"ByShard"`
}

// shardHolding is what one shard's replica holds in a bucket or a group of
// buckets: all of it, and the part in buckets the shard does not own (the
// copy of a bucket moving to or from it, or leftovers the documents
// migrator has yet to move), which the totals leave out.
type shardHolding struct {
	Shard                  int   `json:"Shard"`
	DocumentsCount         int64 `json:"DocumentsCount"`
	Size                   int64 `json:"Size"`
	NotOwnedDocumentsCount int64 `json:"NotOwnedDocumentsCount"`
	NotOwnedSize           int64 `json:"NotOwnedSize"`
}

// add adds one bucket's figures on the shard; owned says whether the
// shard owns the bucket.
func (h *shardHolding) add(st storage.BucketStats, owned bool) {
	h.DocumentsCount += st.DocumentsCount
	h.Size += st.Size
	if !owned {
		h.NotOwnedDocumentsCount += st.DocumentsCount
		h.NotOwnedSize += st.Size
	}
}

// holding returns the entry of shard sn in hs, adding it in shard order.
func holding(hs *[]shardHolding, sn int) *shardHolding {
	i, found := slices.BinarySearchFunc(*hs, sn, func(h shardHolding, sn int) int { return h.Shard - sn })
	if !found {
		*hs = slices.Insert(*hs, i, shardHolding{Shard: sn})
	}
	return &(*hs)[i]
}

// ownsBucket reports whether shard sn owns bucket b by t's record.
func ownsBucket(t target, sn int, b uint32) bool {
	return t.rec.ShardOf(b) == sn
}

// counted reports whether the totals of a request through t count shard
// sn's items of bucket b: through the database, only the owner's (each
// document once, as queries count them); through {db}${n}, everything the
// replica holds (as its queries and stats count it).
func counted(t target, sn int, b uint32) bool {
	return t.shard >= 0 || ownsBucket(t, sn, b)
}

func (n *Node) handleBucketsReport(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	from, err := bucketParam("from", q.Get("from"), 0)
	if err != nil {
		writeError(w, err)
		return
	}
	to, err := bucketParam("to", q.Get("to"), bucket.MaxID)
	if err != nil {
		writeError(w, err)
		return
	}
	if from > to {
		writeError(w, badRequest("from %d is after to %d", from, to))
		return
	}
	groups := defaultReportGroups
	if v := q.Get("groups"); v != "" {
		groups, err = strconv.Atoi(v)
		if err != nil || groups < 1 || groups > maxReportGroups {
			writeError(w, badRequest("groups %q: must be 1..%d", v, maxReportGroups))
			return
		}
	}
	span := uint64(to) - uint64(from) + 1
	if uint64(groups) > span {
		groups = int(span)
	}
	// Groups split the range like an even shard split: equal widths, the
	// remainder to the last group.
	out := make([]reportGroup, groups)
	width := span / uint64(groups)
	for i := range out {
		start := uint64(from) + uint64(i)*width
		end := start + width - 1
		if i == groups-1 {
			end = uint64(to)
		}
		out[i] = reportGroup{From: uint32(start), To: uint32(end), Shards: ownersOf(t, uint32(start), uint32(end)), ByShard: []shardHolding{}}
	}
	var mu sync.Mutex
	err = n.eachShard(r.Context(), t, func(ctx context.Context, sn int, rep shardReplica) error {
		stats, err := rep.rangeStats(ctx, from, to)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		gi := 0
		for _, st := range stats {
			for out[gi].To < st.Bucket {
				gi++
			}
			if counted(t, sn, st.Bucket) {
				out[gi].DocumentsCount += st.DocumentsCount
				out[gi].Size += st.Size
			}
			if st.DocumentsCount+st.TombstonesCount == 0 {
				continue
			}
			holding(&out[gi].ByShard, sn).add(st, ownsBucket(t, sn, st.Bucket))
			if !slices.Contains(out[gi].Shards, sn) {
				out[gi].Shards = append(out[gi].Shards, sn)
				slices.Sort(out[gi].Shards)
			}
		}
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"From": from, "To": to, "Groups": out})
}

// ownersOf lists the shards owning any bucket of [from, to].
func ownersOf(t target, from, to uint32) []int {
	out := []int{}
	ranges := t.rec.Sharding.BucketRanges
	for i := range ranges {
		f, e := ranges.Span(i)
		if e < from || f > to {
			continue
		}
		if !slices.Contains(out, ranges[i].ShardNumber) {
			out = append(out, ranges[i].ShardNumber)
		}
	}
	slices.Sort(out)
	if t.shard >= 0 {
		// One replica's view speaks for its shard alone: the shard is
		// listed when it owns a bucket of the range, or (added by the
		// caller) when it holds items there.
		if slices.Contains(out, t.shard) {
			return []int{t.shard}
		}
		return []int{}
	}
	return out
}

func (n *Node) handleBucket(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	b, err := bucketParam("bucket", r.PathValue("bucket"), 0)
	if err != nil {
		writeError(w, err)
		return
	}
	owners := ownersOf(t, b, b)
	var docs, size int64
	var cv changevector.Vector
	ids := []string{}
	byShard := []shardHolding{}
	var mu sync.Mutex
	err = n.eachShard(r.Context(), t, func(ctx context.Context, sn int, rep shardReplica) error {
		info, err := rep.bucket(ctx, b, maxBucketDocIDs)
		if err != nil {
			return err
		}
		st := info.Stats
		if st.DocumentsCount+st.TombstonesCount == 0 {
			return nil
		}
		v, err := changevector.ParseVector(st.ChangeVector)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(owners, sn) {
			owners = append(owners, sn)
		}
		holding(&byShard, sn).add(st, ownsBucket(t, sn, b))
		cv = changevector.Merge(cv, v)
		// While the bucket moves, the source and the destination both
		// hold its documents: count and list the owner's.
		if counted(t, sn, b) {
			docs += st.DocumentsCount
			size += st.Size
			ids = append(ids, info.IDs...)
		}
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	slices.Sort(owners)
	sortIDs(ids)
	writeJSON(w, http.StatusOK, map[string]any{"Bucket": b, "Shards": owners, "DocumentsCount": docs, "Size": size, "ChangeVector": cv.String(), "Documents": ids,
		"ByShard": byShard})
}

func (n *Node) handleBucketOf(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	ids := r.URL.Query()["id"]
	if len(ids) > 1 {
		writeError(w, badRequest("give one id, not %d", len(ids)))
		return
	}
	id := r.URL.Query().Get("id")
	if err := validateID(id); err != nil {
		writeError(w, err)
		return
	}
	b := bucket.ForID(id)
	writeJSON(w, http.StatusOK, map[string]any{"Id": id, "Bucket": b, "Shard": t.rec.ShardOf(b)})
}

// handleConflicts lists the losing versions of resolved replication
// conflicts, gathered from every replica of every shard (each conflict is
// recorded by the replica that resolved it).
func (n *Node) handleConflicts(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	// A conflict seen by both replicas is recorded by both: list it once,
	// with every replica that resolved it.
	type entry struct {
		Shard      int      `json:"Shard"`
		ResolvedOn []string `json:"ResolvedOn"`
		storage.Conflict
	}
	out := []entry{}
	seen := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, sn := range targetShards(t) {
		for _, tag := range t.rec.Sharding.Shards[sn].Members {
			if t.shard >= 0 && tag != n.cfg.Node.Tag {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(r.Context(), readAttemptTimeout)
				defer cancel()
				cs, err := n.replicaOn(t.rec.DatabaseName, sn, tag).conflicts(ctx, maxConflicts)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				for _, c := range cs {
					key := fmt.Sprintf("%d\x00%s\x00%s\x00%s", sn, c.ID, c.ChangeVector, c.ResolvedTo)
					if i, ok := seen[key]; ok {
						out[i].ResolvedOn = append(out[i].ResolvedOn, tag)
						slices.Sort(out[i].ResolvedOn)
						continue
					}
					seen[key] = len(out)
					out = append(out, entry{sn, []string{tag}, c})
				}
			}()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		writeError(w, unavailable("conflicts: %v", errs[0]))
		return
	}
	slices.SortFunc(out, func(a, b entry) int {
		if a.ID != b.ID {
			return cmpStr(a.ID, b.ID)
		}
		return a.LastModified.Compare(b.LastModified)
	})
	writeJSON(w, http.StatusOK, map[string]any{"Results": out, "TotalResults": len(out)})
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// replicaOn returns db's shard replica on node tag (local or remote).
func (n *Node) replicaOn(db string, shard int, tag string) shardReplica {
	if tag == n.cfg.Node.Tag {
		if l, err := n.local(db, shard); err == nil {
			return l
		}
	}
	return &remoteReplica{n: n, tag: tag, db: db, shard: shard}
}

// sortIDs orders ids as listings and `order by id()` do: by lower-cased
// id (ids are case-insensitive), then by id.
func sortIDs(ids []string) {
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(strings.Compare(strings.ToLower(a), strings.ToLower(b)), strings.Compare(a, b))
	})
}
