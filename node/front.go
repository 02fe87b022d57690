package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// front serves the node's HTTP API on its listener with fasthttp, and
// hands every request to the API's net/http handler (routes).
//
// Why not net/http's server: on these 2-core machines a point GET or a
// durable PUT is bound by CPU, client and server together, and net/http's
// per-request work (a Request, a header map and a response object
// allocated per request, a goroutine and a read deadline per request to
// watch for the client going away) cost as much as the handler's own
// work. fasthttp keeps one request context per connection and reuses it:
// a trivial handler answers ~1.5x the requests per second on the same
// cores (`go test ./node -bench Front`). The handlers stay net/http
// handlers, so tests drive them with httptest and every route has one
// implementation: front builds a net/http request from fasthttp's, reusing
// what it can, and writes the handler's answer into fasthttp's response.
//
// What differs from net/http's server, and why it does not matter here:
//   - A request's context is not canceled when its client goes away, only
//     when its handler returns. Every blocking step of a handler has its
//     own deadline (a write attempt's, waitForReplicasTimeout).
//   - The request line and headers must fit in maxHeaderBytes. A GET of
//     many ids that does not fit goes as POST /docs, as RavenDB's clients
//     do past a URL length.
//   - A whole answer (writeRaw: every query, listing and write answer)
//     becomes fasthttp's body as it is, without a copy (writeOwned);
//     net/http wrote it to the connection without one. A point GET's,
//     rendered into a pooled buffer, is copied.
//   - Event streams (GET /databases/{db}/events), which write as events
//     come, are served on the connection taken over from fasthttp
//     (stream), ended by the client's closing it or by node shutdown.
type front struct {
	h       http.Handler
	ln      net.Listener
	srv     *fasthttp.Server
	closed  atomic.Bool
	logger  *slog.Logger
	streams context.Context // canceled at shutdown: event streams end

	wg   sync.WaitGroup // streams being served
	pool sync.Pool      // *frontExchange
}

// maxHeaderBytes bounds a request's line and headers (net/http's default
// is 1 MiB; 64 KiB holds a GET of ~1,000 short ids).
const maxHeaderBytes = 64 << 10

// headerTimeout bounds the wait for a request's headers once its first
// byte came; bodyTimeout the wait for its body after them (a 64 MiB
// bulk_docs body from a slow client).
const (
	headerTimeout = 10 * time.Second
	bodyTimeout   = 5 * time.Minute
)

// frontMaxBody is the largest request body front reads; each route
// applies its own, smaller limit with a JSON error (readBody). A larger
// body is refused before it is read, with the same JSON error shape.
func frontMaxBody(bulkLimit int64) int {
	const others = maxMultiGetBody // the largest fixed limit (POST /docs)
	if bulkLimit < others {
		return others + 1
	}
	return int(bulkLimit) + 1
}

// newFront returns the server of h on ln; Serve starts it.
func newFront(ln net.Listener, h http.Handler, maxBody int, idle time.Duration, streams context.Context, logger *slog.Logger) *front {
	f := &front{h: h, ln: ln, logger: logger, streams: streams}
	f.srv = &fasthttp.Server{
		Handler:        f.serve,
		ErrorHandler:   f.serveError,
		ReadBufferSize: maxHeaderBytes,
		ReadTimeout:    headerTimeout, // from a request's first byte to its last header
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: bodyTimeout}
		},
		IdleTimeout:                  idle,
		MaxRequestBodySize:           maxBody,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		// An idle keep-alive connection gives its 64 KiB read buffer
		// back, so memory follows requests in flight, not connections
		// open: no cost measured (go test ./node -bench Front).
		ReduceMemoryUsage: true,
		CloseOnShutdown:   true,
		KeepHijackedConns: true, // stream closes its connection itself (see there)
		Logger:            fasthttpLogger{logger},
	}
	return f
}

// Serve answers requests until Shutdown, which makes it return nil.
func (f *front) Serve() error {
	err := f.srv.Serve(f.ln)
	if f.closed.Load() {
		return nil
	}
	return err
}

// Shutdown stops accepting and waits for the requests being served, and
// the event streams (which end with the streams context given to
// newFront), to finish, at most until ctx ends. It may run before Serve
// starts: Serve then returns at once.
func (f *front) Shutdown(ctx context.Context) error {
	f.closed.Store(true)
	err := f.srv.ShutdownWithContext(ctx)
	if cerr := f.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("event streams still open: %w", ctx.Err()))
	}
	return err
}

