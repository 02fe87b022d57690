package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// Ceiling servers' names, for ServeCeiling and the rows.
const (
	// CeilingGoHTTP is net/http's server: what a Go service gets by
	// default.
	CeilingGoHTTP = sysHTTP
	// CeilingFastHTTP is fasthttp's server: the one shardnode's API runs
	// on, so the ceiling of shardnode's own stack.
	CeilingFastHTTP = sysFastHTTP
)

// httpCeiling is a trivial Go HTTP server on loopback that answers every
// GET with one fixed body the size of a shardnode document response: the
// most a Go HTTP server can serve here, with the same client setup. It
// runs in this process, or as a child process (`shardnode bench-ceiling`)
// like a `shardnode serve` node, so that the ratio compares two servers
// each in its own process.
type httpCeiling struct {
	label string
	stop  func() error // ends the server (in-process) or the child
	base  string       // http://host:port
}

// ceilingBody is the fixed answer: shaped like GET /docs' answer, one
// record plus metadata.
func ceilingBody() []byte {
	rec := appendRecord(nil, rand.New(rand.NewPCG(1, 2)), 1, false)
	body := []byte(`{"Results":[{"@metadata":{"@id":"user1234567890123456789","@collection":"usertable","@change-vector":"A:1-AAAAAAAAAAAAAAAAAAAAAA","@last-modified":"2026-01-01T00:00:00.0000000Z","@bucket":123456,"@shard":0},`)
	return append(append(body, rec[1:]...), `],"Includes":{}}`...)
}

// ServeCeiling serves the trivial HTTP handler of the get row's ceilings
// on ln with server (CeilingGoHTTP or CeilingFastHTTP) until ctx ends,
// then shuts it down. It is what `shardnode bench-ceiling` runs in a
// child process of the benchmark.
func ServeCeiling(ctx context.Context, server string, ln net.Listener) error {
	stop, err := serveCeiling(server, ln)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return stop()
}

// serveCeiling starts serving the ceiling handler on ln and returns the
// function that shuts it down.
func serveCeiling(server string, ln net.Listener) (func() error, error) {
	body := ceilingBody()
	clen := strconv.Itoa(len(body))
	shutdown := func(f func(context.Context) error) func() error {
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := f(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http ceiling %s: shutdown: %w", server, err)
			}
			return nil
		}
	}
	switch server {
	case CeilingGoHTTP:
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.Header().Set("Content-Length", clen)
			_, _ = w.Write(body)
		})}
		go func() { _ = srv.Serve(ln) }()
		return shutdown(srv.Shutdown), nil
	case CeilingFastHTTP:
		srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json; charset=utf-8")
			ctx.SetBody(body)
		}}
		go func() { _ = srv.Serve(ln) }()
		return shutdown(srv.ShutdownWithContext), nil
	default:
		ln.Close()
		return nil, fmt.Errorf("http ceiling: unknown server %q (want %s or %s)", server, CeilingGoHTTP, CeilingFastHTTP)
	}
}

// startHTTPCeiling starts the ceiling label names: in this process when
// binary is empty, else as `binary bench-ceiling`.
func startHTTPCeiling(ctx context.Context, binary, logDir, label string) (*httpCeiling, error) {
	if binary != "" {
		return startChildCeiling(ctx, binary, logDir, label)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("http ceiling: listen: %w", err)
	}
	stop, err := serveCeiling(label, ln)
	if err != nil {
		return nil, err
	}
	return &httpCeiling{label: label, stop: stop, base: "http://" + ln.Addr().String()}, nil
}

func (c *httpCeiling) name() string { return c.label }

func (c *httpCeiling) close() error { return c.stop() }

func (c *httpCeiling) dataset(context.Context, string, bool) (dataset, error) { return c, nil }

func (c *httpCeiling) client(context.Context, int) (client, error) {
	rc, err := newRawConn(c.base)
	if err != nil {
		return nil, err
	}
	return &httpCeilingClient{c: c, rc: rc}, nil
}

func (c *httpCeiling) drop(context.Context) error { return nil }

// httpCeilingClient GETs the fixed body.
type httpCeilingClient struct {
	c   *httpCeiling
	rc  *rawConn
	buf bytes.Buffer
}

func (h *httpCeilingClient) close() { h.rc.close() }

func (h *httpCeilingClient) read(ctx context.Context, k int64) error {
	return h.rc.do(ctx, http.MethodGet, "/docs?id="+keyName(k), nil, http.StatusOK, &h.buf)
}

func (h *httpCeilingClient) write(context.Context, int64, []byte) error { return errUnsupported }
func (h *httpCeilingClient) scan(context.Context, int64, int) error     { return errUnsupported }
func (h *httpCeilingClient) writeBatch(context.Context, []int64, [][]byte) error {
	return errUnsupported
}
