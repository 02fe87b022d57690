package node

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/shardnode/shardnode/config"
)

// bus is the node's NATS connection and, unless nats.url points at an
// external cluster, the embedded server it connects to in-process.
type bus struct {
	srv *server.Server // nil with an external NATS
	nc  *nats.Conn
}

// startBus starts the embedded NATS server (or dials the external one) and
// connects. One connection carries all of the node's bus traffic: many
// requesters sharing one connection outrun many connections (DESIGN §8).
func startBus(cfg *config.Config) (*bus, error) {
	name := "shardnode-" + cfg.Node.Tag
	if cfg.NATS.URL != "" {
		nc, err := nats.Connect(cfg.NATS.URL, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			return nil, fmt.Errorf("connect to nats.url %s: %w", cfg.NATS.URL, err)
		}
		return &bus{nc: nc}, nil
	}
	host, port, err := splitHostPort(cfg.NATS.Listen)
	if err != nil {
		return nil, fmt.Errorf("nats.listen: %w", err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else if l, err := net.Listen("tcp", cfg.NATS.Listen); err != nil {
		return nil, fmt.Errorf("nats.listen %s: %w", cfg.NATS.Listen, err)
	} else {
		l.Close()
	}
	opts := &server.Options{
		ServerName: cfg.Cluster.Name + "-" + cfg.Node.Tag,
		Host:       host,
		Port:       port,
		NoSigs:     true, // a SIGTERM must not exit before raft and Pebble close
		NoLog:      true,
		MaxPayload: embeddedMaxPayload(cfg.HTTP.MaxDocumentBytes),
	}
	if cfg.NATS.ClusterListen != "" {
		ch, cp, err := splitHostPort(cfg.NATS.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("nats.cluster-listen: %w", err)
		}
		if cp == 0 {
			cp = server.RANDOM_PORT
		}
		opts.Cluster = server.ClusterOpts{Name: cfg.Cluster.Name, Host: ch, Port: cp, Advertise: cfg.NATS.ClusterAdvertise}
		for _, r := range cfg.NATS.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("nats.routes %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats on %s: not ready after 10s", cfg.NATS.Listen)
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.InProcessServer(srv), nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("connect to embedded nats: %w", err)
	}
	return &bus{srv: srv, nc: nc}, nil
}

// clientURL is the URL other processes use to reach this node's bus.
func (b *bus) clientURL() string {
	if b.srv != nil {
		return b.srv.ClientURL()
	}
	return b.nc.ConnectedUrl()
}

func (b *bus) close() {
	if b.nc != nil {
		// Drain is asynchronous: wait for it, so requests already delivered
		// to this node's subscriptions get their answers (a stopping node
		// answers them 503) instead of being dropped by Close, which left
		// their senders waiting until they counted this node down and
		// answered their clients 504, outcome unknown.
		if err := b.nc.Drain(); err == nil {
			deadline := time.Now().Add(busDrainWait)
			for !b.nc.IsClosed() && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		}
		b.nc.Close()
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
}

// busDrainWait bounds the wait for the bus connection's drain at close.
const busDrainWait = 5 * time.Second

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return h, port, nil
}

// embeddedMaxPayload sizes the embedded server's messages so that a
// document of the largest allowed size, with its batch framing, fits in one
// (replication and migration send each document whole): at least 8 MiB,
// at most NATS's 64 MiB.
func embeddedMaxPayload(maxDocument int64) int32 {
	return int32(min(max(8<<20, maxDocument+busDocumentSlack), 64<<20))
}