// fasthttpLogger sends fasthttp's own messages (connection errors) to the
// node's log.
type fasthttpLogger struct{ l *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.l.Debug("http: " + fmt.Sprintf(format, args...))
}

// serveError answers what fasthttp refuses before a handler runs (a
// malformed request, headers over maxHeaderBytes, a body over the
// largest limit) in the API's error shape.
func (f *front) serveError(ctx *fasthttp.RequestCtx, err error) {
	status, typ := http.StatusBadRequest, "BadRequest"
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, typ = http.StatusRequestEntityTooLarge, "BodyTooLarge"
		err = fmt.Errorf("request body over %d bytes, the most any route takes (bulk_docs: http.max-body-bytes)", f.srv.MaxRequestBodySize-1)
	case errors.As(err, &small):
		status, typ = http.StatusRequestHeaderFieldsTooLarge, "HeadersTooLarge"
		err = fmt.Errorf("request line and headers exceed %d bytes (send many ids as POST /docs)", maxHeaderBytes)
	}
	var timeout interface{ Timeout() bool }
	if errors.As(err, &timeout) && timeout.Timeout() {
		status, typ = http.StatusRequestTimeout, "RequestTimeout"
	}
	answerError(ctx, status, typ, err.Error())
	ctx.SetConnectionClose()
}

// frontExchange is one request and its answer as the net/http handler
// sees them; pooled, so a request allocates little beyond its context.
type frontExchange struct {
	req    http.Request
	url    url.URL
	header http.Header // the request's
	body   bytes.Reader
	rbody  frontBody
	w      frontWriter
}

// frontBody is a request body over fasthttp's buffer.
type frontBody struct{ r *bytes.Reader }

func (b frontBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b frontBody) Close() error               { return nil }

// frontWriter is the net/http ResponseWriter over fasthttp's response.
type frontWriter struct {
	ctx    *fasthttp.RequestCtx
	header http.Header
	wrote  bool
}

func (w *frontWriter) Header() http.Header { return w.header }

func (w *frontWriter) WriteHeader(status int) {
	if w.wrote {
		return
	}
	w.wrote = true
	rh := &w.ctx.Response.Header
	for k, vs := range w.header {
		switch k {
		case "Content-Length":
			continue // fasthttp sets it from the body
		case "Content-Type":
			if len(vs) > 0 {
				rh.SetContentType(vs[0])
			}
			continue
		}
		for _, v := range vs {
			rh.Add(k, v)
		}
	}
	w.ctx.SetStatusCode(status)
}

func (w *frontWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ctx.Write(b)
}

// writeOwned makes b, which its caller never changes again, the answer's
// body without copying it into fasthttp's buffer (see ownedWriter);
// after an earlier Write it is appended as Write does.
func (w *frontWriter) writeOwned(b []byte) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if len(w.ctx.Response.Body()) > 0 {
		_, _ = w.ctx.Write(b)
		return
	}
	w.ctx.Response.SetBodyRaw(b)
}

// serve is fasthttp's handler: the request, as a net/http one, to f.h.
func (f *front) serve(ctx *fasthttp.RequestCtx) {
	if f.closed.Load() {
		// A connection that outlived Shutdown (busy past its grace:
		// fasthttp then serves it on) gets no more answers from a node
		// that stopped; its client reconnects, to whatever listens now.
		answerError(ctx, http.StatusServiceUnavailable, "NodeStopping", "the node stopped; send the request again")
		ctx.SetConnectionClose()
		return
	}
	x, _ := f.pool.Get().(*frontExchange)
	if x == nil {
		x = &frontExchange{header: http.Header{}, w: frontWriter{header: http.Header{}}}
		x.rbody.r = &x.body
	}
	clear(x.header)
	clear(x.w.header)
	if err := x.fill(ctx); err != nil {
		f.pool.Put(x)
		answerError(ctx, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	if isStream(&x.req) {
		r := x.req.Clone(context.Background())
		f.pool.Put(x)
		f.stream(ctx, r)
		return
	}
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := x.req.WithContext(rctx)
	x.w = frontWriter{ctx: ctx, header: x.w.header}
	if f.serveHTTP(&x.w, req) {
		// As net/http's server does: the node goes on, and the client
		// gets a 500 on a connection that closes. x is not reused: the
		// handler stopped halfway through.
		ctx.Response.Reset()
		answerError(ctx, http.StatusInternalServerError, "InternalError", "internal error: the request's handler failed (see the node's log)")
		ctx.SetConnectionClose()
		return
	}
	if !x.w.wrote {
		x.w.WriteHeader(http.StatusOK)
	}
	if f.closed.Load() {
		ctx.SetConnectionClose() // as net/http does after Shutdown
	}
	f.pool.Put(x)
}

// serveHTTP runs the handler; a panic is logged with its stack and
// reported (panicked), as net/http's server recovers it, instead of
// ending the process (fasthttp does not recover). http.ErrAbortHandler
// ends a request silently, as in net/http.
func (f *front) serveHTTP(w http.ResponseWriter, r *http.Request) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			if p == http.ErrAbortHandler {
				return
			}
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			f.logger.Error("http: panic serving a request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(buf))
		}
	}()
	f.h.ServeHTTP(w, r)
	return false
}

