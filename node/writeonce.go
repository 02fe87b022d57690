package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// A client write routed to a replica on another node travels as one bus
// request. When the request or its answer is lost on the way (a route
// between the embedded NATS servers cut and reconnected while it was in
// flight), the router cannot tell whether the write ran, so it may not
// send it again, to this replica or another: an If-Match write would run
// twice, or be refused as a conflict with itself. It waited out the
// attempt (writeAttemptTimeout, 10 s) and answered 504.
//
// opShardWriteOnce makes the resend safe. The router numbers its routed
// writes to each node (Write-Seq), and sends the same request again, with
// the same number, when no answer came within writeResendFirst (then
// doubling, up to writeResendMax). The replica runs a number once and
// answers every copy with that one run's answer; a copy that arrives
// while the run is in progress waits for it, without taking one of the
// node's request slots (see answerLaterCopy): a replica paused for
// seconds gets up to four copies of every write in flight to it. The
// router also says, in every request, the lowest number to that node it
// still waits for (Write-Floor): the replica forgets the answers below
// it, so what it keeps is about the writes in flight. It forgets an
// answer in any case onceSlack after the router's deadline for it
// (Timeout-Ms), when no copy is sent any more.
//
// A replica restarted since the router's first copy has forgotten what it
// ran. The router names the run of the replica it sent the first copy to
// (Write-Target, its incarnation); a replica of another run answers a copy
// after the first with a 504 of unknown outcome rather than run it, and so
// does a replica asked for a number below the floor (a copy that arrived
// after the router gave up on it). A router that does not know the
// replica's run sends once, as before.
const opShardWriteOnce = "shard.write.once"

// Headers of opShardWriteOnce (see there).
const (
	writeSeqHeader    = "Write-Seq"
	writeFloorHeader  = "Write-Floor"
	writeTargetHeader = "Write-Target"
	writeSendHeader   = "Write-Send"
)

// How long a routed write waits for an answer before it sends the same
// request again, and the most it waits between copies.
const (
	writeResendFirst = time.Second
	writeResendMax   = 4 * time.Second
)

// onceSlack is how long past the router's deadline for a write a replica
// keeps its answer: the router sends no copy after its deadline, and a
// copy takes milliseconds on the bus (a route that cannot carry it is
// closed, and its messages lost, within seconds). A copy later than that
// would run again.
const onceSlack = 30 * time.Second

// onceSweepEvery is how often a replica looks for answers past their time.
const onceSweepEvery = time.Second

// writeSeqs are this node's numbers for its routed writes, one sequence
// per node written to.
type writeSeqs struct {
	mu sync.Mutex
	m  map[string]*writeSeq
}

func newWriteSeqs() *writeSeqs { return &writeSeqs{m: map[string]*writeSeq{}} }

// to returns the sequence of the writes to node tag.
func (w *writeSeqs) to(tag string) *writeSeq {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.m[tag]
	if s == nil {
		s = &writeSeq{next: 1, head: 1, done: map[uint64]bool{}}
		w.m[tag] = s
	}
	return s
}

// writeSeq numbers the routed writes to one node and knows the lowest
// number it still waits for.
type writeSeq struct {
	mu   sync.Mutex
	next uint64          // the next number to give out (from 1)
	head uint64          // the lowest number not retired
	done map[uint64]bool // numbers retired above head
}

// take gives out the next number.
func (s *writeSeq) take() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.next
	s.next++
	return n
}

// retire says that n's answer came or the router gave up on it: it will
// not be sent again.
func (s *writeSeq) retire(n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n != s.head {
		s.done[n] = true
		return
	}
	s.head++
	for s.done[s.head] {
		delete(s.done, s.head)
		s.head++
	}
}

// floor is the lowest number not retired: every number below it will
// never be sent again.
func (s *writeSeq) floor() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head
}

