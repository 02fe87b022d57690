package node

import (
	"testing"
	"time"
)

// TestRerouteStats: percentiles come from the latest window, the maximum
// and the count from every rerouted write, per database and incarnation.
func TestRerouteStats(t *testing.T) {
	r := newReroutes()
	if s := r.stats("A", "db", 1); s.WritesRerouted != 0 || s.DelayP99Ms != 0 || s.Node != "A" {
		t.Fatalf("empty: %+v", s)
	}
	r.record("db", 1, 900*time.Millisecond) // an old outlier, soon out of the window
	for i := 1; i <= 100; i++ {
		r.record("db", 1, time.Duration(i)*time.Millisecond)
	}
	r.record("other", 1, time.Second)
	s := r.stats("A", "db", 1)
	if s.WritesRerouted != 101 || s.Window != 101 || s.DelayMaxMs != 900 || s.DelayP50Ms != 51 || s.DelayP99Ms != 100 {
		t.Fatalf("after 101: %+v", s)
	}
	for range rerouteWindow {
		r.record("db", 1, 2*time.Millisecond)
	}
	s = r.stats("A", "db", 1)
	if s.WritesRerouted != 101+rerouteWindow || s.Window != rerouteWindow || s.DelayP99Ms != 2 || s.DelayMaxMs != 900 {
		t.Fatalf("after the window turned over: %+v", s)
	}
	// The database deleted and created again: a new record.
	if s := r.stats("A", "db", 2); s.WritesRerouted != 0 {
		t.Fatalf("a new database of the same name: %+v", s)
	}
	r.record("db", 2, time.Millisecond)
	if s := r.stats("A", "db", 2); s.WritesRerouted != 1 || s.DelayMaxMs != 1 {
		t.Fatalf("a new database of the same name after a write: %+v", s)
	}
	if s := r.stats("A", "other", 1); s.WritesRerouted != 1 || s.DelayP50Ms != 1000 {
		t.Fatalf("other database: %+v", s)
	}
}
