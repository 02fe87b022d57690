// Package freeport picks loopback TCP ports for the nodes that tests and
// benchmarks start themselves, where an address must be known before the
// node binds it (raft and NATS routes remember addresses).
//
// Ports are drawn at random below the kernel's ephemeral range: a port the
// kernel hands out for ":0" is also a candidate source port of every
// outgoing connection on the machine, so between picking it and the node
// binding it, some client's connection could take it. Ports below that
// range are never given out that way; two processes collide only by
// drawing the same number, and one process never draws a number twice.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// handedOut holds every port Take returned in this process: a port is
// bound only when its node starts, so until then the kernel would let
// another caller draw it again. Ports are never given back: a process uses
// a few hundred of the twenty thousand candidates.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Take returns n distinct loopback ports that were free a moment ago and
// that this process was not given before.
func Take(n int) ([]int, error) {
	lo := ephemeralLow()
	handedOut.Lock()
	defer handedOut.Unlock()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n && tries < 200*n; tries++ {
		p := 10000 + rand.IntN(lo-10000)
		if handedOut.ports[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use
		}
		_ = l.Close()
		handedOut.ports[p] = true
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("pick %d free ports: found %d in 10000..%d", n, len(ports), lo-1)
	}
	return ports, nil
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
