package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Node-to-node requests travel over NATS request/reply: each node
// subscribes to one subject, sn.<cluster>.rpc.<tag>, and the "Op" header
// picks the handler. Replies carry "Status" (an HTTP status), and on
// failure "Error-Type" and the message as the body (a BucketNotOwned
// refusal adds "Owner-Shard" and "Owner-Etag", a refusal to be asked
// again of the same member "Ask-Again").

// errUnreachable means no node answered: nothing was executed, so the
// caller may try another replica.
var errUnreachable = errors.New("node unreachable")

// rpcTimeout bounds a node-to-node request when the caller's context has
// no earlier deadline.
const rpcTimeout = 5 * time.Second

// rpcHandler serves one op: it decodes data and returns a value to encode.
type rpcHandler func(ctx context.Context, data []byte) (any, error)

func (n *Node) rpcSubject(tag string) string {
	return "sn." + n.cfg.Cluster.Name + ".rpc." + tag
}

// serveRPC subscribes this node's subject and serves each request on its
// own goroutine, at most maxInflight at once.
func (n *Node) serveRPC(ctx context.Context) (*nats.Subscription, error) {
	const maxInflight = 512
	sem := make(chan struct{}, maxInflight)
	sub, err := n.bus.nc.Subscribe(n.rpcSubject(n.cfg.Node.Tag), func(m *nats.Msg) {
		// Checked first: once ctx ended, a select over both cases below
		// picked either at random, and dropped half the requests of a
		// stopping node without an answer (a few 504s per clean stop).
		if ctx.Err() != nil {
			n.answerStopping(m)
			return
		}
		if n.answerLaterCopy(m) {
			return // a copy of a routed write this node runs or ran: no slot
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			n.answerStopping(m)
			return
		}
		// Close waits on n.wg: no Add may race that Wait.
		n.rpcMu.Lock()
		if n.rpcStopped {
			n.rpcMu.Unlock()
			<-sem
			n.answerStopping(m)
			return
		}
		n.wg.Add(1)
		n.rpcMu.Unlock()
		go func() {
			defer n.wg.Done()
			defer func() { <-sem }()
			n.handleRPC(ctx, m)
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", n.rpcSubject(n.cfg.Node.Tag), err)
	}
	return sub, nil
}

// answerStopping answers a request this node did not run, or did not
// finish, because it stops: retryable, another member takes it. Left
// unanswered, the asking node would wait until it counted this one down
// and answer its client 504 (outcome unknown).
func (n *Node) answerStopping(m *nats.Msg) {
	reply := nats.NewMsg(m.Reply)
	reply.Header.Set("Status", strconv.Itoa(http.StatusServiceUnavailable))
	reply.Header.Set("Error-Type", "NodeStopping")
	reply.Data = []byte(fmt.Sprintf("node %s is stopping; ask another member", n.cfg.Node.Tag))
	_ = m.RespondMsg(reply)
}

// heard tells the health tracker that m's sender, if it says who it is,
// is alive.
func (n *Node) heard(m *nats.Msg) {
	if from := m.Header.Get(fromHeader); from != "" {
		tag, inc, _ := strings.Cut(from, " ")
		n.health.heardRequest(tag, inc)
	}
}

func (n *Node) handleRPC(ctx context.Context, m *nats.Msg) {
	nodeCtx := ctx // ends when this node stops
	n.heard(m)
	op := m.Header.Get("Op")
	h, ok := n.rpcHandlers[op]
	var v any
	var err error
	if !ok {
		err = badRequest(unknownOpPrefix+"%q", op)
	} else {
		if ms, perr := strconv.ParseInt(m.Header.Get("Timeout-Ms"), 10, 64); perr == nil && ms > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
			defer cancel()
		}
		v, err = h(context.WithValue(ctx, rpcHeadersKey{}, m.Header), m.Data)
	}
	if errors.Is(err, context.Canceled) && nodeCtx.Err() != nil {
		// The node's stop cut the op short (a listing's scan, a wait for
		// the record) before it changed anything: a write that reached
		// its store is answered whatever the context. Said as the
		// InternalError of a cancellation, it reached clients as a 500
		// where another member would have answered (an explorer, listing
		// during SIGTERMs).
		n.answerStopping(m)
		return
	}
	n.respond(m, op, v, err)
}

// respond answers request m of op with its handler's result: v (raw bytes
// as they are, anything else as JSON) or err, whose status and type go in
// the headers.
func (n *Node) respond(m *nats.Msg, op string, v any, err error) {
	reply := nats.NewMsg(m.Reply)
	if err != nil {
		setReplyError(reply, err)
	} else {
		reply.Header.Set("Status", "200")
		if raw, ok := v.([]byte); ok {
			reply.Data = raw
		} else if reply.Data, err = json.Marshal(v); err != nil {
			reply.Header.Set("Status", "500")
			reply.Header.Set("Error-Type", "InternalError")
			reply.Data = []byte("encode reply: " + err.Error())
		}
	}
	if limit := int(n.bus.nc.MaxPayload()) - busMessageSlack; len(reply.Data) > limit {
		// An answer the bus cannot carry would never arrive: the asking
		// node would wait out its attempt and try another replica, which
		// cannot send it either. Say so at once instead.
		tooLarge(reply, fmt.Sprintf("%s on node %s: the answer is %d bytes, more than one bus message carries (%d bytes); ask for less at once (a query's limit, fewer ids per request)", op, n.cfg.Node.Tag, len(reply.Data), limit))
	}
	if err := m.RespondMsg(reply); err != nil {
		n.logger.Warn("rpc reply failed", "op", op, "bytes", len(reply.Data), "err", err)
	}
}

// tooLarge turns reply into the refusal of an answer too large to send.
func tooLarge(reply *nats.Msg, msg string) {
	reply.Header.Set("Status", strconv.Itoa(http.StatusUnprocessableEntity))
	reply.Header.Set("Error-Type", "ResultTooLarge")
	reply.Data = []byte(msg)
}

// unknownOpPrefix starts the message of the answer to an op a node does not
// serve; nodes of every version answer so, which lets a newer sender fall
// back to an older op.
const unknownOpPrefix = "unknown node-to-node op "

// isUnknownOp reports a refusal of an op the node does not serve (nothing
// ran there).
func isUnknownOp(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.HasPrefix(ae.Msg, unknownOpPrefix)
}

// call sends op to node tag and decodes the reply into out (if non-nil).
func (n *Node) call(ctx context.Context, tag, op string, req, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s: %w", op, err)
	}
	raw, err := n.callRaw(ctx, tag, op, data)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode %s reply from %s: %w", op, tag, err)
	}
	return nil
}

