package testcluster

import (
	"fmt"
	"net"
	"testing"
)

// freePort returns a loopback port that was free a moment ago. Ports are
// chosen once per member and kept across restarts, because raft and NATS
// routes remember addresses.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
