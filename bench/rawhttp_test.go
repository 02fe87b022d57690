package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRawConn(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			w.Header().Set("Content-Length", "")
			w.WriteHeader(201)
			w.Write([]byte(r.Method + " " + r.URL.RawQuery + " " + r.Header.Get("Content-Type") + " " + string(b)))
		case "/chunked":
			for i := 0; i < 4; i++ {
				w.Write([]byte(big))
				w.(http.Flusher).Flush()
			}
		case "/close":
			w.Header().Set("Connection", "close")
			w.Write([]byte("bye"))
		default:
			http.Error(w, "nothing here", 404)
		}
	}))
	defer srv.Close()
	c, err := newRawConn(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	ctx := context.Background()
	var out bytes.Buffer
	for i := 0; i < 3; i++ { // one connection, kept alive
		if err := c.do(ctx, "PUT", "/echo?id=a", []byte(`{"a":1}`), 201, &out); err != nil {
			t.Fatal(err)
		}
		if got := out.String(); got != `PUT id=a application/json {"a":1}` {
			t.Fatalf("echo %q", got)
		}
	}
	body := bytes.Repeat([]byte("y"), 40<<10) // written apart from the headers
	if err := c.do(ctx, "POST", "/echo", body, 201, &out); err != nil || out.Len() != len("POST  application/json ")+len(body) {
		t.Fatalf("large body: %v, %d bytes back", err, out.Len())
	}
	if err := c.do(ctx, "GET", "/chunked", nil, 200, &out); err != nil || out.String() != strings.Repeat(big, 4) {
		t.Fatalf("chunked: %v, %d bytes", err, out.Len())
	}
	if err := c.do(ctx, "GET", "/close", nil, 200, &out); err != nil || out.String() != "bye" || c.conn != nil {
		t.Fatalf("Connection: close: %v %q, conn %v", err, out.String(), c.conn)
	}
	err = c.do(ctx, "GET", "/missing", nil, 200, &out)
	if err == nil || !strings.Contains(err.Error(), "status 404") || !strings.Contains(err.Error(), "nothing here") {
		t.Fatalf("wrong status: %v", err)
	}
	srv.CloseClientConnections()
	_ = c.do(ctx, "GET", "/echo", nil, 201, &out) // may fail on the dead connection
	if err := c.do(ctx, "GET", "/echo", nil, 201, &out); err != nil {
		t.Fatalf("after the server closed the connection: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.do(cctx, "GET", "/echo", nil, 201, &out); err == nil {
		t.Fatal("a cancelled context did not stop the request")
	}
}