// callOnce sends a routed write (op opShardWriteOnce) to node tag, and
// sends the same request again while no answer comes (see
// opShardWriteOnce), until ctx ends.
func (n *Node) callOnce(ctx context.Context, tag string, data []byte) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rpcTimeout)
		defer cancel()
	}
	dl, _ := ctx.Deadline()
	target := n.health.incarnation(tag)
	seqs := n.writeSeqs.to(tag)
	seq := seqs.take()
	defer seqs.retire(seq)
	wait := writeResendFirst
	for send := 1; ; send++ {
		hdr := map[string]string{
			writeSeqHeader:    strconv.FormatUint(seq, 10),
			writeFloorHeader:  strconv.FormatUint(seqs.floor(), 10),
			writeTargetHeader: target,
			writeSendHeader:   strconv.Itoa(send),
			// The handler's time is the whole attempt's, not one copy's.
			"Timeout-Ms": strconv.FormatInt(max(1, time.Until(dl).Milliseconds()), 10),
		}
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if target != "" {
			sctx, cancel = context.WithTimeout(ctx, wait)
		}
		raw, err := n.callRawWith(sctx, tag, opShardWriteOnce, data, hdr)
		timedOut := errors.Is(err, errTimeout) && sctx.Err() != nil
		cancel()
		// After the first copy, no responder does not mean the write did
		// not run: the first copy may have, before the route went. The
		// write must not go to another member; ask this one again.
		lost := send > 1 && errors.Is(err, errUnreachable)
		if target == "" || ctx.Err() != nil || !(timedOut || lost) {
			// A later copy's refusal that would send the write to
			// another member (a 503: the node stops, say) or in
			// another op (a node now of an earlier version) is no
			// proof either: the first copy may have run.
			if lost || (send > 1 && err != nil && (ctx.Err() != nil || retryable(err) || isUnknownOp(err))) {
				return nil, fmt.Errorf("%s to node %s, sent %d times with no answer: %w", opShardWriteOnce, tag, send, errTimeout)
			}
			return raw, err
		}
		n.writeResends.Add(1)
		if lost {
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue // the same wait for the answer
		}
		n.logger.Info("no answer to a routed write yet; sending it again", "to", tag, "seq", seq, "copy", send+1, "waited", wait)
		wait = min(2*wait, writeResendMax)
	}
}

// onceTable is a replica node's memory of the routed writes it ran, by
// router run and number (see opShardWriteOnce).
type onceTable struct {
	mu      sync.Mutex
	routers map[string]*routerWrites // by the router's "tag incarnation"
	swept   time.Time
}

// routerWrites are one router run's writes this node ran or runs. Its
// floor is kept until, as long as a copy of a number below it may still
// come (the latest request's deadline, plus onceSlack), even when no
// answer is left to keep.
type routerWrites struct {
	floor uint64
	until time.Time
	runs  map[uint64]*onceRun
}

// onceRun is one write's run: its answer once done is closed. It is
// forgotten after until.
type onceRun struct {
	done  chan struct{}
	until time.Time
	raw   []byte
	err   error
	// ended (raw and err are set) and waiters, the copies to answer when
	// the run ends, are under onceTable.mu.
	ended   bool
	waiters []func([]byte, error)
}

func newOnceTable() *onceTable { return &onceTable{routers: map[string]*routerWrites{}} }

// errOnceUnknown answers a copy of a routed write this replica cannot say
// it ran: the router gave up on it (below its floor), or this replica
// restarted since the router's first copy. Not retryable: it may have run.
func errOnceUnknown(format string, args ...any) error {
	return &apiError{Status: http.StatusGatewayTimeout, Type: "WriteOutcomeUnknown", Msg: fmt.Sprintf(format, args...)}
}

// do runs write number seq of router from once, whatever copy this is,
// and returns that run's answer. floor is the router's floor; send the
// copy's number (1 for the first); target the run of this node the router
// sent its first copy to, and self this node's run; timeout the router's
// time left for the write.
func (t *onceTable) do(ctx context.Context, from string, seq, floor uint64, send int, target, self string, timeout time.Duration, run func() ([]byte, error)) ([]byte, error) {
	t.mu.Lock()
	rw := t.heard(from, floor, timeout, time.Now())
	if seq < rw.floor {
		t.mu.Unlock()
		return nil, errOnceUnknown("routed write %d from %s arrived after its router gave up on it", seq, from)
	}
	if r := rw.runs[seq]; r != nil {
		t.mu.Unlock()
		select {
		case <-r.done:
			return r.raw, r.err
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the run of routed write %d from %s: %w", seq, from, errTimeout)
		}
	}
	if send > 1 && target != self {
		t.mu.Unlock()
		return nil, errOnceUnknown("routed write %d from %s: copy %d reached node run %s, not the run %q its first copy went to, which may have run it", seq, from, send, self, target)
	}
	r := &onceRun{done: make(chan struct{}), until: rw.until}
	rw.runs[seq] = r
	t.mu.Unlock()
	raw, err := run()
	t.mu.Lock()
	r.raw, r.err, r.ended = raw, err, true
	waiters := r.waiters
	r.waiters = nil
	t.mu.Unlock()
	close(r.done)
	for _, answer := range waiters {
		answer(raw, err)
	}
	return raw, err
}

