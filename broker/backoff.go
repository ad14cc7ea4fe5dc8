package broker

import "time"

// Retry backoff bounds: the first retry comes quickly (a replica that just
// died is usually replaced within a second), later ones back off so a
// failing dependency is not hammered.
const (
	retryBase = 250 * time.Millisecond
	retryCap  = 10 * time.Second
)

// RetryDelay is how long a task waits before its next delivery after its
// attempt-th send (1-based) failed transiently: 250ms doubling per attempt,
// capped at 10s. No jitter: redeliveries are spread by the server's own
// timing, and a deterministic delay is testable.
func RetryDelay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := retryBase
	for i := 1; i < attempt; i++ {
		d *= 2
		if d >= retryCap {
			return retryCap
		}
	}
	return d
}
