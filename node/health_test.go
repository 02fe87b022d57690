package node

import "testing"

// TestRestartFiresDownSignal: a node heard with a new incarnation restarted,
// so requests waiting on its old process are released, even though it never
// went quiet long enough to be found down.
func TestRestartFiresDownSignal(t *testing.T) {
	h := newHealth("A")
	h.heard("B", "one")
	sig := h.downSignal("B")
	h.heard("B", "one")
	select {
	case <-sig:
		t.Fatal("down signal fired for a heartbeat of the same incarnation")
	default:
	}
	h.heard("B", "two")
	select {
	case <-sig:
	default:
		t.Fatal("no down signal when B came back as a new incarnation")
	}
	if !h.up("B") {
		t.Fatal("B is not up after its new incarnation's heartbeat")
	}
}
