package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// natsPayload is the size of the NATS baselines' messages: one record.
const natsPayload = 1024

// natsBench is an embedded nats-server started with the node's bus
// options (DESIGN §8: NoSigs, no logging, 8 MiB payloads, loopback).
type natsBench struct {
	srv *server.Server
}

func startNATS() (*natsBench, error) {
	srv, err := server.NewServer(&server.Options{
		ServerName: "shardnode-bench",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 8 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 10s")
	}
	return &natsBench{srv: srv}, nil
}

func (b *natsBench) close() {
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
}

// connect opens a TCP connection to the server, as another node would.
func (b *natsBench) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(b.srv.ClientURL(), nats.Name(name))
	if err != nil {
		return nil, fmt.Errorf("connect to embedded nats: %w", err)
	}
	return nc, nil
}

// requestReply runs ops request/reply round trips of natsPayload bytes from
// clients requesters sharing one connection, against one responder on
// another connection.
func (b *natsBench) requestReply(ctx context.Context, clients int, ops int64) (roundResult, error) {
	resp, err := b.connect("bench-responder")
	if err != nil {
		return roundResult{}, err
	}
	defer resp.Close()
	sub, err := resp.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		return roundResult{}, fmt.Errorf("subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	if err := resp.Flush(); err != nil {
		return roundResult{}, fmt.Errorf("flush: %w", err)
	}
	req, err := b.connect("bench-requester")
	if err != nil {
		return roundResult{}, err
	}
	defer req.Close()
	payload := make([]byte, natsPayload)
	return runClosedLoop(ctx, clients, ops, func(int) (opFunc, error) {
		return func(ctx context.Context) (int, error) {
			m, err := req.RequestWithContext(ctx, "bench.echo", payload)
			if err != nil {
				return 0, fmt.Errorf("request: %w", err)
			}
			return len(m.Data), nil
		}, nil
	})
}

// publish sends n messages of natsPayload bytes from one connection as
// fast as it can and times until a subscriber on another connection has
// received them all.
func (b *natsBench) publish(ctx context.Context, n int64) (roundResult, error) {
	subc, err := b.connect("bench-subscriber")
	if err != nil {
		return roundResult{}, err
	}
	defer subc.Close()
	var got atomic.Int64
	done := make(chan struct{})
	sub, err := subc.Subscribe("bench.pub", func(*nats.Msg) {
		if got.Add(1) == n {
			close(done)
		}
	})
	if err != nil {
		return roundResult{}, fmt.Errorf("subscribe: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := subc.Flush(); err != nil {
		return roundResult{}, fmt.Errorf("flush: %w", err)
	}
	pub, err := b.connect("bench-publisher")
	if err != nil {
		return roundResult{}, err
	}
	defer pub.Close()
	payload := make([]byte, natsPayload)
	start := time.Now()
	for range n {
		if err := pub.Publish("bench.pub", payload); err != nil {
			return roundResult{}, fmt.Errorf("publish: %w", err)
		}
	}
	if err := pub.FlushTimeout(time.Minute); err != nil {
		return roundResult{}, fmt.Errorf("flush: %w", err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return roundResult{}, ctx.Err()
	case <-time.After(2 * time.Minute):
		return roundResult{}, fmt.Errorf("subscriber got %d of %d messages", got.Load(), n)
	}
	if dropped, _ := sub.Dropped(); dropped > 0 {
		return roundResult{}, fmt.Errorf("subscriber dropped %d messages", dropped)
	}
	return roundResult{ops: n, bytes: n * natsPayload, elapsed: time.Since(start)}, nil
}
