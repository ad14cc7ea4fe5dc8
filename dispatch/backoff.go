package dispatch

import "time"

// Retry backoff bounds: the first retry comes quickly (a replica that just
// died is usually replaced within a second), later ones back off so that a
// failing dependency is not hammered.
const (
	retryBase = 250 * time.Millisecond
	retryCap  = 10 * time.Second
)

// RetryDelay is how long a task waits before its next send after its
// attempt-th failed send (1-based): 250ms doubling per attempt, capped at
// 10s, of which jitter (in [0, 1), the caller's random draw) takes away up
// to half. The jitter keeps the tasks of a replica that just died, and the
// agents sharing it, from all coming back at the same instant; taking it
// as an argument keeps the policy a pure function.
func RetryDelay(attempt int, jitter float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := retryBase
	for i := 1; i < attempt && d < retryCap; i++ {
		d *= 2
	}
	d = min(d, retryCap)
	jitter = min(max(jitter, 0), 1)
	return d - time.Duration(jitter*float64(d/2))
}
