package testcluster

import (
	"fmt"
	"testing"

	"github.com/shardnode/shardnode/freeport"
)

// freePort returns a loopback port that was free a moment ago (see
// package freeport). Ports are chosen once per member and kept across
// restarts, because raft and NATS routes remember addresses.
func freePort(t testing.TB) int {
	t.Helper()
	ports, err := freeport.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
