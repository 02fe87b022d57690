package node

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/shardnode/shardnode/changevector"
	"github.com/shardnode/shardnode/storage"
)

// HiLo: RavenDB's clients name a new document themselves, from a range of
// numbers the server hands out per collection (GET /hilo/next), so that
// storing an entity without an id costs no round trip per document. The
// server keeps the highest number it handed out in a document of its own,
// Raven/Hilo/{tag}, and hands out the next range by a conditional write of
// that document (If-Match on the version read), so that two ranges never
// overlap, whichever nodes serve the requests and wherever the document's
// bucket moves. The id a client makes ends with the ServerTag of the range:
// the node whose replica took the write, so that even two replicas of one
// shard cut off from each other, each taking a write on the same version,
// hand out ranges whose ids differ.

// hiloDocPrefix is the id prefix of the HiLo documents, as in RavenDB.
const hiloDocPrefix = "Raven/Hilo/"

// Bounds of a HiLo range's size, as RavenDB's: a client that asks again
// within 30 s gets twice its last range, up to hiloMaxCapacity; one that
// asks after more than a minute gets half.
const (
	hiloMinCapacity = 32
	hiloMaxCapacity = 1 << 20
)

// hiloAttempts bounds how many times one request reads the HiLo document
// and tries its conditional write: each failed try means another request
// took a range meanwhile (or the read was of a replica behind).
const hiloAttempts = 100

// hiloDoc is the body of a HiLo document.
type hiloDoc struct {
	Max *int64 `json:"Max"`
}

// hiloRange is GET /hilo/next's answer, in RavenDB's shape: the client
// names documents Prefix + n + "-" + ServerTag for n in Low..High.
type hiloRange struct {
	Prefix      string `json:"Prefix"`
	Low         int64  `json:"Low"`
	High        int64  `json:"High"`
	LastSize    int64  `json:"LastSize"`
	ServerTag   string `json:"ServerTag"`
	LastRangeAt string `json:"LastRangeAt"`
}

// hiloTimeLayout is how LastRangeAt is written: .NET's round-trip format
// in UTC, which every RavenDB client parses.
const hiloTimeLayout = "2006-01-02T15:04:05.0000000Z"

// handleHiloNext answers GET /databases/{db}/hilo/next?tag=T&lastBatchSize=N
// &lastRangeAt=TIME&identityPartsSeparator=S&lastMax=M.
func (n *Node) handleHiloNext(w http.ResponseWriter, r *http.Request) {
	t, q, tag, err := n.hiloRequest(r)
	if err != nil {
		writeError(w, err)
		return
	}
	sep := q.Get("identityPartsSeparator")
	if sep == "" {
		sep = "/"
	}
	if len([]rune(sep)) != 1 || sep == "|" {
		writeError(w, badRequest("identityPartsSeparator %q: must be one character other than '|'", sep))
		return
	}
	lastSize, err := nonNegativeParam(q, "lastBatchSize")
	if err != nil {
		writeError(w, err)
		return
	}
	lastMax, err := nonNegativeParam(q, "lastMax")
	if err != nil {
		writeError(w, err)
		return
	}
	lastAt, err := hiloTime(q.Get("lastRangeAt"))
	if err != nil {
		writeError(w, err)
		return
	}
	now := time.Now()
	capacity := hiloCapacity(lastSize, lastAt, now)
	low, high, server, err := n.takeHiloRange(r.Context(), t, hiloDocPrefix+tag, lastMax, capacity)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, hiloRange{
		Prefix: tag + sep, Low: low, High: high, LastSize: capacity,
		ServerTag: server, LastRangeAt: now.UTC().Format(hiloTimeLayout),
	})
}

