package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// apiClient calls one shardnode node's HTTP API for the admin commands.
type apiClient struct {
	base    string        // e.g. http://127.0.0.1:8080, no trailing slash
	timeout time.Duration // per request, except the event stream
	hc      *http.Client
}

// newAPIClient returns a client of the node at base.
func newAPIClient(base string) (*apiClient, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q: want a node's base URL such as http://127.0.0.1:8080", base)
	}
	return &apiClient{base: strings.TrimRight(base, "/"), timeout: 30 * time.Second, hc: &http.Client{}}, nil
}

// dbPath returns the path of a database resource: dbPath("shop",
// "resharding") is /databases/shop/resharding.
func dbPath(db string, elems ...string) string {
	p := "/databases/" + url.PathEscape(db)
	for _, e := range elems {
		p += "/" + url.PathEscape(e)
	}
	return p
}

// serverError is an error answer of the server: its status and the
// {"Error", "Type"} body.
type serverError struct {
	Status int
	Type   string
	Msg    string
}

// Error returns the server's message with its type and status.
func (e *serverError) Error() string {
	if e.Type == "" {
		return fmt.Sprintf("%s (HTTP %d)", e.Msg, e.Status)
	}
	return fmt.Sprintf("%s (%s, HTTP %d)", e.Msg, e.Type, e.Status)
}

// decodeServerError reads an error answer's body.
func decodeServerError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	se := &serverError{Status: resp.StatusCode}
	var body struct {
		Error string `json:"Error"`
		Type  string `json:"Type"`
	}
	if json.Unmarshal(b, &body) == nil && body.Error != "" {
		se.Msg, se.Type = body.Error, body.Type
	} else if s := strings.TrimSpace(string(b)); s != "" {
		se.Msg = s
	} else {
		se.Msg = http.StatusText(resp.StatusCode)
	}
	return se
}

// send makes one request and returns the answer's body; a status outside
// 2xx is a *serverError, an unreachable node says so.
func (c *apiClient) send(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.unreachable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, decodeServerError(resp)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	return b, nil
}

// getJSON GETs path and decodes the answer into out.
func (c *apiClient) getJSON(ctx context.Context, path string, query url.Values, out any) error {
	b, err := c.send(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("GET %s: decode answer: %w", path, err)
	}
	return nil
}

// unreachable wraps a transport error with the node's address.
func (c *apiClient) unreachable(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("cannot reach shardnode at %s (is it running? see --url): %w", c.base, err)
}

// sseEvent is one server-sent event.
type sseEvent struct {
	Event string
	ID    string
	Data  string
}

// stream follows the server-sent events at path and calls fn for each
// event until fn returns false, ctx ends, or the stream fails or ends (an
// error either way: a live stream never ends by itself).
func (c *apiClient) stream(ctx context.Context, path string, fn func(sseEvent) bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeServerError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return fmt.Errorf("GET %s: want an event stream, got %q", path, ct)
	}
	err = readSSE(resp.Body, fn)
	if err == nil {
		err = errors.New("event stream closed by the server")
	}
	return err
}

// readSSE parses a server-sent event stream (the WHATWG format: "field:
// value" lines, comments starting with ":", events ended by a blank line)
// and calls fn per event. It returns nil when fn returns false or at the
// end of r.
func readSSE(r io.Reader, fn func(sseEvent) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var ev sseEvent
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil && (err != io.EOF || line == "") {
			if err == io.EOF {
				return nil
			}
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if len(data) > 0 {
				ev.Data = strings.Join(data, "\n")
				if ev.Event == "" {
					ev.Event = "message"
				}
				if !fn(ev) {
					return nil
				}
			}
			ev, data = sseEvent{}, nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.Event = value
		case "data":
			data = append(data, value)
		case "id":
			ev.ID = value
		}
	}
}
