package dispatch

import (
	"testing"
	"time"
)

// TestRetryDelay: the send backoff's bounds (the policy itself is
// retry.Backoff's, tested there): 250ms first, capped at 10s.
func TestRetryDelay(t *testing.T) {
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{{1, 250 * time.Millisecond}, {3, time.Second}, {1 << 30, 10 * time.Second}} {
		if got := RetryDelay(c.attempt, 0); got != c.want {
			t.Errorf("RetryDelay(%d, 0) = %v, want %v", c.attempt, got, c.want)
		}
	}
}
