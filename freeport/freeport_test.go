package freeport

import (
	"fmt"
	"net"
	"testing"
)

// TestTakeGivesDistinctBindablePorts: ports are distinct across calls,
// below the ephemeral range, and bindable on loopback.
func TestTakeGivesDistinctBindablePorts(t *testing.T) {
	seen := map[int]bool{}
	for range 5 {
		ports, err := Take(4)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			if p < 10000 || p >= ephemeralLow() {
				t.Fatalf("port %d outside 10000..%d", p, ephemeralLow()-1)
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				t.Fatalf("port %d: %v", p, err)
			}
			_ = l.Close()
		}
	}
}
