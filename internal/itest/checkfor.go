package itest

import (
	"testing"
	"time"
)

// CheckFor calls f every sleep until it returns nil, or fails the test with
// f's last error after total (nats-server's checkFor).
func CheckFor(t testing.TB, total, sleep time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", total, err)
		}
		time.Sleep(sleep)
	}
}
