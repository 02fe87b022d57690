package node

import (
	"context"
	"slices"
	"sync"
)

// writeFence lets a bucket's resharding sender wait for the client writes
// that passed the write guard before the ownership flip, without holding
// back the writes that come after it: those check the guard against the
// newer record and are refused at once, so their router can send them to
// the new owner straight away. (A read-write lock would make them queue
// behind the sender until every earlier write had committed.)
//
// Writes are counted in generations: enter joins the current one, wait
// seals it and waits until it and every earlier sealed one are empty.
type writeFence struct {
	mu   sync.Mutex
	cur  *fenceGen   // the generation new writes join; nil until one does
	open []*fenceGen // sealed generations that may still hold writes
}

// fenceGen is one generation of writes.
type fenceGen struct {
	n      int           // writes inside
	sealed bool          // no write joins any more
	done   chan struct{} // closed once sealed and empty
}

// enter registers a write that is about to check the write guard; the
// caller must pass the result to exit once the write committed (or was
// refused).
func (f *writeFence) enter() *fenceGen {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur == nil {
		f.cur = &fenceGen{done: make(chan struct{})}
	}
	f.cur.n++
	return f.cur
}

// exit ends a write registered by enter.
func (f *writeFence) exit(g *fenceGen) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g.n--
	if g.n == 0 && g.sealed {
		close(g.done)
	}
}

// wait returns once every write that entered before the call has exited,
// or with ctx's error when ctx ends first. Writes entering meanwhile are
// not waited for.
func (f *writeFence) wait(ctx context.Context) error {
	f.mu.Lock()
	if g := f.cur; g != nil {
		f.cur = nil
		g.sealed = true
		if g.n == 0 {
			close(g.done)
		} else {
			f.open = append(f.open, g)
		}
	}
	f.open = slices.DeleteFunc(f.open, func(g *fenceGen) bool { return g.n == 0 })
	pending := slices.Clone(f.open)
	f.mu.Unlock()
	for _, g := range pending {
		select {
		case <-g.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
