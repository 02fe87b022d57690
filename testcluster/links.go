package testcluster

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// proxy forwards TCP connections from a listener of its own on 127.0.0.1
// to one target address: one direction of one link between two members
// (A dialing B's raft transport, say). Cutting it closes every connection
// through it and refuses new ones until it is healed, the way a link that
// went down looks to both ends once TCP gives up.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newProxy listens on a free loopback port and forwards to target.
func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the address to dial instead of the target.
func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// track registers c, unless the link is cut.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

// forward copies between c and a new connection to the target until
// either side ends or the link is cut.
func (p *proxy) forward(c net.Conn) {
	defer p.wg.Done()
	u, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		p.untrack(c)
		return
	}
	if !p.track(u) {
		u.Close()
		p.untrack(c)
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
	p.untrack(c, u)
	<-done
}

// setCut cuts the link (closing what goes through it) or heals it.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
			delete(p.conns, c)
		}
	}
}

// close stops the proxy and waits for its goroutines.
func (p *proxy) close() {
	p.ln.Close()
	p.setCut(true)
	p.wg.Wait()
}

// links holds the proxies of every link between two members, when
// Options.CuttableLinks asks for them.
type links struct {
	mu sync.Mutex
	// out[i][j] are member i's ways to member j.
	out [][]*memberLink
	// advertise[j] is the route address member j's NATS server gives its
	// peers to pass on. It refuses every connection: a server connects to
	// a peer it learns of from another (an implicit route) at that
	// address, and such a route would go around the proxies of the pair,
	// so only the routes each server is given (nats.routes, through the
	// pair's proxies) connect.
	advertise []*proxy
}

// memberLink is how one member reaches another: its raft transport, its
// NATS server's routes and its HTTP API.
type memberLink struct {
	raft, nats, http *proxy
}

func (l *memberLink) proxies() []*proxy { return []*proxy{l.raft, l.nats, l.http} }

// startLinks creates the proxies for the cluster's members, whose ports
// are fixed.
func (c *Cluster) startLinks() {
	t := c.t
	n := len(c.Members)
	l := &links{out: make([][]*memberLink, n)}
	c.links = l
	t.Cleanup(l.close)
	mk := func(port int) *proxy {
		p, err := newProxy(addr(port))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i := range c.Members {
		l.out[i] = make([]*memberLink, n)
		for j, to := range c.Members {
			if i != j {
				l.out[i][j] = &memberLink{raft: mk(to.RaftPort), nats: mk(to.NATSClusterPort), http: mk(to.HTTPPort)}
			}
		}
		adv := mk(c.Members[i].NATSClusterPort)
		adv.setCut(true)
		l.advertise = append(l.advertise, adv)
	}
}

func (l *links) close() {
	for _, row := range l.out {
		for _, ml := range row {
			if ml != nil {
				for _, p := range ml.proxies() {
					p.close()
				}
			}
		}
	}
	for _, p := range l.advertise {
		p.close()
	}
}

// set cuts or heals the link between members i and j, both ways.
func (l *links) set(i, j int, cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ml := range []*memberLink{l.out[i][j], l.out[j][i]} {
		for _, p := range ml.proxies() {
			p.setCut(cut)
		}
	}
}

// Cut breaks every link between members i and j (raft, NATS routes and
// node-to-node HTTP), both ways, until Heal. It needs
// Options.CuttableLinks.
func (c *Cluster) Cut(i, j int) {
	c.t.Helper()
	if c.links == nil {
		c.t.Fatal("Cut needs Options.CuttableLinks")
	}
	c.links.set(i, j, true)
}

// Isolate cuts member i off from every other member.
func (c *Cluster) Isolate(i int) {
	c.t.Helper()
	for j := range c.Members {
		if j != i {
			c.Cut(i, j)
		}
	}
}

// Heal restores every link Cut or Isolate broke.
func (c *Cluster) Heal() {
	c.t.Helper()
	if c.links == nil {
		c.t.Fatal("Heal needs Options.CuttableLinks")
	}
	for i := range c.Members {
		for j := i + 1; j < len(c.Members); j++ {
			c.links.set(i, j, false)
		}
	}
}
