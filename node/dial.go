package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/raft"
)

// dialer opens this node's connections to its peers' raft transports and
// HTTP APIs. rewrites (debug.dial-rewrites) sends a dial for one address
// to another: fault tests put a proxy of their own on every link between
// two nodes and cut it there.
type dialer struct {
	rewrites map[string]string
}

// target is the address actually dialed for addr.
func (d dialer) target(addr string) string {
	if to, ok := d.rewrites[addr]; ok {
		return to
	}
	return addr
}

// dialContext dials addr (rewritten) over TCP.
func (d dialer) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	return nd.DialContext(ctx, network, d.target(addr))
}

// httpClient is the node's client for node-to-node HTTP (join, forwarding
// to the leader, the leader's commit index); data-plane traffic goes over
// NATS.
func (d dialer) httpClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = d.dialContext
	return &http.Client{Timeout: 15 * time.Second, Transport: t}
}

// raftStreams is raft's TCP stream layer with the node's dialer: it
// accepts on the raft listener and dials peers through rewrites.
type raftStreams struct {
	ln net.Listener
	d  dialer
}

var _ raft.StreamLayer = (*raftStreams)(nil)

// listenRaft listens on addr for raft's transport.
func listenRaft(addr string, d dialer) (*raftStreams, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || tcp.IP.IsUnspecified() {
		// Peers dial the address this listener reports (see startRaft):
		// 0.0.0.0 would reach no one.
		ln.Close()
		return nil, fmt.Errorf("raft.addr %s: %w", addr, errNotAdvertisable)
	}
	return &raftStreams{ln: ln, d: d}, nil
}

// errNotAdvertisable is raft.addr without a host peers can dial.
var errNotAdvertisable = errors.New("not an address peers can dial: give the host's own address")

// Accept waits for a peer's connection.
func (s *raftStreams) Accept() (net.Conn, error) { return s.ln.Accept() }

// Close stops listening.
func (s *raftStreams) Close() error { return s.ln.Close() }

// Addr is the listener's address, the one this node advertises to raft.
func (s *raftStreams) Addr() net.Addr { return s.ln.Addr() }

// Dial connects to a peer's raft transport.
func (s *raftStreams) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.d.dialContext(ctx, "tcp", string(address))
}
