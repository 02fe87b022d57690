package node

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shardnode/shardnode/storage"
)

// TestOnceTableRunsEachNumberOnce: copies of one router's write number run
// it once and get its answer, those arriving during the run included; the
// router's floor forgets the answers below it, and a copy below the floor
// is refused with an unknown outcome; so is a later copy of a number this
// run of the node never saw when the router's first copy went to another
// run (a restart); a first copy runs whatever run it names; answers go
// once past their time.
func TestOnceTableRunsEachNumberOnce(t *testing.T) {
	tbl := newOnceTable()
	ctx := context.Background()
	var runs atomic.Int32
	release := make(chan struct{})
	run := func() ([]byte, error) {
		runs.Add(1)
		<-release
		return []byte("answer"), nil
	}
	var wg sync.WaitGroup
	answers := make([]string, 5)
	for i := range answers {
		wg.Go(func() {
			raw, err := tbl.do(ctx, "B r1", 7, 1, i+1, "me", "me", time.Second, run)
			if err != nil {
				t.Errorf("copy %d: %v", i+1, err)
			}
			answers[i] = string(raw)
		})
	}
	waitFor(t, 5*time.Second, "the first copy to run", func() bool { return runs.Load() == 1 })
	close(release)
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("write 7 ran %d times, want once", runs.Load())
	}
	for i, a := range answers {
		if a != "answer" {
			t.Fatalf("copy %d answered %q, want the run's answer", i+1, a)
		}
	}
	once := func(from string, seq, floor uint64, send int, target string) ([]byte, error) {
		return tbl.do(ctx, from, seq, floor, send, target, "me", time.Second, func() ([]byte, error) {
			runs.Add(1)
			return []byte(strconv.FormatUint(seq, 10)), nil
		})
	}
	unknown := func(err error) bool {
		var ae *apiError
		return errors.As(err, &ae) && ae.Type == "WriteOutcomeUnknown" && ae.Status == http.StatusGatewayTimeout
	}
	// Another router's number 7 is another write.
	if raw, err := once("C r1", 7, 1, 1, "me"); err != nil || string(raw) != "7" || runs.Load() != 2 {
		t.Fatalf("router C's write 7: %q, %v, %d runs", raw, err, runs.Load())
	}
	// The floor passes 7: a late copy of it is refused, not run.
	if _, err := once("B r1", 8, 8, 1, "me"); err != nil {
		t.Fatal(err)
	}
	if _, err := once("B r1", 7, 7, 2, "me"); !unknown(err) || runs.Load() != 3 {
		t.Fatalf("a copy of write 7 below the floor: %v (%d runs), want WriteOutcomeUnknown, not run", err, runs.Load())
	}
	// A restart between copies: a later copy the first of which went to
	// another run is refused; a first copy runs.
	if _, err := once("B r1", 9, 8, 2, "earlier"); !unknown(err) || runs.Load() != 3 {
		t.Fatalf("a second copy whose first went to another run: %v (%d runs), want WriteOutcomeUnknown, not run", err, runs.Load())
	}
	if raw, err := once("B r1", 10, 8, 1, "earlier"); err != nil || string(raw) != "10" || runs.Load() != 4 {
		t.Fatalf("a first copy naming another run: %q, %v (%d runs), want it run", raw, err, runs.Load())
	}
	// A second copy whose first never arrived runs.
	if raw, err := once("B r1", 11, 8, 3, "me"); err != nil || string(raw) != "11" || runs.Load() != 5 {
		t.Fatalf("a third copy of a write never seen: %q, %v (%d runs), want it run", raw, err, runs.Load())
	}
	// A refused copy leaves no answer, but its router's floor stays
	// while a late copy below it may come: such a copy is refused, not
	// run, even once the answers around it are gone.
	if _, err := once("E r1", 3, 3, 2, "earlier"); !unknown(err) {
		t.Fatalf("router E's second copy to another run: %v", err)
	}
	tbl.mu.Lock()
	tbl.sweep(time.Now().Add(2 * time.Second))
	tbl.mu.Unlock()
	if _, err := once("E r1", 2, 1, 1, "me"); !unknown(err) || runs.Load() != 5 {
		t.Fatalf("a late first copy below router E's floor after a sweep: %v (%d runs), want WriteOutcomeUnknown, not run", err, runs.Load())
	}
	// Past their time the answers go.
	if got := tbl.size(); got != 4 { // B's 8, 10, 11 and C's 7
		t.Fatalf("%d answers kept, want 4", got)
	}
	tbl.mu.Lock()
	tbl.sweep(time.Now().Add(time.Second + onceSlack + time.Millisecond))
	tbl.mu.Unlock()
	if got := tbl.size(); got != 0 {
		t.Fatalf("%d answers kept past their time, want none", got)
	}
}

