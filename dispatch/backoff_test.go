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

// TestRetriesOneRule: the rule every send loop follows. A busy replica
// (429, 503) backs off for ever without counting; the task's own
// failures count, and the maxDeliver-th gives it up; a permanent failure
// gives it up at once.
func TestRetriesOneRule(t *testing.T) {
	var r retries
	for i := 1; i <= 50; i++ {
		delay, giveUp := r.after(failBusy, 2, 0)
		if giveUp || delay != RetryDelay(i, 0) {
			t.Fatalf("busy refusal %d: delay %v, give up %v", i, delay, giveUp)
		}
	}
	if delay, giveUp := r.after(failTransient, 2, 0); giveUp || delay != RetryDelay(1, 0) {
		t.Errorf("first failure after 50 refusals: delay %v, give up %v; want the first failure's delay", delay, giveUp)
	}
	if _, giveUp := r.after(failMalformed, 2, 0); !giveUp || r.failures != 2 {
		t.Errorf("second failure with maxDeliver 2: give up %v, failures %d", giveUp, r.failures)
	}
	var p retries
	if _, giveUp := p.after(failPermanent, 20, 0); !giveUp {
		t.Error("a permanent failure is retried")
	}
	var u retries
	if _, giveUp := u.after(failUnauthorized, 2, 0); giveUp || u.failures != 1 {
		t.Errorf("401: give up %v, failures %d; want counted, retried", giveUp, u.failures)
	}
}
