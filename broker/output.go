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

// due says whether the stream is to be read again (read at most every
// outputCheckEvery).
func (g *outputGauge) due(now time.Time) bool {
	return g.highWater > 0 && now.Sub(g.checked) >= outputCheckEvery
}

// read reads the stream's bytes. A stream that cannot be read keeps the
// last figure: the function's publish fails if it is full, and the task is
// retried, which is the safe side.
func (g *outputGauge) read(ctx context.Context, now time.Time) {
	g.checked = now
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if s, err := g.js.Stream(ictx, g.stream); err == nil {
		g.bytes = int64(s.CachedInfo().State.Bytes)
	}
}

// outputFull is the dispatcher's high-water rule, a pure function: the
// buffer counts as full once what it will hold when the sends in flight
// have published reaches highWater (0: never full). That is the stream's
// bytes as last read, the output of the tasks done since (the stream is
// read only every outputCheckEvery, and a shard may take less), and, per
// send in flight, the mean output of a done task (perTask; 0 while none is
// done). Counting only the stream would let several concurrent sends pass
// the high water together and overflow the stream: the publish that fails
// makes its task wait out a retry delay while later tasks, of later
// epochs, take its room, and a reader that takes epochs in order then
// holds chunks it cannot use while the buffer stays full: the job stalls.
func outputFull(stream, doneSince, perTask int64, inflight int, highWater int64) bool {
	if highWater <= 0 {
		return false
	}
	return stream+doneSince+perTask*int64(max(inflight, 0)) >= highWater
}