// handleHiloReturn answers PUT /databases/{db}/hilo/return?tag=T&end=E
// &last=L: a client that stops gives back the rest of its range (the
// numbers after L, the last it used, through E, the range's end), which
// the next range then starts with, unless another range was handed out
// after it.
func (n *Node) handleHiloReturn(w http.ResponseWriter, r *http.Request) {
	t, q, tag, err := n.hiloRequest(r)
	if err != nil {
		writeError(w, err)
		return
	}
	end, err := requiredNonNegative(q, "end")
	if err != nil {
		writeError(w, err)
		return
	}
	last, err := requiredNonNegative(q, "last")
	if err != nil {
		writeError(w, err)
		return
	}
	if last > end {
		writeError(w, badRequest("last %d is after end %d", last, end))
		return
	}
	if err := n.returnHiloRange(r.Context(), t, hiloDocPrefix+tag, end, last); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// hiloRequest reads what both HiLo requests name: the database (not one
// shard replica: the range is the database's), the query and its tag.
func (n *Node) hiloRequest(r *http.Request) (target, url.Values, string, error) {
	t, err := n.resolve(r.PathValue("db"))
	if err != nil {
		return target{}, nil, "", err
	}
	if t.shard >= 0 {
		return target{}, nil, "", badRequest("HiLo ranges are the database %q's, not of one shard replica", t.rec.DatabaseName)
	}
	q := r.URL.Query()
	tag, err := hiloTag(q.Get("tag"))
	return t, q, tag, err
}

// hiloTag checks a HiLo tag: the collection's id prefix, such as users.
func hiloTag(tag string) (string, error) {
	if tag == "" {
		return "", badRequest("tag: required (the collection's id prefix, such as users)")
	}
	if err := validateID(hiloDocPrefix + tag); err != nil {
		return "", badRequest("tag %q: %v", tag, err)
	}
	return tag, nil
}

// nonNegativeParam reads an optional whole number of at least 0 (0 when
// absent or empty).
func nonNegativeParam(q url.Values, name string) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s %q: must be a whole number of at least 0", name, v)
	}
	return n, nil
}

func requiredNonNegative(q url.Values, name string) (int64, error) {
	if q.Get(name) == "" {
		return 0, badRequest("%s: required", name)
	}
	return nonNegativeParam(q, name)
}

// hiloTime parses lastRangeAt as RavenDB's clients send it: an ISO 8601
// time in UTC, with or without its Z (the .NET client's round-trip format
// has none). Empty means no range was taken before.
func hiloTime(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02T15:04:05.999999999", v); err == nil {
		return t, nil
	}
	return time.Time{}, badRequest("lastRangeAt %q: not an ISO 8601 time such as 2026-12-07T10:00:00.0000000Z", v)
}

// hiloCapacity is the size of the next range, from the client's last one
// and when it took it: RavenDB's rule, so that a client storing many
// documents asks less and less often, and an idle one holds few numbers.
func hiloCapacity(lastSize int64, lastAt, now time.Time) int64 {
	if lastAt.IsZero() {
		return max(hiloMinCapacity, min(lastSize, hiloMaxCapacity))
	}
	switch since := now.Sub(lastAt); {
	case since < 30*time.Second:
		return min(max(hiloMinCapacity, min(lastSize, hiloMaxCapacity)*2), hiloMaxCapacity)
	case since > time.Minute:
		return max(hiloMinCapacity, min(lastSize/2, hiloMaxCapacity))
	default:
		return max(hiloMinCapacity, min(lastSize, hiloMaxCapacity))
	}
}

// takeHiloRange raises the HiLo document id's Max by capacity, from at
// least lastMax, and returns the range taken and the tag of the node whose
// replica took the write.
func (n *Node) takeHiloRange(ctx context.Context, t target, id string, lastMax, capacity int64) (low, high int64, server string, err error) {
	err = n.updateHilo(ctx, t, id, func(cur int64, exists bool) (int64, bool, error) {
		from := max(cur, lastMax)
		if from > math.MaxInt64-capacity {
			return 0, false, &apiError{Status: http.StatusConflict, Type: "HiloExhausted",
				Msg: fmt.Sprintf("HiLo document %q: its Max %d has no room for %d more", id, from, capacity)}
		}
		low, high = from+1, from+capacity
		return high, true, nil
	}, func(tag string) { server = tag })
	return low, high, server, err
}

