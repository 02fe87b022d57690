package node

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/shardnode/shardnode/bucket"
	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/storage"
)

// Limits of the buckets report.
const (
	defaultReportGroups = 32
	maxReportGroups     = 4096
	maxBucketDocIDs     = 10000
)

func (n *Node) handleStats(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	if t.shard >= 0 {
		s, err := n.localReplica(t)
		if err != nil {
			writeError(w, err)
			return
		}
		st := s.Stats()
		writeJSON(w, http.StatusOK, map[string]any{
			"DocumentsCount": st.DocumentsCount, "TombstonesCount": st.TombstonesCount,
			"LastEtag": st.LastEtag, "ChangeVector": st.ChangeVector,
			"DatabaseId": s.DatabaseID(), "Shard": t.shard, "Node": n.cfg.Node.Tag,
		})
		return
	}
	type shardStats struct {
		Shard           int      `json:"Shard"`
		Members         []string `json:"Members"`
		DocumentsCount  int64    `json:"DocumentsCount"`
		TombstonesCount int64    `json:"TombstonesCount"`
		LastEtag        uint64   `json:"LastEtag"`
		ChangeVector    string   `json:"ChangeVector"`
	}
	var total, tombs int64
	shards := []shardStats{}
	for _, sn := range t.rec.ShardNumbers() {
		s, err := n.shardStore(t.rec, sn)
		if err != nil {
			writeError(w, err)
			return
		}
		st := s.Stats()
		total += st.DocumentsCount
		tombs += st.TombstonesCount
		shards = append(shards, shardStats{sn, t.rec.Sharding.Shards[sn].Members, st.DocumentsCount, st.TombstonesCount, st.LastEtag, st.ChangeVector})
	}
	writeJSON(w, http.StatusOK, map[string]any{"DocumentsCount": total, "TombstonesCount": tombs, "Shards": shards})
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

// reportGroup is one entry of the buckets report.
type reportGroup struct {
	From           uint32 `json:"From"`
	To             uint32 `json:"To"`
	Shards         []int  `json:"Shards"`
	DocumentsCount int64  `json:"DocumentsCount"`
	Size           int64  `json:"Size"`
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
		out[i] = reportGroup{From: uint32(start), To: uint32(end), Shards: ownersOf(t, uint32(start), uint32(end))}
	}
	shards := t.rec.ShardNumbers()
	if t.shard >= 0 {
		shards = []int{t.shard}
	}
	for _, sn := range shards {
		s, err := n.storeFor(t, sn)
		if err != nil {
			writeError(w, err)
			return
		}
		gi := 0
		err = s.RangeStats(from, to, func(st storage.BucketStats) error {
			for out[gi].To < st.Bucket {
				gi++
			}
			out[gi].DocumentsCount += st.DocumentsCount
			out[gi].Size += st.Size
			if st.DocumentsCount+st.TombstonesCount > 0 && !slices.Contains(out[gi].Shards, sn) {
				out[gi].Shards = append(out[gi].Shards, sn)
				slices.Sort(out[gi].Shards)
			}
			return nil
		})
		if err != nil {
			writeError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"From": from, "To": to, "Groups": out})
}

// ownersOf lists the shards owning any bucket of [from, to].
func ownersOf(t target, from, to uint32) []int {
	if t.shard >= 0 {
		return []int{t.shard}
	}
	var out []int
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
	shards := t.rec.ShardNumbers()
	if t.shard >= 0 {
		shards = []int{t.shard}
	}
	owners := ownersOf(t, b, b)
	var docs, size int64
	var cv changevector.Vector
	ids := []string{}
	for _, sn := range shards {
		s, err := n.storeFor(t, sn)
		if err != nil {
			writeError(w, err)
			return
		}
		st, err := s.BucketStats(b)
		if err != nil {
			writeError(w, err)
			return
		}
		if st.DocumentsCount+st.TombstonesCount == 0 {
			continue
		}
		if !slices.Contains(owners, sn) {
			owners = append(owners, sn)
		}
		docs += st.DocumentsCount
		size += st.Size
		v, err := changevector.ParseVector(st.ChangeVector)
		if err != nil {
			writeError(w, err)
			return
		}
		cv = changevector.Merge(cv, v)
		err = s.IterateBuckets(b, b, func(d *storage.Document) bool {
			if !d.Deleted() {
				ids = append(ids, d.ID)
			}
			return len(ids) < maxBucketDocIDs
		})
		if err != nil {
			writeError(w, err)
			return
		}
	}
	slices.Sort(owners)
	writeJSON(w, http.StatusOK, map[string]any{"Bucket": b, "Shards": owners, "DocumentsCount": docs, "Size": size, "ChangeVector": cv.String(), "Documents": ids})
}

func (n *Node) handleBucketOf(w http.ResponseWriter, r *http.Request) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.URL.Query().Get("id")
	if err := validateID(id); err != nil {
		writeError(w, err)
		return
	}
	b, shard := shardFor(t, id)
	writeJSON(w, http.StatusOK, map[string]any{"Id": id, "Bucket": b, "Shard": shard})
}