func (n *Node) callRaw(ctx context.Context, tag, op string, data []byte) ([]byte, error) {
	return n.callRawWith(ctx, tag, op, data, nil)
}

// fromHeader names the node that sends a node-to-node request and its
// incarnation ("B 3k9…"): a request is word from that node's current run,
// as its heartbeat is (see health.heardRequest).
const fromHeader = "Shardnode-From"

// rpcHeadersKey keys a request's bus headers in its handler's context.
type rpcHeadersKey struct{}

// rpcHeader is a header of the node-to-node request ctx belongs to, or "".
func rpcHeader(ctx context.Context, name string) string {
	h, _ := ctx.Value(rpcHeadersKey{}).(nats.Header)
	return h.Get(name)
}

// callRawWith is callRaw with extra headers for the handler (see
// rpcHeader); a node of an earlier version ignores them.
func (n *Node) callRawWith(ctx context.Context, tag, op string, data []byte, extra map[string]string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rpcTimeout)
		defer cancel()
	}
	dl, _ := ctx.Deadline()
	m := nats.NewMsg(n.rpcSubject(tag))
	m.Header.Set("Op", op)
	m.Header.Set("Timeout-Ms", strconv.FormatInt(max(1, time.Until(dl).Milliseconds()), 10))
	m.Header.Set(fromHeader, n.cfg.Node.Tag+" "+n.incarnation)
	for k, v := range extra {
		m.Header.Set(k, v)
	}
	m.Data = data
	// A node that dies with our request in flight never answers: stop
	// waiting as soon as it is found down.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	down := n.health.downSignal(tag)
	wentDown := make(chan struct{})
	go func() {
		select {
		case <-down:
			if n.health.leftCleanly(tag) {
				// It answers what it received while it closes: wait for
				// that answer a while longer (see leftCleanly).
				t := time.NewTimer(leftAnswerWait)
				defer t.Stop()
				select {
				case <-t.C:
				case <-rctx.Done():
					return
				}
			}
			close(wentDown)
			cancel()
		case <-rctx.Done():
		}
	}()
	reply, err := n.bus.nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		// No responder is checked first: this request surely ran nowhere,
		// though another one's finding may have fired the down signal.
		if errors.Is(err, nats.ErrNoResponders) {
			if n.routesSettled() {
				n.health.markDown(tag)
			}
			return nil, fmt.Errorf("%s to node %s: %w", op, tag, errUnreachable)
		}
		select {
		case <-wentDown:
			return nil, fmt.Errorf("%s to node %s: the node went down before answering: %w", op, tag, errTimeout)
		default:
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			// Nothing was sent. A request's part for one shard travels to a
			// replica on another node as one bus message.
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: "BodyTooLarge",
				Msg: fmt.Sprintf("%s to node %s: %d bytes exceed the bus's messages of %d bytes; send fewer documents per request", op, tag, len(data), n.bus.nc.MaxPayload())}
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("%s to node %s: no reply before the deadline: %w", op, tag, errTimeout)
		}
		return nil, fmt.Errorf("%s to node %s: %w", op, tag, err)
	}
	if st := reply.Header.Get("Status"); st != "200" {
		return nil, replyError(reply)
	}
	return reply.Data, nil
}

