package resharding

import (
	"context"
	"sync"
	"time"
)

// leaseRenewEvery is how often a sender asks its source shard's other
// replicas again for their lease on its bucket while it waits for the
// flip: well within the window each promises (seconds), so that at the
// flip a lease nearly always holds long enough to spare the round trip.
const leaseRenewEvery = 750 * time.Millisecond

// peerLeases is one sender's leases on the source shard's other replicas
// (Cluster.LeaseSourceReplicas): the latest promise of each, and the
// request in flight. At the flip the sender hands them to
// FenceSourceReplicas.
type peerLeases struct {
	mu      sync.Mutex
	got     []PeerLease   // the latest answer of each peer that answered
	asked   time.Time     // when the latest request was sent; zero: never
	pending chan struct{} // closed when the request in flight is answered; nil: none
}

// renew asks again through ask, in a goroutine wg owns, unless a request is
// in flight or the latest went out less than leaseRenewEvery ago.
func (l *peerLeases) renew(ctx context.Context, wg *sync.WaitGroup, ask func(context.Context) []PeerLease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending != nil || (!l.asked.IsZero() && time.Since(l.asked) < leaseRenewEvery) {
		return
	}
	l.asked = time.Now()
	done := make(chan struct{})
	l.pending = done
	wg.Go(func() {
		got := ask(ctx)
		l.mu.Lock()
		defer l.mu.Unlock()
		// A peer that did not answer this time keeps its earlier
		// promise: it holds until its own end.
		for _, p := range got {
			replaced := false
			for i := range l.got {
				if l.got[i].Node == p.Node {
					l.got[i], replaced = p, true
				}
			}
			if !replaced {
				l.got = append(l.got, p)
			}
		}
		l.pending = nil
		close(done)
	})
}

// current returns the promises held. When none was answered yet and a
// request is in flight, it waits for that one: it went out before the
// flip, so its answer comes sooner than a new round trip's would.
func (l *peerLeases) current(ctx context.Context) []PeerLease {
	l.mu.Lock()
	pending := l.pending
	if len(l.got) > 0 || pending == nil {
		defer l.mu.Unlock()
		return append([]PeerLease(nil), l.got...)
	}
	l.mu.Unlock()
	select {
	case <-pending:
	case <-ctx.Done():
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]PeerLease(nil), l.got...)
}
