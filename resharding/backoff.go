package resharding

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is a jittered exponential delay between retries.
type backoff struct{ cur time.Duration }

func newBackoff() *backoff { return &backoff{cur: 20 * time.Millisecond} }

// wait sleeps the current delay and doubles it (up to 5s); false if ctx
// ended first.
func (b *backoff) wait(ctx context.Context) bool {
	d := b.cur/2 + time.Duration(rand.Int64N(int64(b.cur/2)+1))
	t := time.NewTimer(d)
	defer t.Stop()
	b.cur = min(b.cur*2, 5*time.Second)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
