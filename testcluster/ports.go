package testcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// handedOut holds every port freePort returned in this test process: a
// port is bound only when its member starts, so until then the kernel
// would let another member (of this cluster or a parallel test's) draw it
// again. Ports are never returned: a process uses a few hundred of the
// twenty thousand candidates.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePort returns a loopback port that was free a moment ago. Ports are
// chosen once per member and kept across restarts, because raft and NATS
// routes remember addresses.
//
// The port is drawn at random below the kernel's ephemeral range: a port
// the kernel hands out for ":0" is also a candidate source port of every
// outgoing connection on the machine, so between picking it and the node
// binding it, some client's connection (another test's, a benchmark's)
// could take it. Random ports below that range are never given out that
// way; two test processes collide only by drawing the same number, and
// one process never draws a number twice (handedOut).
func freePort(t testing.TB) int {
	t.Helper()
	lo := ephemeralLow()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 200 {
		port := 10000 + rand.IntN(lo-10000)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", addr(port))
		if err != nil {
			continue
		}
		_ = l.Close()
		handedOut.ports[port] = true
		return port
	}
	t.Fatalf("pick a free port: no free port found in 10000..%d", lo-1)
	return 0
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 11000 {
		return 32768
	}
	return lo
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
