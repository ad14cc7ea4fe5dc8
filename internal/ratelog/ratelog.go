// Package ratelog bounds the log lines of refusals a sender from outside
// can cause: at most one line a second per reason, each saying how many
// of that reason went unlogged since the one before, so that every
// refusal is in the log, logged or counted.
package ratelog

import (
	"sync"
	"time"
)

// Limiter decides which refusals are logged. Its reasons are the
// caller's constants (a bounded set). Safe for concurrent use.
type Limiter struct {
	mu      sync.Mutex
	reasons map[string]*entry
}

type entry struct {
	last       time.Time
	suppressed int64
}

// Every is the least time between two lines of one reason.
const Every = time.Second

// Allow reports whether a refusal of reason at now is logged, and if so
// how many of that reason were not since the last line.
func (l *Limiter) Allow(reason string, now time.Time) (ok bool, suppressed int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reasons == nil {
		l.reasons = map[string]*entry{}
	}
	e := l.reasons[reason]
	if e == nil {
		e = &entry{}
		l.reasons[reason] = e
	}
	if !e.last.IsZero() && now.Sub(e.last) < Every {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}
