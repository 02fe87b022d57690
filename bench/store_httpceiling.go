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

// httpCeiling is a trivial Go HTTP server on loopback that answers every
// GET with one fixed body the size of a shardnode document response: the
// most a Go HTTP server can serve here, with the same client setup. It
// runs on net/http's server (go-http: what a Go service gets by default)
// or on fasthttp's (go-fasthttp: the server shardnode's API runs on, so
// the ceiling of shardnode's own stack).
type httpCeiling struct {
	label string
	hc    *http.Client
	ln    net.Listener
	srv   *http.Server     // go-http
	fsrv  *fasthttp.Server // go-fasthttp
	base  string           // http://host:port
}

func startHTTPCeiling(hc *http.Client, label string) (*httpCeiling, error) {
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
	c := &httpCeiling{label: label, hc: hc, ln: ln, base: "http://" + ln.Addr().String()}
	switch label {
	case sysHTTP:
		c.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = c.srv.Serve(ln) }()
	case sysFastHTTP:
		c.fsrv = &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json; charset=utf-8")
			ctx.SetBody(body)
		}}
		go func() { _ = c.fsrv.Serve(ln) }()
	default:
		ln.Close()
		return nil, fmt.Errorf("http ceiling: unknown server %q", label)
	}
	return c, nil
}

func (c *httpCeiling) name() string { return c.label }

func (c *httpCeiling) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if c.srv != nil {
		if err = c.srv.Shutdown(ctx); errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	} else {
		err = c.fsrv.ShutdownWithContext(ctx)
	}
	if err != nil {
		return fmt.Errorf("http ceiling %s: shutdown: %w", c.label, err)
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
