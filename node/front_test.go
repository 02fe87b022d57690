package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// startFront serves h with a front on a loopback port and returns its
// base URL and the front; the test's cleanup shuts it down.
func startFront(t testing.TB, h http.Handler, maxBody int, streams context.Context) (string, *front) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := newFront(ln, h, maxBody, time.Minute, streams, slog.New(slog.DiscardHandler))
	done := make(chan error, 1)
	go func() { done <- f.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), f
}

// rawExchange sends a raw HTTP/1.1 request on a new connection and
// returns the answer.
func rawExchange(t *testing.T, base, request string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestFrontGivesHandlersTheRequestNetHTTPWould: what a handler sees of a
// request through front (method, URL as net/http parses it, path values,
// headers, body, host) and what the client gets of the answer (status,
// headers, body).
func TestFrontGivesHandlersTheRequestNetHTTPWould(t *testing.T) {
	type seen struct {
		Method, Path, RawPath, RawQuery, RequestURI, Host, DB, Body string
		Header                                                      http.Header
		ContentLength                                               int64
		RemoteAddr                                                  bool
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/databases/{db}/docs", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		s := seen{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery, RequestURI: r.RequestURI,
			Host: r.Host, DB: r.PathValue("db"), Body: string(body), Header: r.Header, ContentLength: r.ContentLength, RemoteAddr: r.RemoteAddr != ""}
		b, _ := json.Marshal(s)
		w.Header().Set("X-Answer", "yes")
		w.Header().Add("X-Many", "1")
		w.Header().Add("X-Many", "2")
		writeRaw(w, http.StatusCreated, b)
	})
	base, _ := startFront(t, mux, 1<<20, context.Background())
	for _, uri := range []string{
		"/databases/db/docs?id=users/1",
		"/databases/db/docs?id=a%20b&id=c%26d",
		"/databases/a%2Fb/docs",
		"/databases/d%C3%A9j%C3%A0/docs?x",
		"/databases/db/docs",
	} {
		t.Run(uri, func(t *testing.T) {
			resp := rawExchange(t, base, "PUT "+uri+" HTTP/1.1\r\nHost: example.test\r\nx-custom: v1\r\nX-Custom: v2\r\nContent-Length: 5\r\n\r\nhello")
			if resp.StatusCode != http.StatusCreated {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if got := resp.Header.Get("Content-Type"); got != jsonContentType[0] {
				t.Errorf("Content-Type %q", got)
			}
			if got := resp.Header.Values("X-Many"); strings.Join(got, ",") != "1,2" || resp.Header.Get("X-Answer") != "yes" {
				t.Errorf("answer headers %v", resp.Header)
			}
			var s seen
			if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
				t.Fatal(err)
			}
			want, err := url.ParseRequestURI(uri)
			if err != nil {
				t.Fatal(err)
			}
			if s.Path != want.Path || s.RawPath != want.RawPath || s.RawQuery != want.RawQuery || s.RequestURI != uri {
				t.Errorf("URL: path %q raw %q query %q uri %q; net/http: %q %q %q", s.Path, s.RawPath, s.RawQuery, s.RequestURI, want.Path, want.RawPath, want.RawQuery)
			}
			if s.Method != "PUT" || s.Host != "example.test" || s.Body != "hello" || s.ContentLength != 5 || !s.RemoteAddr {
				t.Errorf("request %+v", s)
			}
			if got := s.Header["X-Custom"]; len(got) != 2 || got[0] != "v1" || got[1] != "v2" {
				t.Errorf("X-Custom %q, want [v1 v2]", got)
			}
			if _, ok := s.Header["Host"]; ok {
				t.Errorf("Host in the header map, as net/http never puts it: %v", s.Header)
			}
		})
	}
	// The path value decodes as ServeMux decodes it.
	resp := rawExchange(t, base, "GET /databases/a%2Fb/docs HTTP/1.1\r\nHost: x\r\n\r\n")
	var s seen
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || s.DB != "a/b" {
		t.Errorf("db path value %q (%v), want a/b", s.DB, err)
	}
	// A chunked body arrives whole, with its length.
	resp = rawExchange(t, base, "POST /databases/db/docs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n")
	s = seen{}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || s.Body != "hello" || s.ContentLength != 5 {
		t.Errorf("chunked body %q, length %d (%v); want hello, 5", s.Body, s.ContentLength, err)
	}
}

