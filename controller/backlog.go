package controller

import (
	"slices"
	"sync"
	"time"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/internal/sat"
)

// backlogPoll is how often a job's task consumer is asked for its counts:
// the autoscaler reads the backlog every tick, from what was read last.
const backlogPoll = time.Second

// A job's task consumer is read every firstTasksPoll while no task was
// ever queued, for at most firstTasksWindow after its run started: a
// submit queues the tasks after the record, and a controller that took
// the job in between saw them a whole backlogPoll later (the first batch
// 1 s late in about one cold start of three).
const (
	firstTasksPoll   = 50 * time.Millisecond
	firstTasksWindow = 10 * time.Second
)

// pollEvery is the wait between reads of a job's task consumer.
func pollEvery(seenTasks bool, sinceStart time.Duration) time.Duration {
	if !seenTasks && sinceStart < firstTasksWindow {
		return firstTasksPoll
	}
	return backlogPoll
}

// backlogOf is the autoscaler's view of a job's tasks
// from its task consumer and its agents. queued is the consumer's tasks
// not yet acked (pending + ack pending: waiting, or held by an agent);
// known is false until the consumer was read once. inFlight is what the
// agents send now and wanted what they would send with a larger share
// (their latest demand signals): re-productions of shards for a resumed
// reader are among them, and not in the queue.
//
// Pending is the queued tasks not in flight, or what the agents want if
// that is more (the re-productions; taking the larger keeps queued tasks
// an agent wants from counting twice). The job is done once nothing is
// queued, in flight or wanted: a resumed reader that wants a shard again
// brings the replicas back.
func backlogOf(queued int, known bool, inFlight, wanted int) (pending, inflight int, done bool) {
	if !known {
		return max(wanted, 0), max(inFlight, 0), false
	}
	pending = max(queued-inFlight, wanted, 0)
	inflight = max(inFlight, 0)
	return pending, inflight, pending == 0 && inflight == 0
}

// agentLoad sums what the agents that signalled within stale of now
// dispatch: their names (sorted), the tasks they have in flight and those
// they would send with a larger share. An agent silent for longer is gone
// or cut off: its tasks come back to the queue after the ack wait.
func agentLoad(signals map[string]autoscale.Signal, now time.Time, stale time.Duration) (names []string, inFlight, wanted int) {
	for name, s := range signals {
		if stale > 0 && now.Sub(s.At) > stale {
			continue
		}
		names = append(names, name)
		inFlight = sat.Sum(inFlight, s.Demand.InFlight)
		wanted = sat.Sum(wanted, s.Demand.PendingTasks)
	}
	slices.Sort(names)
	return names, inFlight, wanted
}

// backlogCounts are a job's tasks as its status shows them.
type backlogCounts struct {
	// Known is false until the task consumer was read once.
	Known bool
	// Queued is the tasks not yet acked (see backlogOf); Pending,
	// InFlight and Done what the autoscaler reads.
	Queued, Pending, InFlight int
	Done                      bool
}

// taskBacklog is the task consumer's counts as the job's run last polled
// them (set); the agents' load comes with each read (counts).
type taskBacklog struct {
	mu     sync.Mutex
	known  bool
	queued int
	seen   bool // a task was queued at some read
}

// set records the task consumer's counts, and says whether the job has
// tasks queued where it had none (or was not read yet): the moment a job
// at zero activates.
func (b *taskBacklog) set(queued int) (arrived bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	arrived = queued > 0 && (!b.known || b.queued == 0)
	b.known, b.queued = true, queued
	b.seen = b.seen || queued > 0
	return arrived
}

// seenTasks says whether any read found a task queued.
func (b *taskBacklog) seenTasks() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen
}

// counts are the job's tasks with the agents' load: what they have in
// flight and would send with a larger share (agentLoad).
func (b *taskBacklog) counts(inFlight, wanted int) backlogCounts {
	b.mu.Lock()
	known, queued := b.known, b.queued
	b.mu.Unlock()
	pending, inflight, done := backlogOf(queued, known, inFlight, wanted)
	return backlogCounts{Known: known, Queued: queued, Pending: pending, InFlight: inflight, Done: done}
}