// TestOnceTableAnswersLaterCopiesFromTheRun: a later copy of a write that
// runs here is answered with the run's answer when the run ends (and at
// once after), without running or waiting anywhere; a copy of a number
// with no run here, or below the router's floor, is left to do.
func TestOnceTableAnswersLaterCopiesFromTheRun(t *testing.T) {
	tbl := newOnceTable()
	release := make(chan struct{})
	var runs atomic.Int32
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_, _ = tbl.do(context.Background(), "B r1", 9, 1, 1, "me", "me", time.Second, func() ([]byte, error) {
			runs.Add(1)
			<-release
			return []byte("nine"), nil
		})
	}()
	waitFor(t, 5*time.Second, "write 9 to run", func() bool { return runs.Load() == 1 })
	got := make(chan string, 2)
	answer := func(raw []byte, err error) {
		if err != nil {
			t.Errorf("a copy of write 9 answered %v", err)
		}
		got <- string(raw)
	}
	if !tbl.attach("B r1", 9, 1, time.Second, answer) {
		t.Fatal("a copy of running write 9 was not attached to its run")
	}
	select {
	case a := <-got:
		t.Fatalf("a copy of write 9 answered %q before its run ended", a)
	default:
	}
	close(release)
	<-ran
	if a := <-got; a != "nine" {
		t.Fatalf("a copy of write 9 attached to its run answered %q, want the run's", a)
	}
	if !tbl.attach("B r1", 9, 1, time.Second, answer) {
		t.Fatal("a copy of ended write 9 was not answered from its run")
	}
	if a := <-got; a != "nine" || runs.Load() != 1 {
		t.Fatalf("a copy after the run answered %q (%d runs), want the run's answer, one run", a, runs.Load())
	}
	for _, c := range []struct {
		from       string
		seq, floor uint64
	}{{"B r1", 10, 1}, {"C r1", 9, 1}, {"B r1", 9, 10}} {
		if tbl.attach(c.from, c.seq, c.floor, time.Second, answer) {
			t.Fatalf("a copy of %s's write %d (floor %d) was answered without a run of it", c.from, c.seq, c.floor)
		}
	}
}

