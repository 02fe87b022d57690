package testcluster

import (
	"testing"
	"time"
)

// WaitFor calls cond until it returns nil or timeout passes, then fails
// the test with cond's last error.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	delay := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: %v", timeout, what, err)
		}
		time.Sleep(delay)
		delay = min(delay*2, 200*time.Millisecond)
	}
}
