package dispatch

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// taskKey names a task within its job: Settle's arguments.
type taskKey struct{ epoch, shard int }

func keyOf(t wire.ShardTask) taskKey { return taskKey{t.Epoch, t.Shard} }

// phase is where a held task is.
type phase int

const (
	// phaseQueued: a replay waiting for a send slot.
	phaseQueued phase = iota
	// phaseSending: has a send slot: being sent, or waiting to be sent
	// again (a retry's backoff, a busy home, no replica in the plan).
	phaseSending
	// phaseEnded: the shard's end came; the task waits for Settle.
	phaseEnded
	// phaseFailed: failed for good; the task waits for Settle.
	phaseFailed
)

func (p phase) String() string {
	return [...]string{"queued", "sending", "ended", "failed"}[p]
}

// entry is one task the dispatcher holds, from its delivery (or Replay)
// to its Settle.
type entry struct {
	task wire.ShardTask
	// msg is the task's latest delivery from the queue, which acks it;
	// nil for a replay, which has nothing to ack.
	msg   jetstream.Msg
	phase phase
	// sends counts the sends begun (the failed sends that count against
	// MaxDeliver are the send loop's: sendUntilDone).
	sends  int
	end    wire.ShardEnd // phaseEnded
	reason string        // phaseFailed
	// again asks for one more send once the current one ends: a replay
	// asked while it was being sent (the chunks that had arrived before
	// may have been dropped by the sink).
	again bool
	// cancel stops the entry's send goroutine (set by the runner).
	cancel context.CancelFunc
}

// state is the dispatcher's bookkeeping: the tasks it holds and its
// counters. It does no I/O and is not safe for concurrent use: the
// Dispatcher locks around it. Entries are changed only through its
// methods, which keep the counters in step; the runner passes the entry
// it works on back, and a method finding that entry no longer current
// (settled, or dropped at shutdown) changes nothing.
type state struct {
	entries map[taskKey]*entry
	replays []*entry // phaseQueued, oldest first
	sending int      // entries in phaseSending: the send slots in use

	sends, retries, failed, settled, malformed int
}

func newState() *state { return &state{entries: map[taskKey]*entry{}} }

// current says whether e is still held.
func (s *state) current(e *entry) bool { return e != nil && s.entries[keyOf(e.task)] == e }

func (s *state) setPhase(e *entry, p phase) {
	if e.phase == phaseSending {
		s.sending--
	}
	if p == phaseSending {
		s.sending++
	}
	e.phase = p
}

// receive records a delivery of task from the queue. A new task starts
// sending (start true, a send slot taken). A task already held (the
// server redelivered it, or a replay of it is held) keeps the newer
// delivery for the ack and is not sent again, unless it was a replay
// still waiting for a slot, which starts now.
func (s *state) receive(task wire.ShardTask, msg jetstream.Msg) (e *entry, start bool) {
	if e := s.entries[keyOf(task)]; e != nil {
		e.msg = msg
		if e.phase != phaseQueued {
			return e, false
		}
		s.unqueue(e)
		s.setPhase(e, phaseSending)
		return e, true
	}
	e = &entry{task: task, msg: msg}
	s.entries[keyOf(task)] = e
	s.setPhase(e, phaseSending)
	return e, true
}

// replay queues a send of task outside the queue. A task queued needs
// none; one being sent is sent once more after the current send ends (the
// sink may have dropped the chunks already sent, and a send in progress
// does not start over); one ended or failed is sent again.
func (s *state) replay(task wire.ShardTask) (queued bool) {
	e := s.entries[keyOf(task)]
	switch {
	case e == nil:
		e = &entry{task: task}
		s.entries[keyOf(task)] = e
	case e.phase == phaseQueued:
		return false
	case e.phase == phaseSending:
		e.again = true
		return false
	default:
		s.setPhase(e, phaseQueued)
		e.reason, e.end = "", wire.ShardEnd{}
	}
	s.replays = append(s.replays, e)
	return true
}

func (s *state) unqueue(e *entry) {
	for i, r := range s.replays {
		if r == e {
			s.replays = append(s.replays[:i], s.replays[i+1:]...)
			return
		}
	}
}

// nextReplay starts the oldest queued replay if fewer than share sends
// are in flight.
func (s *state) nextReplay(share int) *entry {
	if len(s.replays) == 0 || s.sending >= share {
		return nil
	}
	e := s.replays[0]
	s.replays = s.replays[1:]
	s.setPhase(e, phaseSending)
	return e
}

// canTake says whether another task may be taken from the queue: a send
// slot is free within share and no replay waits for it.
func (s *state) canTake(share int) bool { return s.sending < share && len(s.replays) == 0 }

// sent counts a send of e begun.
func (s *state) sent(e *entry) bool {
	if !s.current(e) {
		return false
	}
	e.sends++
	s.sends++
	if e.sends > 1 {
		s.retries++
	}
	return true
}

// refused uncounts a send of e that its replica refused (429, 503): it did
// no work, and a task's sends say how often its shard was preprocessed.
func (s *state) refused(e *entry) {
	if !s.current(e) || e.sends == 0 {
		return
	}
	if e.sends > 1 {
		s.retries--
	}
	e.sends--
	s.sends--
}

// ended records the shard's end; false if e is no longer held. A task
// asked for again while it was sent (again) is queued as a replay.
func (s *state) ended(e *entry, end wire.ShardEnd) bool {
	if !s.current(e) || e.phase != phaseSending {
		return false
	}
	e.end = end
	if e.again {
		e.again = false
		s.setPhase(e, phaseQueued)
		s.replays = append(s.replays, e)
		return true
	}
	s.setPhase(e, phaseEnded)
	return true
}

// fail records that e failed for good; false if e is no longer held.
func (s *state) fail(e *entry, reason string) bool {
	if !s.current(e) || e.phase != phaseSending {
		return false
	}
	s.setPhase(e, phaseFailed)
	e.reason = reason
	s.failed++
	return true
}

// settle removes the task of key, whatever its phase, and returns it.
func (s *state) settle(key taskKey) (*entry, bool) {
	e := s.entries[key]
	if e == nil {
		return nil, false
	}
	switch e.phase {
	case phaseQueued:
		s.unqueue(e)
	case phaseSending:
		s.sending--
	}
	delete(s.entries, key)
	s.settled++
	return e, true
}

// malformedTask counts a delivery that is no task of the job.
func (s *state) malformedTask() { s.malformed++ }

// clear removes every task (the dispatcher stops) and returns them.
func (s *state) clear() []*entry {
	out := make([]*entry, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, e)
	}
	s.entries = map[taskKey]*entry{}
	s.replays = nil
	s.sending = 0
	return out
}

// held counts the tasks received (or replays started) and not settled.
func (s *state) held() int { return len(s.entries) - len(s.replays) }

// deliveries lists the queue deliveries of the tasks held, for the
// progress pings.
func (s *state) deliveries() []jetstream.Msg {
	var out []jetstream.Msg
	for _, e := range s.entries {
		if e.msg != nil {
			out = append(out, e.msg)
		}
	}
	return out
}