// setReplyError puts err into reply: its status and type, and what a
// refusal tells the router, in the headers, its message as the body.
func setReplyError(reply *nats.Msg, err error) {
	ae := toAPIError(err)
	reply.Header.Set("Status", strconv.Itoa(ae.Status))
	reply.Header.Set("Error-Type", ae.Type)
	if ae.Owner != nil {
		reply.Header.Set("Owner-Shard", strconv.Itoa(ae.Owner.Shard))
		reply.Header.Set("Owner-Etag", strconv.FormatUint(ae.Owner.RecordEtag, 10))
	}
	if ae.AskAgain {
		reply.Header.Set("Ask-Again", "true")
	}
	reply.Data = []byte(ae.Msg)
}

// replyError reads the error setReplyError put into a reply that is not a
// 200; a reply without a status is a 502.
func replyError(reply *nats.Msg) *apiError {
	code, _ := strconv.Atoi(reply.Header.Get("Status"))
	if code == 0 {
		code = http.StatusBadGateway
	}
	ae := &apiError{Status: code, Type: reply.Header.Get("Error-Type"), Msg: string(reply.Data)}
	shard, serr := strconv.Atoi(reply.Header.Get("Owner-Shard"))
	etag, eerr := strconv.ParseUint(reply.Header.Get("Owner-Etag"), 10, 64)
	if serr == nil && eerr == nil {
		ae.Owner = &ownerHint{Shard: shard, RecordEtag: etag}
	}
	ae.AskAgain = reply.Header.Get("Ask-Again") == "true"
	return ae
}

// leftAnswerWait bounds how long a request in flight to a node that
// announced a clean stop waits for its answer after the node's down
// signal: the node answers within milliseconds as it drains its bus
// connection; a node that died while stopping gets a 504 after it.
const leftAnswerWait = 2 * time.Second

// errTimeout means a node did not answer in time: the request may or may
// not have executed there.
var errTimeout = errors.New("timed out")
