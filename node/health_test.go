package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestRestartFiresDownSignal: a node heard with a new incarnation restarted,
// so requests waiting on its old process are released, even though it never
// went quiet long enough to be found down.
func TestRestartFiresDownSignal(t *testing.T) {
	h := newHealth("A")
	h.heard("B", "one")
	sig := h.downSignal("B")
	h.heard("B", "one")
	select {
	case <-sig:
		t.Fatal("down signal fired for a heartbeat of the same incarnation")
	default:
	}
	h.heard("B", "two")
	select {
	case <-sig:
	default:
		t.Fatal("no down signal when B came back as a new incarnation")
	}
	if !h.up("B") {
		t.Fatal("B is not up after its new incarnation's heartbeat")
	}
}

// TestRequestCountsAsWordFromItsRun: a node-to-node request is word from
// the run that sent it, as its heartbeat is: a node known down since it
// announced a clean stop is up again once its next run asks something,
// before that run's first heartbeat. A late request of the run that
// announced the stop, and one of another run while the run heard lately
// still beats, change nothing.
func TestRequestCountsAsWordFromItsRun(t *testing.T) {
	h := newHealth("A")
	h.heard("B", "one")
	h.markLeft("B", "one")
	if !h.knownDown("B") {
		t.Fatal("B is not known down after announcing a clean stop")
	}
	h.heardRequest("B", "one")
	if !h.knownDown("B") {
		t.Error("a request of the run that announced its stop counted B up")
	}
	h.heardRequest("B", "two")
	if h.knownDown("B") || !h.up("B") || h.incarnation("B") != "two" {
		t.Errorf("after a request of B's next run: known down %v, up %v, incarnation %q", h.knownDown("B"), h.up("B"), h.incarnation("B"))
	}
	h.heard("C", "one")
	sig := h.downSignal("C")
	h.heardRequest("C", "zero")
	if h.incarnation("C") != "one" {
		t.Errorf("a request of another run of C, heard lately as one: incarnation %q", h.incarnation("C"))
	}
	select {
	case <-sig:
		t.Error("a request of another run fired C's down signal")
	default:
	}
	h.heardRequest("A", "x")
	if h.incarnation("A") != "" {
		t.Error("this node's own request was recorded")
	}

	// Through the bus: the request's Shardnode-From is recorded before
	// its op runs, whatever the op.
	n := testNode(t, t.TempDir())
	n.health.heard("R", "1")
	n.health.markLeft("R", "1")
	m := nats.NewMsg(n.rpcSubject(n.cfg.Node.Tag))
	m.Header.Set("Op", "no.such.op")
	m.Header.Set(fromHeader, "R 2")
	if _, err := n.bus.nc.RequestMsg(m, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n.health.knownDown("R") || n.health.incarnation("R") != "2" {
		t.Errorf("after a request from R's next run: known down %v, incarnation %q", n.health.knownDown("R"), n.health.incarnation("R"))
	}
}

// TestStoppingNodeMakesNoPasses: a node that announced the end of its
// drain stays up for routing (it still answers) but not for resharding,
// whose passes the other members make from then on; its next run is up
// for both. Through the bus, as Close announces it.
func TestStoppingNodeMakesNoPasses(t *testing.T) {
	n := testNode(t, t.TempDir())
	n.health.heard("R", "1")
	c := reshardCluster{n}
	if !c.Up("R") {
		t.Fatal("R, just heard, is not up for resharding")
	}
	if err := n.bus.nc.Publish(n.stoppingSubject(), []byte("R 1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "R's stop to be heard", func() bool { return n.health.isStopping("R") })
	if c.Up("R") || !n.health.up("R") {
		t.Errorf("R stopping: up for resharding %v (want false), for routing %v (want true)", c.Up("R"), n.health.up("R"))
	}
	n.health.heard("R", "2")
	if !c.Up("R") {
		t.Error("R's next run is not up for resharding")
	}
	// A late notice of the earlier run changes nothing. Q's notice, sent
	// after it on the same subject, is handled after it.
	n.health.heard("Q", "1")
	for _, m := range []string{"R 1", "Q 1"} {
		if err := n.bus.nc.Publish(n.stoppingSubject(), []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "Q's stop to be heard", func() bool { return n.health.isStopping("Q") })
	if !c.Up("R") {
		t.Error("a late stopping notice of R's earlier run took its next run for stopping")
	}
}

// TestDocumentsFitOneBusMessage: the embedded server's messages carry the
// largest document the configuration allows, within NATS's bounds, and a
// node never accepts a document larger than one message.
func TestDocumentsFitOneBusMessage(t *testing.T) {
	for _, c := range []struct{ doc, want int64 }{
		{1 << 20, 8 << 20},
		{16 << 20, 16<<20 + busDocumentSlack},
		{100 << 20, 64 << 20},
	} {
		if got := embeddedMaxPayload(c.doc); int64(got) != c.want {
			t.Errorf("max document %d: payload %d, want %d", c.doc, got, c.want)
		}
	}
	n := testNode(t, t.TempDir())
	if n.maxDocBytes != n.cfg.HTTP.MaxDocumentBytes || n.maxDocBytes > n.bus.nc.MaxPayload()-busDocumentSlack {
		t.Fatalf("max document %d bytes with a bus payload of %d (configured %d)", n.maxDocBytes, n.bus.nc.MaxPayload(), n.cfg.HTTP.MaxDocumentBytes)
	}
}

// TestOversizedBusRequestIsClear: a request larger than one bus message is
// refused as too large (413, nothing sent), not as an internal error.
func TestOversizedBusRequestIsClear(t *testing.T) {
	n := testNode(t, t.TempDir())
	big := make([]byte, n.bus.nc.MaxPayload()+1)
	_, err := n.callRaw(context.Background(), n.cfg.Node.Tag, "shard.write", big)
	var ae *apiError
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge || ae.Type != "BodyTooLarge" {
		t.Fatalf("oversized request: %v", err)
	}
}

// TestStoppingNodeAnswersEveryRequest: once a node's loops are told to stop
// (the middle of a clean stop), every node-to-node request it receives is
// answered NodeStopping, none left without an answer for the asking node
// to give up on as a 504 of unknown outcome.
func TestStoppingNodeAnswersEveryRequest(t *testing.T) {
	n := testNode(t, t.TempDir())
	n.cancel() // what Close does after the drain and the HTTP shutdown
	for i := range 40 {
		m := nats.NewMsg(n.rpcSubject(n.cfg.Node.Tag))
		m.Header.Set("Op", "shard.get")
		reply, err := n.bus.nc.RequestMsg(m, 2*time.Second)
		if err != nil {
			t.Fatalf("request %d: no answer: %v", i, err)
		}
		if got := reply.Header.Get("Error-Type"); got != "NodeStopping" || reply.Header.Get("Status") != "503" {
			t.Fatalf("request %d: status %s %s, want 503 NodeStopping", i, reply.Header.Get("Status"), got)
		}
	}
}

// TestOpCutShortByTheStopAnswersNodeStopping: an op that the node's stop
// cancels half way (a listing's scan, a wait for the record) is answered
// as the retryable NodeStopping, not as the InternalError of a canceled
// context, which the router passed on to its client as a 500.
func TestOpCutShortByTheStopAnswersNodeStopping(t *testing.T) {
	n := testNode(t, t.TempDir())
	running := make(chan struct{})
	n.rpcHandlers["test.block"] = func(ctx context.Context, _ []byte) (any, error) {
		close(running)
		<-ctx.Done()
		return nil, fmt.Errorf("list shard 0 of %q: %w", "db", ctx.Err())
	}
	replies := make(chan *nats.Msg, 1)
	go func() {
		m := nats.NewMsg(n.rpcSubject(n.cfg.Node.Tag))
		m.Header.Set("Op", "test.block")
		reply, err := n.bus.nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Errorf("no answer: %v", err)
		}
		replies <- reply
	}()
	<-running
	n.cancel() // what Close does after the drain and the HTTP shutdown
	if reply := <-replies; reply != nil {
		if got := reply.Header.Get("Error-Type"); got != "NodeStopping" || reply.Header.Get("Status") != "503" {
			t.Fatalf("status %s %s (%s), want 503 NodeStopping", reply.Header.Get("Status"), got, reply.Data)
		}
	}
}

// TestRequestToACleanlyStoppingNodeWaitsForItsAnswer: a request in flight
// to a node that announced a clean stop is answered by that node as it
// closes (NodeStopping, retryable); the down signal that another request's
// "no responders" fires meanwhile must not turn it into a 504 of unknown
// outcome.
func TestRequestToACleanlyStoppingNodeWaitsForItsAnswer(t *testing.T) {
	n := testNode(t, t.TempDir())
	n.health.heard("Z", "z1")
	received := make(chan struct{})
	answer := make(chan struct{})
	sub, err := n.bus.nc.Subscribe(n.rpcSubject("Z"), func(m *nats.Msg) {
		close(received)
		<-answer // the stopping node answers as it drains its connection
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set("Status", "503")
		reply.Header.Set("Error-Type", "NodeStopping")
		reply.Data = []byte("node Z is stopping") // without a body NATS reads a 503 as "no responders"
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	done := make(chan error, 1)
	go func() {
		_, err := n.callRawWith(context.Background(), "Z", "shard.write.bin", nil, nil)
		done <- err
	}()
	<-received
	n.health.markLeft("Z", "z1") // its announcement
	n.health.markDown("Z")       // another request found no responder
	select {
	case err := <-done:
		t.Fatalf("the request gave up before the node answered: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(answer)
	err = <-done
	var ae *apiError
	if !errors.As(err, &ae) || ae.Type != "NodeStopping" || !retryable(err) {
		t.Fatalf("got %v, want the node's retryable NodeStopping", err)
	}
	// A node that did not announce a clean stop is given up on at once.
	n.health.heard("Y", "y1")
	yReceived := make(chan struct{}, 1)
	ysub, err := n.bus.nc.Subscribe(n.rpcSubject("Y"), func(m *nats.Msg) { yReceived <- struct{}{} }) // and never answers
	if err != nil {
		t.Fatal(err)
	}
	defer ysub.Unsubscribe()
	go func() {
		_, err := n.callRawWith(context.Background(), "Y", "shard.write.bin", nil, nil)
		done <- err
	}()
	<-yReceived // the request is in flight
	n.health.markDown("Y")
	select {
	case err := <-done:
		if !errors.Is(err, errTimeout) {
			t.Fatalf("a request to a node found down: %v, want a timeout", err)
		}
	case <-time.After(time.Second):
		t.Fatal("a request to a node found down kept waiting")
	}
}

// TestNeverHeardNodeIsFoundDownAfterTheGrace: a node this one never heard
// from (it froze, or its routes never connected) is found down once a
// request to it stayed unanswered for the grace the bus routes get to
// connect, counted from this node's start and from the first request, and
// routing counts it down from then on; before the grace, a request to it
// is not cut short.
func TestNeverHeardNodeIsFoundDownAfterTheGrace(t *testing.T) {
	h := newHealth("A")
	h.reachGrace = 300 * time.Millisecond
	sig := h.downSignal("B")
	h.sweep()
	select {
	case <-sig:
		t.Fatal("a request to a node not heard yet was cut short at once, within the grace")
	default:
	}
	if h.knownDown("B") {
		t.Fatal("B counted down within the grace")
	}
	deadline := time.Now().Add(10 * time.Second)
	for fired := false; !fired; {
		if time.Now().After(deadline) {
			t.Fatal("B, asked and never heard, was not found down after the grace")
		}
		time.Sleep(20 * time.Millisecond)
		h.sweep()
		select {
		case <-sig:
			fired = true
		default:
		}
	}
	if !h.knownDown("B") {
		t.Fatal("B found down but routing does not count it down")
	}
	h.heard("B", "one")
	if h.knownDown("B") || !h.up("B") {
		t.Fatal("B heard again but still counted down")
	}

	// Long after this node's start, the grace counts from the first
	// request to the node.
	h.quietSince = time.Now().Add(-time.Hour)
	sig = h.downSignal("C")
	h.sweep()
	select {
	case <-sig:
		t.Fatal("a request to a node never heard was cut short before the grace from the request")
	default:
	}
	if h.knownDown("C") {
		t.Fatal("C, never asked until now, counted down")
	}
}