// returnHiloRange sets the HiLo document id's Max back to last if it is
// still end: no range was handed out after the one returned.
func (n *Node) returnHiloRange(ctx context.Context, t target, id string, end, last int64) error {
	return n.updateHilo(ctx, t, id, func(cur int64, exists bool) (int64, bool, error) {
		if !exists || cur != end {
			return 0, false, nil
		}
		return last, true, nil
	}, nil)
}

// updateHilo reads the HiLo document id and writes the Max that next
// returns for its current Max, on the condition that the document is still
// the version read (or still absent), trying again while that condition
// fails. next may decline to write. wrote receives the tag of the node
// whose replica took the write.
func (n *Node) updateHilo(ctx context.Context, t target, id string, next func(cur int64, exists bool) (int64, bool, error), wrote func(tag string)) error {
	for attempt := 0; ; attempt++ {
		if rec := n.recordOf(t.rec.DatabaseName); rec != nil {
			t.rec = rec
		}
		docs, _, err := n.fetchDocs(ctx, t, []string{id})
		if err != nil {
			return fmt.Errorf("read %q: %w", id, err)
		}
		var cur int64
		var prev changevector.Vector
		op := storage.Op{Kind: storage.OpPut, ID: id, Collection: storage.HiloCollection, IfNew: true}
		if d := docs[0]; d != nil {
			var hd hiloDoc
			if err := json.Unmarshal(d.Body, &hd); err != nil || hd.Max == nil || *hd.Max < 0 {
				return &apiError{Status: http.StatusConflict, Type: "InvalidHiloDocument",
					Msg: fmt.Sprintf("HiLo document %q holds no Max of at least 0 (%s): write one back above every number handed out", id, bodyExcerpt(d.Body))}
			}
			cur = *hd.Max
			cv, err := changevector.Parse(d.ChangeVector)
			if err != nil {
				return fmt.Errorf("change vector of %q: %w", id, err)
			}
			prev, op.IfNew, op.IfMatch = cv.Version, false, d.ChangeVector
		}
		newMax, write, err := next(cur, docs[0] != nil)
		if err != nil || !write {
			return err
		}
		op.Body = []byte(`{"Max":` + strconv.FormatInt(newMax, 10) + `}`)
		res, err := n.writeOps(ctx, t, []storage.Op{op}, writeConcern{Replicas: 1, Timeout: defaultReplicasTimeout})
		if err == nil {
			tag, ok := writerTag(prev, res[0])
			if ok || wrote == nil {
				if wrote != nil {
					wrote(tag)
				}
				return nil
			}
			// The change vector does not say which replica took the write
			// (a document recreated over a tombstone): the next try's
			// write, on the version just written, will.
		} else if toAPIError(err).Type != "ConcurrencyException" {
			return err
		}
		if attempt+1 >= hiloAttempts {
			return &apiError{Status: http.StatusServiceUnavailable, Type: "ServiceUnavailable",
				Msg: fmt.Sprintf("HiLo document %q changed under each of %d tries: retry", id, hiloAttempts)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(min(attempt, 10)) * time.Millisecond):
		}
	}
}

// writerTag names the node whose replica took a write over a version with
// the entries prev: the one entry of the result's version that the write
// changed, which carries the result's etag.
func writerTag(prev changevector.Vector, res storage.Result) (string, bool) {
	cv, err := changevector.Parse(res.ChangeVector)
	if err != nil {
		return "", false
	}
	tag := ""
	for _, e := range cv.Version {
		if e.Etag != res.Etag || prev.EtagOf(e.DBID) == e.Etag { // not the write's, or unchanged by it
			continue
		}
		if tag != "" && tag != e.Tag {
			return "", false
		}
		tag = e.Tag
	}
	return tag, tag != "" && tag != "MOVE"
}

// bodyExcerpt is the start of a document body, for an error message.
func bodyExcerpt(b []byte) string {
	s := string(b)
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
