package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// rawConn is a minimal HTTP/1.1 keep-alive client on one TCP connection,
// used by the closed-loop workers the way load generators such as wrk drive
// a server: the worker's goroutine writes the request and reads the answer
// itself. net/http's client adds two goroutines per connection and a
// hand-off per request, which on a 2-core machine shared with the server
// takes CPU the server would otherwise get; every HTTP row (shardnode and
// the trivial Go handler alike) is measured with this client.
type rawConn struct {
	addr   string // host:port
	conn   net.Conn
	status int // of the last answer
	br     *bufio.Reader
	wbuf   []byte
}

// newRawConn returns a client of the server at base ("http://host:port").
func newRawConn(base string) (*rawConn, error) {
	addr, ok := strings.CutPrefix(base, "http://")
	if !ok || addr == "" || strings.Contains(addr, "/") {
		return nil, fmt.Errorf("raw HTTP client: base URL %q must be http://host:port", base)
	}
	return &rawConn{addr: addr}, nil
}

func (c *rawConn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// do sends one request and reads its answer into out; a status other than
// want is an error carrying the start of the body.
func (c *rawConn) do(ctx context.Context, method, path string, body []byte, want int, out *bytes.Buffer) error {
	if err := c.roundTrip(ctx, method, path, body, out); err != nil {
		c.close() // the next request reconnects
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if status := c.status; status != want {
		b := out.Bytes()
		if len(b) > 300 {
			b = b[:300]
		}
		return fmt.Errorf("%s %s: status %d, want %d: %s", method, path, status, want, b)
	}
	return nil
}

func (c *rawConn) roundTrip(ctx context.Context, method, path string, body []byte, out *bytes.Buffer) error {
	if c.conn == nil {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return err
		}
		c.conn, c.br = conn, bufio.NewReaderSize(conn, 64<<10)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.conn.SetDeadline(dl)
	}
	conn := c.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	err := c.exchange(method, path, body, out)
	if !stop() && err == nil {
		c.close() // the context ended as the answer came: the deadline may be cut
	}
	return err
}

func (c *rawConn) exchange(method, path string, body []byte, out *bytes.Buffer) error {
	w := append(c.wbuf[:0], method...)
	w = append(append(append(w, ' '), path...), " HTTP/1.1\r\nHost: "...)
	w = append(append(w, c.addr...), "\r\n"...)
	if body != nil {
		w = append(w, "Content-Type: application/json\r\nContent-Length: "...)
		w = append(strconv.AppendInt(w, int64(len(body)), 10), "\r\n"...)
	}
	w = append(w, "\r\n"...)
	c.wbuf = w
	if len(body) > 0 && len(body) <= 16<<10 {
		c.wbuf = append(w, body...)
		w, body = c.wbuf, nil
	}
	if _, err := c.conn.Write(w); err != nil {
		return err
	}
	if len(body) > 0 {
		if _, err := c.conn.Write(body); err != nil {
			return err
		}
	}
	return c.readResponse(out)
}

// readResponse reads a status line, headers and a body of known length or
// chunked.
func (c *rawConn) readResponse(out *bytes.Buffer) error {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("read status line: %w", err)
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return fmt.Errorf("malformed status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return fmt.Errorf("malformed status line %q", line)
	}
	c.status = status
	length, chunked, closeAfter := int64(-1), false, false
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("read headers: %w", err)
		}
		h := bytes.TrimRight(line, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return fmt.Errorf("malformed header %q", h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
				return fmt.Errorf("malformed Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closeAfter = bytes.EqualFold(value, []byte("close"))
		}
	}
	out.Reset()
	switch {
	case chunked:
		err = c.readChunked(out)
	case length >= 0:
		_, err = io.CopyN(out, c.br, length)
	default:
		_, err = out.ReadFrom(c.br)
		closeAfter = true
	}
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if closeAfter {
		c.close()
	}
	return nil
}

func (c *rawConn) readChunked(out *bytes.Buffer) error {
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		sz, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(sz), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("malformed chunk size %q", line)
		}
		if n == 0 {
			for { // trailers, then the empty line
				line, err := c.br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := io.CopyN(out, c.br, n); err != nil {
			return err
		}
		if _, err := c.br.Discard(2); err != nil {
			return errors.Join(errors.New("chunk without CRLF"), err)
		}
	}
}