// TestRoutedWriteResentAfterALostAnswerRunsOnce: a write routed to a
// replica on another node whose first copy goes unanswered (lost on the
// bus) is sent again with the same number, and the router gets the answer
// instead of waiting out its attempt; the replica, this test's node,
// runs the copies of one number once: an If-Match write answered twice
// with the same change vector, not refused as a conflict with itself. A
// write whose node is unreachable after an unanswered copy is of unknown
// outcome, not passed on to another member.
func TestRoutedWriteResentAfterALostAnswerRunsOnce(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.health.heard("Z", "z1")

	// The router's side: Z, played on the bus, drops the first copy.
	var mu sync.Mutex
	var copies []nats.Header
	sub, err := n.bus.nc.Subscribe(n.rpcSubject("Z"), func(m *nats.Msg) {
		mu.Lock()
		copies = append(copies, m.Header)
		first := len(copies) == 1
		mu.Unlock()
		if first || m.Header.Get("Op") != opShardWriteOnce {
			return
		}
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Status", "200")
		r.Data, _ = json.Marshal([]storage.Result{{ID: "a", ChangeVector: "Z:1-zz"}})
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	z := &remoteReplica{n: n, tag: "Z", db: "db", shard: 0}
	wctx, wcancel := context.WithTimeout(ctx, 3*writeResendFirst)
	res, err := z.write(wctx, []storage.Op{{Kind: storage.OpPut, ID: "a", Body: []byte(`{"v":1}`)}}, writeConcern{Replicas: 1, Timeout: time.Second}, 0)
	wcancel()
	if err != nil || len(res) != 1 || res[0].ChangeVector != "Z:1-zz" {
		t.Fatalf("a routed write whose first copy was lost: %+v, %v; want the second copy's answer", res, err)
	}
	if got := n.writeResends.Load(); got != 1 {
		t.Fatalf("%d copies counted as sent again, want 1", got)
	}
	mu.Lock()
	if len(copies) != 2 || copies[0].Get(writeSeqHeader) != copies[1].Get(writeSeqHeader) ||
		copies[0].Get(writeSendHeader) != "1" || copies[1].Get(writeSendHeader) != "2" || copies[1].Get(writeTargetHeader) != "z1" {
		t.Fatalf("copies sent: %v; want two of one number, the second naming Z's run", copies)
	}
	mu.Unlock()

	// A copy went out unanswered and the node is then unreachable (the
	// route gone): the write may have run there, so it is of unknown
	// outcome, never "surely not run" (which would send it to another
	// member).
	first := make(chan struct{})
	var once sync.Once
	sub2, err := n.bus.nc.Subscribe(n.rpcSubject("Y"), func(*nats.Msg) { once.Do(func() { close(first) }) })
	if err != nil {
		t.Fatal(err)
	}
	n.health.heard("Y", "y1")
	go func() { <-first; _ = sub2.Unsubscribe() }()
	y := &remoteReplica{n: n, tag: "Y", db: "db", shard: 0}
	wctx, wcancel = context.WithTimeout(ctx, 3*writeResendFirst)
	_, err = y.write(wctx, []storage.Op{{Kind: storage.OpPut, ID: "a", Body: []byte(`{"v":1}`)}}, writeConcern{Replicas: 1, Timeout: time.Second}, 0)
	wcancel()
	if !errors.Is(err, errTimeout) || errors.Is(err, errUnreachable) || retryable(err) {
		t.Fatalf("a write sent, unanswered, then unreachable: %v; want a timeout of unknown outcome", err)
	}

	// The replica's side: two copies of one If-Match write through the
	// bus to this node's own replica.
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 1}`)
	put := c.must(201, "PUT", "/databases/db/docs?id=a", `{"v":1}`).json(t)
	req := writeRequest{DB: "db", Shard: 0, WaitFor: 1, WaitTimeout: time.Second,
		Ops: []storage.Op{{Kind: storage.OpPut, ID: "a", Body: []byte(`{"v":2}`), IfMatch: put["ChangeVector"].(string)}}}
	data := appendWriteRequest(nil, req)
	hdr := func(send int) map[string]string {
		return map[string]string{writeSeqHeader: "41", writeFloorHeader: "41", writeTargetHeader: n.incarnation, writeSendHeader: strconv.Itoa(send)}
	}
	var cvs []string
	for send := 1; send <= 2; send++ {
		raw, err := n.callRawWith(ctx, n.cfg.Node.Tag, opShardWriteOnce, data, hdr(send))
		if err != nil {
			t.Fatalf("copy %d of an If-Match write: %v", send, err)
		}
		var res []storage.Result
		if err := json.Unmarshal(raw, &res); err != nil || len(res) != 1 {
			t.Fatalf("copy %d: %s, %v", send, raw, err)
		}
		cvs = append(cvs, res[0].ChangeVector)
	}
	if cvs[0] != cvs[1] || cvs[0] == put["ChangeVector"] {
		t.Fatalf("the copies answered %v, want one new change vector", cvs)
	}
	doc := c.must(200, "GET", "/databases/db/docs?id=a", "").json(t)
	meta := doc["Results"].([]any)[0].(map[string]any)["@metadata"].(map[string]any)
	if meta["@change-vector"] != cvs[0] {
		t.Fatalf("the document's change vector is %v, want the one write's %s", meta["@change-vector"], cvs[0])
	}
	// A copy without the headers is refused and runs nothing.
	if _, err := n.callRaw(ctx, n.cfg.Node.Tag, opShardWriteOnce, data); err == nil {
		t.Fatal("a write-once request without its number was taken")
	}
}
