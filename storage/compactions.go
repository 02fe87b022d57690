package storage

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Compactions grants Pebble's compactions for every replica of a node
// with one goroutine, which wakes only while some replica waits for a
// grant.
//
// Pebble's default scheduler gives each DB a goroutine that samples its
// compaction allowance every 100 ms, idle or not: a node of 512 idle
// replicas spent ~5% of a core on those wake-ups. The grants themselves
// follow the same rule as Pebble's: a replica may run as many compactions
// as its own allowance (Pebble's GetAllowedWithoutPermission), and a
// replica refused one is offered it again when one of its compactions
// ends, when a flush raises its allowance, and every compactionRetry
// while it waits.
type Compactions struct {
	mu sync.Mutex
	// waiting holds the replicas refused a compaction or told their
	// allowance rose, each with the generation of its latest wait: a grant
	// loop that found nothing to run takes a replica out only if it did
	// not start waiting again meanwhile.
	waiting map[*replicaCompactions]uint64
	gen     uint64
	closed  bool

	wake chan struct{} // a replica started waiting
	stop chan struct{}
	done chan struct{}
}

// compactionRetry is how often a waiting replica is offered its
// compaction again (Pebble's own scheduler samples at this period).
const compactionRetry = 100 * time.Millisecond

// NewCompactions starts a node's compaction scheduler; Close stops it,
// after every replica using it has closed.
func NewCompactions() *Compactions {
	c := &Compactions{waiting: map[*replicaCompactions]uint64{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// Close stops the scheduler's goroutine. Replicas still open get no more
// periodic offers (they still get one when a compaction ends).
func (c *Compactions) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.done
}

// forReplica returns the pebble.CompactionScheduler of one replica: Pebble
// registers exactly one DB with each.
func (c *Compactions) forReplica() pebble.CompactionScheduler {
	r := &replicaCompactions{c: c}
	r.grantDone = sync.NewCond(&r.mu)
	return r
}

// waits puts r among the replicas the loop offers grants to.
func (c *Compactions) waits(r *replicaCompactions) {
	c.mu.Lock()
	c.gen++
	c.waiting[r] = c.gen
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// waitOf returns the generation of r's latest wait (0: it does not wait).
func (c *Compactions) waitOf(r *replicaCompactions) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting[r]
}

// settled takes r out of them, unless it started waiting again after the
// wait of generation gen (0: whatever its wait).
func (c *Compactions) settled(r *replicaCompactions, gen uint64) {
	c.mu.Lock()
	if g, ok := c.waiting[r]; ok && (gen == 0 || g == gen) {
		delete(c.waiting, r)
	}
	c.mu.Unlock()
}

func (c *Compactions) run() {
	defer close(c.done)
	retry := time.NewTimer(compactionRetry)
	retry.Stop()
	armed := false
	for {
		select {
		case <-c.stop:
			retry.Stop()
			return
		case <-c.wake:
		case <-retry.C:
			armed = false
		}
		c.mu.Lock()
		offer := make([]*replicaCompactions, 0, len(c.waiting))
		for r := range c.waiting {
			offer = append(offer, r)
		}
		c.mu.Unlock()
		for _, r := range offer {
			r.grant()
		}
		c.mu.Lock()
		wait := len(c.waiting) > 0
		c.mu.Unlock()
		if wait && !armed {
			retry.Reset(compactionRetry)
			armed = true
		}
	}
}

// replicaCompactions is one replica's pebble.CompactionScheduler, and the
// grant handle of its compactions.
type replicaCompactions struct {
	c  *Compactions
	db pebble.DBForCompaction // set by Register, before any other call

	mu           sync.Mutex
	running      int
	lastAllowed  int
	unregistered bool
	granting     bool       // a grant loop runs (without mu: it calls into the DB)
	grantDone    *sync.Cond // signalled when granting ends
}

var _ pebble.CompactionScheduler = (*replicaCompactions)(nil)
var _ pebble.CompactionGrantHandle = (*replicaCompactions)(nil)

// Register records the DB.
func (r *replicaCompactions) Register(_ int, db pebble.DBForCompaction) { r.db = db }

// Unregister stops grants to the DB, waiting for one in progress.
func (r *replicaCompactions) Unregister() {
	r.c.settled(r, 0)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unregistered = true
	for r.granting {
		r.grantDone.Wait()
	}
}

// TrySchedule grants a compaction when the DB runs fewer than its
// allowance; a refused DB waits for an offer.
func (r *replicaCompactions) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	r.mu.Lock()
	if r.unregistered {
		r.mu.Unlock()
		return false, nil
	}
	r.lastAllowed = r.db.GetAllowedWithoutPermission()
	if r.lastAllowed > r.running {
		r.running++
		r.mu.Unlock()
		return true, r
	}
	r.mu.Unlock()
	r.c.waits(r)
	return false, nil
}

// UpdateGetAllowedWithoutPermission offers a grant when the allowance
// rose (a flush ended).
func (r *replicaCompactions) UpdateGetAllowedWithoutPermission() {
	r.mu.Lock()
	allowed := r.db.GetAllowedWithoutPermission()
	rose := allowed > r.lastAllowed
	r.lastAllowed = allowed
	r.mu.Unlock()
	if rose {
		r.c.waits(r)
	}
}

// Started is part of pebble.CompactionGrantHandle.
func (r *replicaCompactions) Started() {}

// MeasureCPU is part of pebble.CompactionGrantHandle.
func (r *replicaCompactions) MeasureCPU(pebble.CompactionGoroutineKind) {}

// CumulativeStats is part of pebble.CompactionGrantHandle.
func (r *replicaCompactions) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done ends one compaction and offers its place to a waiting one.
func (r *replicaCompactions) Done() {
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
	r.grant()
}

// grant offers the DB as many compactions as its allowance leaves room
// for. Only one grant loop runs at a time; it calls into the DB without
// holding mu (the DB calls TrySchedule under its own lock). The replica
// stops waiting once the DB has nothing waiting or declines a grant; it
// stays among the waiting ones while its allowance is used up.
func (r *replicaCompactions) grant() {
	r.mu.Lock()
	for r.granting {
		r.grantDone.Wait()
	}
	if r.unregistered {
		r.mu.Unlock()
		return
	}
	r.lastAllowed = r.db.GetAllowedWithoutPermission()
	room := r.lastAllowed - r.running
	if room <= 0 {
		r.mu.Unlock()
		return // Done will offer again; so will the retry if it waits
	}
	r.granting = true
	r.mu.Unlock()
	gen := r.c.waitOf(r) // a wait after this is the DB's news, not settled here
	settled := false
	for ; room > 0; room-- {
		if waiting, _ := r.db.GetWaitingCompaction(); !waiting {
			settled = true
			break
		}
		if !r.db.Schedule(r) {
			settled = true
			break
		}
		r.mu.Lock()
		r.running++
		r.mu.Unlock()
	}
	if settled && gen != 0 {
		r.c.settled(r, gen)
	}
	r.mu.Lock()
	r.granting = false
	r.grantDone.Broadcast()
	r.mu.Unlock()
}