// fill makes x.req the net/http form of ctx's request. Strings are
// copies: a stream's handler outlives fasthttp's buffers.
func (x *frontExchange) fill(ctx *fasthttp.RequestCtx) error {
	uri := string(ctx.RequestURI())
	if path, query, _ := strings.Cut(uri, "?"); path != "" && path[0] == '/' && strings.IndexByte(path, '%') < 0 {
		x.url = url.URL{Path: path, RawQuery: query} // what ParseRequestURI would give, without its allocation
	} else {
		u, err := url.ParseRequestURI(uri)
		if err != nil {
			return fmt.Errorf("request URI %q: %v", uri, err)
		}
		x.url = *u
	}
	for k, v := range ctx.Request.Header.All() {
		if string(k) == "Host" { // net/http moves it to Request.Host
			continue
		}
		key := string(k)
		x.header[key] = append(x.header[key], string(v))
	}
	body := ctx.Request.Body()
	x.body.Reset(body)
	x.req = http.Request{
		Method:        string(ctx.Method()),
		URL:           &x.url,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        x.header,
		Body:          x.rbody,
		ContentLength: int64(len(body)),
		Host:          string(ctx.Host()),
		RemoteAddr:    ctx.RemoteAddr().String(),
		RequestURI:    uri,
	}
	if !ctx.Request.Header.IsHTTP11() {
		x.req.Proto, x.req.ProtoMinor = "HTTP/1.0", 0
	}
	return nil
}

// isStream reports whether r asks for an event stream.
func isStream(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/databases/") && strings.HasSuffix(r.URL.Path, "/events")
}

// stream serves r on the connection taken over from fasthttp: the
// handler's writes go out as they are flushed, and its context ends when
// the client closes the connection or the node shuts down.
func (f *front) stream(ctx *fasthttp.RequestCtx, r *http.Request) {
	ctx.HijackSetNoResponse(true)
	f.wg.Add(1)
	ctx.Hijack(func(c net.Conn) {
		defer f.wg.Done()
		sctx, cancel := context.WithCancel(f.streams)
		defer cancel()
		// The client sends nothing more: a read ends when it closes the
		// connection, or when the stream is over and c is closed below.
		// c must not be read after this function returns (fasthttp
		// recycles it), hence the wait for the reader.
		read := make(chan struct{})
		go func() {
			defer close(read)
			_, _ = io.Copy(io.Discard, c)
			cancel()
		}()
		w := &streamWriter{bw: bufio.NewWriter(c), header: http.Header{}}
		if !f.serveHTTP(w, r.WithContext(sctx)) {
			if !w.wrote {
				w.WriteHeader(http.StatusOK)
			}
			_ = w.bw.Flush()
		}
		_ = c.Close() // closes the connection: KeepHijackedConns
		<-read
	})
}

// streamWriter writes an answer of unknown length on a taken-over
// connection, which closes after it (HTTP/1.1 without Content-Length).
type streamWriter struct {
	bw     *bufio.Writer
	header http.Header
	wrote  bool
}

func (w *streamWriter) Header() http.Header { return w.header }

func (w *streamWriter) WriteHeader(status int) {
	if w.wrote {
		return
	}
	w.wrote = true
	fmt.Fprintf(w.bw, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	w.header.Set("Connection", "close")
	w.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	_ = w.header.Write(w.bw)
	_, _ = w.bw.WriteString("\r\n")
}

func (w *streamWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.bw.Write(b)
}

func (w *streamWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = w.bw.Flush()
}

// answerError answers ctx's request with the API's error body,
// {"Error", "Type"}, and status.
func answerError(ctx *fasthttp.RequestCtx, status int, typ, msg string) {
	b, _ := marshalAnswer(errorBody{Error: msg, Type: typ})
	ctx.Response.Header.SetContentType(jsonContentType[0])
	ctx.SetStatusCode(status)
	ctx.SetBody(b)
}
