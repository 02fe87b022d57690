package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// migrationStep is one "migration" event of GET /databases/{db}/events,
// stamped with the time the benchmark read it.
type migrationStep struct {
	At               time.Time `json:"-"`
	Bucket           uint32
	MigrationIndex   uint64
	SourceShard      int
	DestinationShard int
	Step             string // Moving, Moved, OwnershipTransferred, Completed, Error
	OperationID      string `json:"OperationId"`
}

// Migration steps as the events name them.
const (
	stepMoving      = "Moving"
	stepMoved       = "Moved"
	stepTransferred = "OwnershipTransferred"
	stepCompleted   = "Completed"
)

// operationState is the part of an "operation" event (or of GET
// /databases/{db}/resharding/{id}) the benchmark reads.
type operationState struct {
	ID             string `json:"OperationId"`
	Status         string
	BucketsTotal   int64
	BucketsDone    int64
	DocumentsMoved int64
	BytesMoved     int64
	Errors         []string
}

// eventStream follows a database's server-sent events. It keeps every
// migration step with its arrival time and tells listeners when an
// operation completes.
type eventStream struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	steps     []migrationStep
	completed map[string]operationState
	waiters   map[string]chan struct{}
	onStep    func(migrationStep) // called on the reading goroutine
	err       error
}

// openEvents connects to url (a database's /events). The server sends its
// headers with the first event, and sends one at once only if the record
// already holds an operation: run one first (see noopOperation), or this
// call waits for the next change.
func openEvents(ctx context.Context, hc *http.Client, url string, onStep func(migrationStep)) (*eventStream, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := hc.Do(req)
		got <- answer{resp, err}
	}()
	var a answer
	select {
	case a = <-got:
	case <-time.After(30 * time.Second):
		cancel()
		a = <-got
		if a.err == nil {
			a.resp.Body.Close()
		}
		return nil, fmt.Errorf("GET %s: no event within 30s", url)
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	if a.err != nil {
		cancel()
		return nil, a.err
	}
	if a.resp.StatusCode != http.StatusOK {
		a.resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("GET %s: status %d", url, a.resp.StatusCode)
	}
	es := &eventStream{cancel: cancel, done: make(chan struct{}), completed: map[string]operationState{}, waiters: map[string]chan struct{}{}, onStep: onStep}
	go es.read(a.resp)
	return es, nil
}

// read parses the stream until it ends.
func (es *eventStream) read(resp *http.Response) {
	defer close(es.done)
	defer resp.Body.Close()
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	var event string
	var data strings.Builder
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			es.mu.Lock()
			es.err = err
			es.mu.Unlock()
			return
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			es.dispatch(event, data.String())
			event = ""
			data.Reset()
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimSpace(line[len("data:"):]))
		}
	}
}

func (es *eventStream) dispatch(event, data string) {
	now := time.Now()
	switch event {
	case "migration":
		var s migrationStep
		if json.Unmarshal([]byte(data), &s) != nil {
			return
		}
		s.At = now
		es.mu.Lock()
		es.steps = append(es.steps, s)
		es.mu.Unlock()
		if es.onStep != nil {
			es.onStep(s)
		}
	case "operation":
		var op operationState
		if json.Unmarshal([]byte(data), &op) != nil || op.Status == "Running" {
			return
		}
		es.mu.Lock()
		es.completed[op.ID] = op
		if ch, ok := es.waiters[op.ID]; ok {
			close(ch)
			delete(es.waiters, op.ID)
		}
		es.mu.Unlock()
	}
}

// finished returns a channel closed once operation id has ended (status
// other than Running) as the stream saw it.
func (es *eventStream) finished(id string) <-chan struct{} {
	es.mu.Lock()
	defer es.mu.Unlock()
	ch := make(chan struct{})
	if _, ok := es.completed[id]; ok {
		close(ch)
		return ch
	}
	if old, ok := es.waiters[id]; ok {
		return old
	}
	es.waiters[id] = ch
	return ch
}

// migrationSteps returns a copy of the steps seen so far.
func (es *eventStream) migrationSteps() []migrationStep {
	es.mu.Lock()
	defer es.mu.Unlock()
	return append([]migrationStep(nil), es.steps...)
}

// close ends the stream.
func (es *eventStream) close() {
	es.cancel()
	<-es.done
}

// migrationTiming is one bucket migration as the event stream saw it.
type migrationTiming struct {
	Bucket    uint32
	Index     uint64
	FirstStep string    // the first step seen (Moving unless events coalesced)
	Start     time.Time // arrival of the first step seen
	Moved     time.Time // arrival of Moved (zero if never seen)
	Flip      time.Time // arrival of OwnershipTransferred (zero if never seen)
	Completed time.Time // arrival of Completed (cleanup done)
}

// transfer is Moving → OwnershipTransferred; ok is false when the stream
// did not see both (coalesced steps).
func (m migrationTiming) transfer() (d time.Duration, ok bool) {
	if m.FirstStep != stepMoving || m.Flip.IsZero() {
		return 0, false
	}
	return m.Flip.Sub(m.Start), true
}

// phases splits a timed migration: Moving → Moved (the source sends the
// bucket until nothing newer is left) and Moved → OwnershipTransferred
// (every destination replica confirms); ok is false unless all three
// steps were seen.
func (m migrationTiming) phases() (send, confirm time.Duration, ok bool) {
	if m.FirstStep != stepMoving || m.Moved.IsZero() || m.Flip.IsZero() {
		return 0, 0, false
	}
	return m.Moved.Sub(m.Start), m.Flip.Sub(m.Moved), true
}

// timings groups the steps of operation op's migrations by migration, in
// start order. The node's record watch coalesces applies, so a fast step
// can be skipped: a migration first seen after Moving has FirstStep set to
// what was seen, and one whose flip was skipped has a zero Flip.
func timings(steps []migrationStep, op string) []migrationTiming {
	type key struct {
		b uint32
		i uint64
	}
	byKey := map[key]*migrationTiming{}
	var order []key
	for _, s := range steps {
		if s.OperationID != op {
			continue
		}
		k := key{s.Bucket, s.MigrationIndex}
		m, ok := byKey[k]
		if !ok {
			m = &migrationTiming{Bucket: s.Bucket, Index: s.MigrationIndex, FirstStep: s.Step, Start: s.At}
			byKey[k] = m
			order = append(order, k)
		}
		switch s.Step {
		case stepMoved:
			if m.Moved.IsZero() {
				m.Moved = s.At
			}
		case stepTransferred:
			if m.Flip.IsZero() {
				m.Flip = s.At
			}
		case stepCompleted:
			m.Completed = s.At
		}
	}
	out := make([]migrationTiming, len(order))
	for i, k := range order {
		out[i] = *byKey[k]
	}
	return out
}
