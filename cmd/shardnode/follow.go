package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// This file follows one resharding operation until it finishes: it reads
// the database's event stream (falling back to polling the operation) and
// feeds a tracker, which draws the progress.

// followOptions tune how an operation is followed; tests shorten them.
type followOptions struct {
	pollEvery    time.Duration // polling when the event stream failed
	refreshEvery time.Duration // re-reading the operation beside the stream, for stuck-bucket alerts
	redrawEvery  time.Duration // checking whether the progress needs a redraw or a heartbeat line
	notFoundFor  time.Duration // how long a just-started operation may be unknown to the node
	requestLimit time.Duration // timeout of one poll
	// plainEvery is the least time between two plain lines that only
	// change counts: a move of ten thousand buckets with data would
	// otherwise log ten thousand lines. A change of status, note, alerts
	// or trouble is printed at once.
	plainEvery time.Duration
}

// defaultFollowOptions are the command's settings.
var defaultFollowOptions = followOptions{
	pollEvery:    500 * time.Millisecond,
	refreshEvery: 2 * time.Second,
	redrawEvery:  100 * time.Millisecond,
	notFoundFor:  5 * time.Second,
	requestLimit: 5 * time.Second,
	plainEvery:   time.Second,
}

// follower follows one operation of one database.
type follower struct {
	c    *apiClient
	db   string
	id   string
	opts followOptions
	tr   *tracker
	now  func() time.Time
}

// run follows the operation until it is settled (finished, and, when it
// was cancelled, its bucket in flight done too), ctx ends or the node says
// the operation or database does not exist. It returns the last state seen.
func (f *follower) run(ctx context.Context) (*operation, error) {
	begun := f.now()
	events := make(chan sseEvent)
	streamErr := make(chan error, 1)
	sctx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	go func() {
		streamErr <- f.c.stream(sctx, dbPath(f.db, "events"), func(ev sseEvent) bool {
			select {
			case events <- ev:
				return true
			case <-sctx.Done():
				return false
			}
		})
	}()
	poll := time.NewTicker(f.opts.refreshEvery)
	defer poll.Stop()
	redraw := time.NewTicker(f.opts.redrawEvery)
	defer redraw.Stop()
	if err := f.poll(ctx, begun); err != nil {
		return f.tr.op, err
	}
	for {
		if f.tr.op.settled() {
			if !f.tr.waitedInFlight() {
				break
			}
			// A bucket in flight after the cancel finished, as its
			// "Completed" step told: read the operation once more for
			// its final figures (the step carries none).
			if err := f.poll(ctx, begun); err != nil {
				return f.tr.op, err
			}
			if f.tr.op.settled() {
				break
			}
		}
		select {
		case <-ctx.Done():
			return f.tr.op, ctx.Err()
		case ev := <-events:
			if err := f.handle(ev); err != nil {
				return f.tr.op, err
			}
		case err := <-streamErr:
			if ctx.Err() != nil {
				return f.tr.op, ctx.Err()
			}
			events = nil
			f.tr.message("NOTE", fmt.Sprintf("event stream unavailable (%v); polling every %s", err, f.opts.pollEvery))
			poll.Reset(f.opts.pollEvery)
		case <-poll.C:
			if err := f.poll(ctx, begun); err != nil {
				return f.tr.op, err
			}
		case <-redraw.C:
			f.tr.tick()
		}
	}
	return f.tr.op, nil
}

// handle applies one event of the stream.
func (f *follower) handle(ev sseEvent) error {
	switch ev.Event {
	case "operation":
		var op operation
		if err := json.Unmarshal([]byte(ev.Data), &op); err != nil {
			return fmt.Errorf("bad operation event %q: %w", ev.Data, err)
		}
		if op.OperationID == f.id {
			f.tr.setOp(op)
		}
	case "migration":
		var m migrationEvent
		if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
			return fmt.Errorf("bad migration event %q: %w", ev.Data, err)
		}
		if m.OperationID == f.id {
			f.tr.migration(m)
		}
	case "deleted":
		return fmt.Errorf("database %q was deleted", f.db)
	}
	return nil
}

// poll reads the operation once. Trouble reaching the node is shown and
// retried; a node that does not know the operation (after a grace period
// for a just-started one) or the database ends the follow.
func (f *follower) poll(ctx context.Context, begun time.Time) error {
	pctx, cancel := context.WithTimeout(ctx, f.opts.requestLimit)
	defer cancel()
	var op operation
	err := f.c.getJSON(pctx, dbPath(f.db, "resharding", f.id), nil, &op)
	var se *serverError
	switch {
	case err == nil:
		f.tr.setNote("")
		f.tr.setOp(op)
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(err, &se) && se.Status == http.StatusNotFound && se.Type == "OperationNotFound" && f.tr.op == nil && f.now().Sub(begun) < f.opts.notFoundFor:
		return nil // the node has not applied the start yet
	case errors.As(err, &se) && se.Status >= 400 && se.Status < 500:
		return err
	default:
		f.tr.setNote(fmt.Sprintf("retrying: %v", err))
		return nil
	}
}

