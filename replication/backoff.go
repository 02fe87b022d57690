package replication

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is a jittered exponential delay between retries.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max, cur: min} }

// wait sleeps the current delay (or until ctx ends) and doubles it.
func (b *backoff) wait(ctx context.Context) {
	d := b.cur/2 + time.Duration(rand.Int64N(int64(b.cur/2)+1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	b.cur = min(b.cur*2, b.max)
}

func (b *backoff) reset() { b.cur = b.min }
