package broker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// outputCheckEvery bounds how often the dispatcher reads the output
// stream's size: a stream info request per capacity poll would be wasteful.
const outputCheckEvery = 250 * time.Millisecond

// outputGauge tells whether a job's output stream (chunks the trainer agent
// has not yet taken) is near its cap. Dispatching more shards then would
// only make functions fail to publish, so the dispatcher waits: this is the
// backpressure from a slow trainer to the functions.
type outputGauge struct {
	js        jetstream.JetStream
	stream    string
	highWater int64 // 0: never full

	checked time.Time
	bytes   int64
}

// full reports the stream's bytes and whether they reach the high-water
// mark, reading the stream at most every outputCheckEvery. A stream that
// cannot be read counts as not full: the function's publish fails then, and
// the task is retried, which is the safe side.
func (g *outputGauge) full(ctx context.Context, now time.Time) (int64, bool) {
	if g.highWater <= 0 {
		return 0, false
	}
	if now.Sub(g.checked) >= outputCheckEvery {
		g.checked = now
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if s, err := g.js.Stream(ictx, g.stream); err == nil {
			g.bytes = int64(s.CachedInfo().State.Bytes)
		}
	}
	return g.bytes, g.bytes >= g.highWater
}