// rateWindow is how far back the shown rates look.
const rateWindow = 5 * time.Second

// rateSample is the progress at one moment, for the rates.
type rateSample struct {
	at             time.Time
	buckets, bytes int64 // buckets: rateCount of the operation
}

// tracker turns operation states into output: on a terminal one line
// redrawn in place, otherwise one plain line per change; alerts and errors
// on lines of their own, each once.
type tracker struct {
	out   io.Writer
	tty   bool
	color bool
	width func() int
	now   func() time.Time
	// since is when the operation started, for the elapsed time; zero
	// means the operation's StartedAt.
	since time.Time

	op   *operation
	note string
	// total estimates the operation's bytes (see estimateTotal); 0 unknown.
	// estimate, if set, makes it from the first state of the operation
	// seen running, once.
	total     int64
	estimate  func(operation) int64
	estimated bool
	// waitSince is when the operation was first seen finished with buckets
	// still in flight (a cancel); waited is how long it then took to
	// settle, as this client saw it. wall is the time watched until it
	// settled. The last line and the summary divide by the same duration.
	waitSince time.Time
	waited    time.Duration
	wall      time.Duration

	samples []rateSample
	// lastCounts and lastNews are plainKey's parts of the last plain
	// line; pending says the counts changed since, unprinted.
	lastCounts, lastNews string
	pending              bool
	plainEvery           time.Duration // see followOptions
	lastDraw             time.Time
	dirty                bool
	drawn                bool // a progress line is on the terminal
	alerts               map[string]bool
	errs                 map[string]bool
}

// newTracker returns a tracker writing to out.
func newTracker(out io.Writer, tty bool, width func() int, now func() time.Time) *tracker {
	if width == nil {
		width = func() int { return 100 }
	}
	return &tracker{out: out, tty: tty, color: tty && useColor(), width: width, now: now, alerts: map[string]bool{}, errs: map[string]bool{}}
}

// setOp records a new state of the operation. A state older than the one
// shown (a slow poll racing the stream) is ignored. A finished operation
// still takes new states until it is settled: a cancelled one's bucket in
// flight finishes its move and adds to the counts.
func (t *tracker) setOp(op operation) {
	if t.op != nil && (op.BucketsDone < t.op.BucketsDone || op.DocumentsMoved < t.op.DocumentsMoved ||
		(t.op.finished() && !op.finished())) {
		return
	}
	if op.CurrentBuckets == nil && t.op != nil && !op.finished() {
		op.CurrentBuckets = t.op.CurrentBuckets
	}
	if t.estimate != nil && !t.estimated && !op.finished() {
		t.estimated = true
		t.total = t.estimate(op)
	}
	wasSettled := t.op != nil && t.op.settled()
	t.op = &op
	if t.since.IsZero() && !op.StartedAt.IsZero() {
		t.since = op.StartedAt
	}
	t.noteSettling(wasSettled)
	t.sample()
	for _, e := range op.Errors {
		if !t.errs[e] {
			t.errs[e] = true
			t.message("ERROR", e)
		}
	}
	for _, a := range op.Alerts {
		if k := alertKey(a); !t.alerts[k] {
			t.alerts[k] = true
			t.message("ALERT", a)
		}
	}
	t.changed()
}

// waitedInFlight reports whether the operation was seen finished with
// buckets still in flight.
func (t *tracker) waitedInFlight() bool {
	return !t.waitSince.IsZero()
}

// noteSettling notes when the operation is first seen waiting for its
// buckets in flight, and when it settles; wasSettled is whether it was
// settled before this state. The times are taken once, so every line
// after that divides by the same duration.
func (t *tracker) noteSettling(wasSettled bool) {
	now := t.now()
	switch {
	case t.op.finished() && !t.op.settled() && t.waitSince.IsZero():
		t.waitSince = now
	case t.op.settled() && !wasSettled:
		if !t.waitSince.IsZero() {
			t.waited = now.Sub(t.waitSince)
		}
		if !t.since.IsZero() {
			t.wall = now.Sub(t.since)
		}
	}
}

// migration records one step of one of the operation's buckets.
func (t *tracker) migration(m migrationEvent) {
	if t.op == nil || t.op.settled() {
		return
	}
	op := *t.op
	cur := slices.Clone(op.CurrentBuckets)
	i := slices.IndexFunc(cur, func(b bucketMigration) bool { return b.Bucket == m.Bucket })
	switch {
	case m.Step == "Completed":
		if i >= 0 {
			cur = slices.Delete(cur, i, i+1)
		}
	case i < 0:
		// A bucket not seen yet; an "Error" step stands in for its status
		// until the next state of the operation tells it.
		b := bucketMigration{Bucket: m.Bucket, SourceShard: m.SourceShard, DestinationShard: m.DestinationShard,
			Status: m.Step, MigrationIndex: m.MigrationIndex, OperationID: m.OperationID}
		if m.Step == "Error" {
			b.Failures, b.LastError = 1, m.Error
		}
		cur = append(cur, b)
	case m.Step == "Error":
		cur[i].Failures++
		cur[i].LastError = m.Error
	default:
		if cur[i].Status != m.Step {
			cur[i].Status, cur[i].Stuck, cur[i].InStatusFor = m.Step, false, ""
		}
	}
	op.CurrentBuckets = cur
	t.op = &op
	t.noteSettling(false)
	t.changed()
}