// TestFrontRefusesOversizedRequestsWithJSON: what fasthttp refuses before
// a handler runs gets the API's error shape and status.
func TestFrontRefusesOversizedRequestsWithJSON(t *testing.T) {
	called := false
	base, _ := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called = true }), 1000, context.Background())
	for _, tc := range []struct {
		name, request string
		status        int
		typ           string
	}{
		{"body", "PUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n" + strings.Repeat("a", 1001), http.StatusRequestEntityTooLarge, "BodyTooLarge"},
		{"headers", "GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge, "HeadersTooLarge"},
		{"malformed", "GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", http.StatusBadRequest, "BadRequest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := rawExchange(t, base, tc.request)
			var e errorBody
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("status %d, body not JSON: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tc.status || e.Type != tc.typ || e.Error == "" || strings.Contains(e.Error, "fasthttp") {
				t.Errorf("status %d %+v, want %d %s", resp.StatusCode, e, tc.status, tc.typ)
			}
		})
	}
	if called {
		t.Error("the handler ran for a refused request")
	}
}

// TestFrontStreamsEventsUntilTheClientLeaves: an event stream's writes
// reach the client as the handler flushes them, before it returns; its
// context ends when the client closes the connection, and at shutdown.
func TestFrontStreamsEventsUntilTheClientLeaves(t *testing.T) {
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	ended := make(chan string, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: hello\ndata: %s\n\n", r.URL.Path)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		ended <- r.URL.Path
	})
	base, f := startFront(t, h, 1000, streams)
	open := func(db string) (*bufio.Reader, net.Conn) {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /databases/%s/events HTTP/1.1\r\nHost: x\r\n\r\n", db)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "event: hello\n" {
			t.Fatalf("first line %q, %v", line, err)
		}
		return br, c
	}
	_, c1 := open("one")
	_, c2 := open("two")
	defer c2.Close()
	c1.Close()
	select {
	case p := <-ended:
		if p != "/databases/one/events" {
			t.Fatalf("stream %s ended, want one", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's context did not end when its client left")
	}
	endStreams()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a stream open: %v", err)
	}
	if p := <-ended; p != "/databases/two/events" {
		t.Fatalf("stream %s ended, want two", p)
	}
}

// TestFrontShutdownBeforeServe: a node that fails to start shuts its
// server down before Serve ran; Serve then returns at once.
func TestFrontShutdownBeforeServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := newFront(ln, http.NotFoundHandler(), 1000, time.Minute, context.Background(), slog.New(slog.DiscardHandler))
	if err := f.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Serve() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve after Shutdown did not return")
	}
}

// BenchmarkFront compares front with net/http's server on a trivial
// handler answering a GET-sized body, over keep-alive connections driven
// the way the bench command's clients drive them: the server's own cost
// per request, which decides the point GET and PUT rows on 2 cores.
func BenchmarkFront(b *testing.B) {
	body := []byte(strings.Repeat("x", 1200))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeRaw(w, http.StatusOK, body) })
	run := func(b *testing.B, base string) {
		addr := strings.TrimPrefix(base, "http://")
		b.SetParallelism(32) // 64 clients on 2 cores
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			req := []byte("GET /databases/db/docs?id=users/1 HTTP/1.1\r\nHost: x\r\n\r\n")
			for pb.Next() {
				if _, err := c.Write(req); err != nil {
					b.Error(err)
					return
				}
				if err := readAnswer(br); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("net-http", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		defer srv.Close()
		run(b, "http://"+ln.Addr().String())
	})
	b.Run("front", func(b *testing.B) {
		base, _ := startFront(b, h, 1<<20, context.Background())
		run(b, base)
	})
}

// readAnswer reads one HTTP/1.1 answer with a Content-Length.
func readAnswer(br *bufio.Reader) error {
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if k, v, ok := strings.Cut(string(line), ":"); ok && strings.EqualFold(k, "Content-Length") {
			if n, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return err
			}
		}
	}
	if n < 0 {
		return fmt.Errorf("answer without Content-Length")
	}
	_, err := br.Discard(n)
	return err
}

