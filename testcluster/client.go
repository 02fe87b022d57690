package testcluster

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Response is an HTTP answer.
type Response struct {
	Status int
	Body   []byte
}

// JSON decodes the body as an object, failing the test if it is not one.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("status %d: body is not a JSON object: %s", r.Status, r.Body)
	}
	return m
}

var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

// Do sends a request to base+path and returns the answer or a transport
// error (a killed node refuses connections).
func Do(method, url, body string, headers ...string) (Response, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return Response{Status: res.StatusCode, Body: b}, err
}

// Must sends a request and fails the test unless the status is want.
func Must(t testing.TB, want int, method, url, body string, headers ...string) Response {
	t.Helper()
	r, err := Do(method, url, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if r.Status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, url, r.Status, want, r.Body)
	}
	return r
}

// Expect returns an error unless the request answers want.
func Expect(want int, method, url, body string) (Response, error) {
	r, err := Do(method, url, body)
	if err != nil {
		return r, err
	}
	if r.Status != want {
		return r, fmt.Errorf("%s %s: status %d, want %d: %s", method, url, r.Status, want, r.Body)
	}
	return r, nil
}
