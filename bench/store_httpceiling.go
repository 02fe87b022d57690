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
)

// httpCeiling is a trivial Go HTTP server on loopback that answers every
// GET with one fixed body the size of a shardnode document response: the
// most a Go HTTP server can serve here, with the same client setup.
type httpCeiling struct {
	hc   *http.Client
	ln   net.Listener
	srv  *http.Server
	base string // http://host:port
}

func startHTTPCeiling(hc *http.Client) (*httpCeiling, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("http ceiling: listen: %w", err)
	}
	// A body shaped like GET /docs' answer: one record plus metadata.
	rec := appendRecord(nil, rand.New(rand.NewPCG(1, 2)), 1, false)
	body := []byte(`{"Results":[{"@metadata":{"@id":"user1234567890123456789","@collection":"usertable","@change-vector":"A:1-AAAAAAAAAAAAAAAAAAAAAA","@last-modified":"2026-01-01T00:00:00.0000000Z","@bucket":123456,"@shard":0},`)
	body = append(append(body, rec[1:]...), `],"Includes":{}}`...)
	clen := strconv.Itoa(len(body))
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Content-Length", clen)
		_, _ = w.Write(body)
	})
	c := &httpCeiling{hc: hc, ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, base: "http://" + ln.Addr().String()}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

func (c *httpCeiling) name() string { return "go-http" }

func (c *httpCeiling) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http ceiling: shutdown: %w", err)
	}
	return nil
}

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