// heard notes a copy of a write of router from: it sweeps now and then,
// moves the router's floor up to floor, and keeps what is kept for it
// until timeout (the router's time left) plus onceSlack. t.mu is held.
func (t *onceTable) heard(from string, floor uint64, timeout time.Duration, now time.Time) *routerWrites {
	if now.Sub(t.swept) >= onceSweepEvery {
		t.swept = now
		t.sweep(now)
	}
	rw := t.routers[from]
	if rw == nil {
		rw = &routerWrites{runs: map[uint64]*onceRun{}}
		t.routers[from] = rw
	}
	if u := now.Add(timeout + onceSlack); u.After(rw.until) {
		rw.until = u
	}
	if floor > rw.floor {
		rw.floor = floor
		for s := range rw.runs {
			if s < floor {
				delete(rw.runs, s)
			}
		}
	}
	return rw
}

// attach answers a copy of write seq of router from with the answer of
// its run here, now if it ended, else when it ends, and reports whether
// there is such a run; without one the copy goes to do as any other.
// floor and timeout are the copy's, as for do.
func (t *onceTable) attach(from string, seq, floor uint64, timeout time.Duration, answer func([]byte, error)) bool {
	t.mu.Lock()
	rw := t.heard(from, floor, timeout, time.Now())
	r := rw.runs[seq]
	if r == nil || seq < rw.floor {
		t.mu.Unlock()
		return false
	}
	if !r.ended {
		r.waiters = append(r.waiters, answer)
		t.mu.Unlock()
		return true
	}
	raw, err := r.raw, r.err
	t.mu.Unlock()
	answer(raw, err)
	return true
}

// sweep forgets the answers past their time, and the routers left with
// none whose floor no copy can need any more.
func (t *onceTable) sweep(now time.Time) {
	for k, rw := range t.routers {
		for s, r := range rw.runs {
			select {
			case <-r.done:
				if now.After(r.until) {
					delete(rw.runs, s)
				}
			default: // running: its copies wait for it
			}
		}
		if len(rw.runs) == 0 && now.After(rw.until) {
			delete(t.routers, k)
		}
	}
}

// size is how many answers the table holds, running writes included.
func (t *onceTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, rw := range t.routers {
		n += len(rw.runs)
	}
	return n
}

// answerLaterCopy answers m, when it is a later copy of a routed write
// this node runs or ran (opShardWriteOnce, Write-Send above 1), from that
// run, in the bus's delivery goroutine and without a request slot, and
// reports whether it did. Anything else, a malformed copy included, goes
// to the handler.
func (n *Node) answerLaterCopy(m *nats.Msg) bool {
	if m.Header.Get("Op") != opShardWriteOnce {
		return false
	}
	send, err := strconv.Atoi(m.Header.Get(writeSendHeader))
	if err != nil || send < 2 {
		return false
	}
	from := m.Header.Get(fromHeader)
	seq, err1 := strconv.ParseUint(m.Header.Get(writeSeqHeader), 10, 64)
	floor, err2 := strconv.ParseUint(m.Header.Get(writeFloorHeader), 10, 64)
	if !strings.Contains(from, " ") || err1 != nil || err2 != nil {
		return false
	}
	timeout := rpcTimeout
	if ms, err := strconv.ParseInt(m.Header.Get("Timeout-Ms"), 10, 64); err == nil && ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	n.heard(m)
	return n.writesOnce.attach(from, seq, floor, timeout, func(raw []byte, err error) {
		n.respond(m, opShardWriteOnce, raw, err)
	})
}

// serveWriteOnce is opShardWriteOnce's handler: the write of
// opShardWriteBin, run once per router number.
func (n *Node) serveWriteOnce(write rpcHandler) rpcHandler {
	return func(ctx context.Context, data []byte) (any, error) {
		from := rpcHeader(ctx, fromHeader)
		seq, err1 := strconv.ParseUint(rpcHeader(ctx, writeSeqHeader), 10, 64)
		floor, err2 := strconv.ParseUint(rpcHeader(ctx, writeFloorHeader), 10, 64)
		send, err3 := strconv.Atoi(rpcHeader(ctx, writeSendHeader))
		if from == "" || !strings.Contains(from, " ") || err1 != nil || err2 != nil || err3 != nil || send < 1 {
			return nil, badRequest("%s needs %s, %s, %s and %s headers", opShardWriteOnce, fromHeader, writeSeqHeader, writeFloorHeader, writeSendHeader)
		}
		timeout := rpcTimeout
		if ms, err := strconv.ParseInt(rpcHeader(ctx, "Timeout-Ms"), 10, 64); err == nil && ms > 0 {
			timeout = time.Duration(ms) * time.Millisecond
		}
		return n.writesOnce.do(ctx, from, seq, floor, send, rpcHeader(ctx, writeTargetHeader), n.incarnation, timeout, func() ([]byte, error) {
			v, err := write(ctx, data)
			if err != nil {
				return nil, err
			}
			if raw, ok := v.([]byte); ok {
				return raw, nil
			}
			raw, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("encode %s reply: %w", opShardWriteOnce, err)
			}
			return raw, nil
		})
	}
}
