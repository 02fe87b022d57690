package node

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWriteFenceWaitsForEarlierWritesOnly checks that the fence waits for
// the writes inside before the call, not for the ones entering after, and
// that it never holds back a write.
func TestWriteFenceWaitsForEarlierWritesOnly(t *testing.T) {
	var f writeFence
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.wait(ctx); err != nil {
		t.Fatalf("wait with no write inside: %v", err)
	}
	early := f.enter()
	done := make(chan error, 1)
	go func() { done <- f.wait(ctx) }()
	// Wait until the goroutine sealed the generation holding early.
	for sealed := false; !sealed; {
		f.mu.Lock()
		sealed = early.sealed
		f.mu.Unlock()
		if ctx.Err() != nil {
			t.Fatal("wait never sealed the current generation")
		}
		time.Sleep(time.Millisecond)
	}
	late := f.enter() // must not block, and wait must not wait for it
	select {
	case err := <-done:
		t.Fatalf("wait returned (%v) with an earlier write inside", err)
	default:
	}
	f.exit(early)
	if err := <-done; err != nil {
		t.Fatalf("wait after the earlier write exited: %v", err)
	}
	again := make(chan error, 1)
	go func() { again <- f.wait(ctx) }()
	f.exit(late)
	if err := <-again; err != nil {
		t.Fatalf("wait for the later write: %v", err)
	}

	stuck := f.enter()
	defer f.exit(stuck)
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := f.wait(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with a cancelled context = %v, want context.Canceled", err)
	}
}
