package dispatch

import (
	"time"

	"github.com/sluice-project/sluice/internal/retry"
)

// RetryDelay is how long a task waits before its next send after its
// attempt-th failed send (1-based): 250ms doubling per attempt, capped at
// 10s, of which jitter (in [0, 1), the caller's random draw) takes away up
// to half (retry.Backoff). The first retry comes quickly (a replica that
// just died is usually replaced within a second), later ones back off so
// that a failing dependency is not hammered; the jitter keeps the tasks of
// a replica that just died, and the agents sharing it, from all coming
// back at the same instant.
func RetryDelay(attempt int, jitter float64) time.Duration {
	return retry.Backoff{Base: 250 * time.Millisecond, Cap: 10 * time.Second}.Delay(attempt, jitter)
}