// TestFrontHeadAndKeepAlive: several requests on one connection, a HEAD
// among them (RavenDB's clients check a document with HEAD and read its
// ETag), answered in order, the HEAD without a body.
func TestFrontHeadAndKeepAlive(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"A:1-x"`)
		writeRaw(w, http.StatusOK, []byte(`{"method":"`+r.Method+`"}`))
	})
	base, _ := startFront(t, h, 1000, context.Background())
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nHEAD /a HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i, method := range []string{"GET", "HEAD", "GET"} {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		want := `{"method":"` + method + `"}`
		if method == "HEAD" {
			if len(body) != 0 || resp.ContentLength != int64(len(want)) {
				t.Errorf("HEAD: body %q, Content-Length %d; want none and %d", body, resp.ContentLength, len(want))
			}
		} else if string(body) != want {
			t.Errorf("answer %d: %q, want %q", i, body, want)
		}
		if resp.StatusCode != 200 || resp.Header.Get("ETag") != `"A:1-x"` {
			t.Errorf("answer %d: %d %v", i, resp.StatusCode, resp.Header)
		}
	}
}

// TestFrontSurvivesAPanickingHandler: a handler's panic is a 500 for its
// request, as with net/http's server, and the node serves on.
func TestFrontSurvivesAPanickingHandler(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			w.Header().Set("X-Half", "written")
			panic("handler bug")
		}
		writeRaw(w, http.StatusOK, []byte(`{}`))
	})
	base, _ := startFront(t, h, 1000, context.Background())
	resp := rawExchange(t, base, "GET /panic HTTP/1.1\r\nHost: x\r\n\r\n")
	var e errorBody
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 500 || e.Type != "InternalError" || resp.Header.Get("X-Half") != "" {
		t.Fatalf("answer to a panic: %d %v %+v (%v)", resp.StatusCode, resp.Header, e, err)
	}
	if resp := rawExchange(t, base, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("after a panic: %d", resp.StatusCode)
	}
}

// TestFrontClosesConnectionsThatOutliveShutdown: a request still running
// when Shutdown gives up waiting is answered on a connection that then
// closes, and a request arriving after on another kept-alive connection
// is refused: a client never keeps talking to a stopped node whose port
// a restarted one listens on again.
func TestFrontClosesConnectionsThatOutliveShutdown(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		writeRaw(w, http.StatusOK, []byte(`{}`))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := newFront(ln, h, 1000, time.Minute, context.Background(), slog.New(slog.DiscardHandler))
	go f.Serve()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, br *bufio.Reader, path string) *http.Response {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		return resp
	}
	slowC, slowR := dial()
	idleC, idleR := dial()
	if resp := get(idleC, idleR, "/ok"); resp.StatusCode != 200 {
		t.Fatalf("before shutdown: %d", resp.StatusCode)
	}
	fmt.Fprintf(slowC, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case <-entered: // the slow request is in its handler, its connection busy
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request did not reach its handler")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = f.Shutdown(ctx) // gives up: /slow is still running
	close(release)
	resp, err := http.ReadResponse(slowR, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Close {
		t.Errorf("the request that outlived shutdown was answered on a connection kept alive: %v", resp.Header)
	}
	// The idle connection was closed by the shutdown, or refuses.
	fmt.Fprintf(idleC, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(idleR, nil); err == nil && resp.StatusCode == 200 {
		t.Errorf("a kept-alive connection was served after shutdown")
	}
}

// TestFrontSendsWholeAnswersWithoutACopy: an answer written whole
// (writeRaw), also through the metrics' statusWriter, becomes the body as
// it is, not a copy in fasthttp's buffer (a query's answer is as large as
// its results); after an earlier Write it is appended.
func TestFrontSendsWholeAnswersWithoutACopy(t *testing.T) {
	b := []byte(`{"Results":[` + strings.Repeat(`{"n":1},`, 1000) + `{"n":1}]}`)
	for _, wrap := range []bool{false, true} {
		var ctx fasthttp.RequestCtx
		fw := &frontWriter{ctx: &ctx, header: http.Header{}}
		var w http.ResponseWriter = fw
		if wrap {
			w = &statusWriter{ResponseWriter: fw}
		}
		writeRaw(w, http.StatusOK, b)
		body := ctx.Response.Body()
		if len(body) != len(b) || &body[0] != &b[0] {
			t.Fatalf("wrapped %v: the body is a copy of the answer (or not it)", wrap)
		}
		if ctx.Response.StatusCode() != http.StatusOK || string(ctx.Response.Header.ContentType()) != jsonContentType[0] {
			t.Fatalf("wrapped %v: status %d, content type %q", wrap, ctx.Response.StatusCode(), ctx.Response.Header.ContentType())
		}
	}
	var ctx fasthttp.RequestCtx
	fw := &frontWriter{ctx: &ctx, header: http.Header{}}
	_, _ = fw.Write([]byte(`{"a":`))
	fw.writeOwned([]byte(`1}`))
	if got := string(ctx.Response.Body()); got != `{"a":1}` {
		t.Fatalf("body %q after a Write and a whole answer, want both", got)
	}
}