// setNote sets the transient note shown with the progress.
func (t *tracker) setNote(s string) {
	if s != t.note {
		t.note = s
		t.changed()
	}
}

// view is what the progress line shows now.
func (t *tracker) view() progressView {
	v := progressView{Op: *t.op, Note: t.note, Total: t.total}
	if w := inFlightText(*t.op); w != "" {
		v.Note = strings.TrimPrefix(v.Note+"; "+w, "; ")
	}
	now := t.now()
	switch {
	case t.op.settled():
		v.Elapsed = opDuration(*t.op, t.wall, t.waited)
	case !t.since.IsZero():
		v.Elapsed = now.Sub(t.since)
	}
	v.BucketRate, v.ByteRate = t.rates(now, v.Elapsed)
	return v
}

// sample records the progress now and forgets samples out of the window.
func (t *tracker) sample() {
	now := t.now()
	t.samples = append(t.samples, rateSample{now, rateCount(*t.op), movedBytes(*t.op)})
	// Keep one sample at or before the window's start, so the window is
	// spanned.
	for len(t.samples) > 2 && now.Sub(t.samples[1].at) >= rateWindow {
		t.samples = t.samples[1:]
	}
}

// rates returns buckets (rateCount: those that moved with data, when the
// server counts them) and bytes per second over the recent window, over
// the whole operation while the window is shorter than a second or once
// it settled, or -1 (unknown) during the first second.
func (t *tracker) rates(now time.Time, elapsed time.Duration) (float64, float64) {
	count := rateCount(*t.op)
	if t.op.settled() {
		if s := elapsed.Seconds(); s > 0 {
			return float64(count) / s, float64(t.op.BytesMoved) / s
		}
		return -1, -1
	}
	if len(t.samples) >= 2 {
		first, last := t.samples[0], t.samples[len(t.samples)-1]
		if dt := now.Sub(first.at).Seconds(); dt >= 1 {
			return float64(last.buckets-first.buckets) / dt, float64(last.bytes-first.bytes) / dt
		}
	}
	if s := elapsed.Seconds(); s >= 1 {
		return float64(count) / s, float64(movedBytes(*t.op)) / s
	}
	return -1, -1
}

// changed shows a change: a plain line at once if it says something new, a
// terminal redraw at the next tick (or at once when the operation ended).
func (t *tracker) changed() {
	if t.op == nil {
		return
	}
	if t.tty {
		t.dirty = true
		if t.op.settled() || t.now().Sub(t.lastDraw) >= time.Second || !t.drawn {
			t.draw()
		}
		return
	}
	v := t.view()
	counts, news := plainKey(v)
	switch {
	case news != t.lastNews,
		counts != t.lastCounts && (t.op.settled() || t.now().Sub(t.lastDraw) >= t.plainEvery):
		t.printPlain(v)
	case counts != t.lastCounts:
		t.pending = true
	}
}

// printPlain prints a plain progress line.
func (t *tracker) printPlain(v progressView) {
	fmt.Fprint(t.out, renderPlain(v))
	t.lastCounts, t.lastNews = plainKey(v)
	t.lastDraw, t.pending = t.now(), false
}

// plainHeartbeat is how often a plain line is repeated while nothing
// changes, to show the move is alive and which buckets it is on.
const plainHeartbeat = 10 * time.Second

// tick redraws the terminal line if something changed since the last draw,
// and at least every second for the elapsed time; without a terminal it
// repeats the plain line every plainHeartbeat while nothing changes.
func (t *tracker) tick() {
	if t.op == nil || t.op.settled() {
		return
	}
	t.sample()
	switch {
	case t.tty && (t.dirty || t.now().Sub(t.lastDraw) >= time.Second):
		t.draw()
	case !t.tty && t.pending && t.now().Sub(t.lastDraw) >= t.plainEvery,
		!t.tty && t.now().Sub(t.lastDraw) >= plainHeartbeat:
		t.printPlain(t.view())
	}
}

// draw redraws the terminal line.
func (t *tracker) draw() {
	fmt.Fprint(t.out, renderTTY(t.view(), t.width()))
	t.drawn, t.dirty, t.lastDraw = true, false, t.now()
}

// message prints a line of its own (an alert, an error, a note), above the
// terminal's progress line.
func (t *tracker) message(label, text string) {
	fmt.Fprint(t.out, renderAlert(label, text, t.tty, t.color))
	if t.tty && t.drawn {
		t.draw()
	}
}

// end leaves the progress line on the terminal and moves below it; without
// a terminal it prints the counts not printed yet.
func (t *tracker) end() {
	if !t.tty && t.pending && t.op != nil {
		t.printPlain(t.view())
	}
	if t.tty && t.drawn {
		if t.dirty {
			t.draw()
		}
		fmt.Fprintln(t.out)
		t.drawn = false
	}
}
