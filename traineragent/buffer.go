package traineragent

import (
	"context"
	"time"
)

// The output buffer (wire.JobSpec.OutputBufferBytes) bounds what an agent
// holds of the job's output: the chunks its readers hold (received, not
// handed out in full to every rank) and the shards a team's producer
// keeps. Two gates keep it: Room stops the dispatcher taking tasks, and
// a send waits for room before it reads each frame of its reply
// (sink.WaitRoom): the reply then stays in the socket, and the replica
// waits on its write (its FrameWriteTimeout may cut the reply; the send is
// then retried without counting against the task). What the agent holds
// thus stays within the buffer plus one chunk per send under way (each
// may read one once there is room). A reader whose ranks wait for a step
// that what it holds cannot make (an epoch's tail, a batch larger than
// the buffer) lets chunks in whatever it holds: holding back would
// deadlock.

// intakeRoom reports whether a chunk may be taken in: the bytes held by
// the readers that keep new output (not lagging) are below buffer (<= 0:
// no bound), or one of them is starved.
func intakeRoom(buffer int64, held []int64, starved, lagging []bool) bool {
	if buffer <= 0 {
		return true
	}
	var kept int64
	for i := range held {
		if lagging[i] {
			continue
		}
		if starved[i] {
			return true
		}
		kept += held[i]
	}
	return kept < buffer
}

// roomPoll is how often a send waiting for room looks again where no
// change is signalled (a member's room follows the planner's answers).
const roomPoll = 100 * time.Millisecond

// waitRoom waits until a chunk may be taken in, or ctx ends.
func (s *sink) waitRoom(ctx context.Context) error {
	buffer := s.job.Spec.OutputBufferBytes
	if buffer <= 0 {
		return nil
	}
	var t *time.Timer
	for {
		changed := (*Agent)(s).roomChanged()
		if s.intakeRoom(buffer) {
			return nil
		}
		if t == nil {
			t = time.NewTimer(roomPoll)
			defer t.Stop()
			s.roomWaits.Add(1)
			defer s.roomWaits.Add(-1)
		} else {
			t.Reset(roomPoll)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-t.C:
		}
	}
}

func (s *sink) intakeRoom(buffer int64) bool {
	held := make([]int64, len(s.readers))
	starved := make([]bool, len(s.readers))
	lagging := make([]bool, len(s.readers))
	for i, r := range s.readers {
		held[i], _, starved[i] = r.role.buffer()
		lagging[i] = r.shedding.Load()
	}
	return intakeRoom(buffer, held, starved, lagging)
}

// roomChanged is closed at the next change of a reader's state (a batch
// handed out frees room).
func (a *Agent) roomChanged() <-chan struct{} {
	a.roomMu.Lock()
	defer a.roomMu.Unlock()
	if a.roomCh == nil {
		a.roomCh = make(chan struct{})
	}
	return a.roomCh
}

// pokeRoom wakes the sends waiting for room.
func (a *Agent) pokeRoom() {
	a.roomMu.Lock()
	defer a.roomMu.Unlock()
	if a.roomCh != nil {
		close(a.roomCh)
		a.roomCh = nil
	}
}
