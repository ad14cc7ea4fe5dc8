package retry

import "time"

// Backoff is capped exponential backoff: Base after the first failure,
// doubling per failure up to Cap.
type Backoff struct {
	Base, Cap time.Duration
}

// Startup is the backoff of start-up work waiting on NATS: the first
// retry comes quickly, later ones at most every 10 s.
func Startup() Backoff { return Backoff{Base: 250 * time.Millisecond, Cap: 10 * time.Second} }

// Delay is how long to wait after the attempt-th failure (1-based):
// Base doubling per attempt, capped at Cap, of which jitter (in [0, 1),
// the caller's random draw) takes away up to half. The jitter keeps
// processes started together from retrying in step; taking it as an
// argument keeps the policy a pure function.
func (b Backoff) Delay(attempt int, jitter float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := b.Base
	for i := 1; i < attempt && d < b.Cap; i++ {
		d *= 2
	}
	d = min(d, b.Cap)
	jitter = min(max(jitter, 0), 1)
	return d - time.Duration(jitter*float64(d/2))
}
