package dispatch

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// delivery stands for a jetstream.Msg: state only keeps and hands it back.
type delivery struct {
	jetstream.Msg
	n int
}

func stateTask(epoch, shard int) wire.ShardTask {
	return testJob("js", 4, 2).Task(epoch, shard)
}

type counts struct{ sending, held, replays, sends, retries, failed, settled int }

func countsOf(s *state) counts {
	return counts{s.sending, s.held(), len(s.replays), s.sends, s.retries, s.failed, s.settled}
}

func TestStateTaskLifecycle(t *testing.T) {
	s := newState()
	task := stateTask(0, 1)
	d1 := &delivery{n: 1}
	e, start := s.receive(task, d1)
	if !start || e.phase != phaseSending || e.msg != d1 {
		t.Fatalf("receive: start %v, %+v", start, e)
	}
	if !s.canTake(2) || s.canTake(1) {
		t.Errorf("canTake with 1 sending: share 2 %v, share 1 %v", s.canTake(2), s.canTake(1))
	}
	s.sent(e)
	s.sent(e)
	// The server redelivers it while held: the newer delivery is kept, no new send.
	d2 := &delivery{n: 2}
	if e2, start := s.receive(task, d2); start || e2 != e || e.msg != d2 {
		t.Errorf("redelivery: start %v, same entry %v, msg %v", start, e2 == e, e.msg)
	}
	if !s.ended(e, wire.ShardEnd{Chunks: 2}) || e.phase != phaseEnded {
		t.Fatalf("ended: phase %v", e.phase)
	}
	if got, want := countsOf(s), (counts{sending: 0, held: 1, sends: 2, retries: 1}); got != want {
		t.Errorf("ended: %+v, want %+v", got, want)
	}
	if got := s.deliveries(); len(got) != 1 || got[0] != d2 {
		t.Errorf("deliveries %v", got)
	}
	got, ok := s.settle(keyOf(task))
	if !ok || got != e || got.phase != phaseEnded || got.end.Chunks != 2 {
		t.Fatalf("settle: %v, %+v", ok, got)
	}
	if _, ok := s.settle(keyOf(task)); ok {
		t.Error("settled twice")
	}
	if s.ended(e, wire.ShardEnd{}) || s.sent(e) || s.fail(e, "x") {
		t.Error("a settled entry changed")
	}
	if got, want := countsOf(s), (counts{sends: 2, retries: 1, settled: 1}); got != want {
		t.Errorf("settled: %+v, want %+v", got, want)
	}
}

func TestStateFailures(t *testing.T) {
	s := newState()
	e, _ := s.receive(stateTask(1, 0), &delivery{})
	for range 3 {
		s.sent(e)
	}
	if !s.fail(e, "gave up") || e.phase != phaseFailed || e.reason != "gave up" {
		t.Fatalf("fail: %+v", e)
	}
	if s.fail(e, "again") {
		t.Error("failed twice")
	}
	if got, want := countsOf(s), (counts{held: 1, sends: 3, retries: 2, failed: 1}); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
	// Settling a task while it is being sent frees its slot.
	e2, _ := s.receive(stateTask(1, 1), &delivery{})
	if s.sending != 1 {
		t.Fatalf("sending %d", s.sending)
	}
	if got, _ := s.settle(keyOf(e2.task)); got.phase != phaseSending || s.sending != 0 {
		t.Errorf("settle while sending: phase %v, %d sending", got.phase, s.sending)
	}
}

func TestStateReplays(t *testing.T) {
	s := newState()
	r1, r2 := stateTask(0, 2), stateTask(0, 3)
	if !s.replay(r1) || !s.replay(r2) || s.replay(r1) {
		t.Fatal("replay: want r1 and r2 queued once each")
	}
	if s.canTake(5) {
		t.Error("a queued replay goes before the queue")
	}
	if got, want := countsOf(s), (counts{replays: 2}); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
	if e := s.nextReplay(0); e != nil {
		t.Errorf("share 0 started a replay")
	}
	e1 := s.nextReplay(1)
	if e1 == nil || e1.task != r1 || e1.phase != phaseSending || e1.msg != nil {
		t.Fatalf("nextReplay: %+v", e1)
	}
	if e := s.nextReplay(1); e != nil {
		t.Errorf("a second replay started within share 1")
	}
	// Held and sending: a replay of it waits for the send to end.
	if s.replay(r1) || !e1.again {
		t.Error("a replay of a task being sent: want it marked to be sent once more")
	}
	// The queue delivers r2 while its replay waits: it starts now, as the task.
	d := &delivery{}
	e2, start := s.receive(r2, d)
	if !start || e2.msg != d || len(s.replays) != 0 || s.sending != 2 {
		t.Errorf("delivery of a queued replay: start %v, %d replays, %d sending", start, len(s.replays), s.sending)
	}
	// Its send ends: it is queued again, as the replay asked.
	if !s.ended(e1, wire.ShardEnd{Chunks: 1}) || e1.phase != phaseQueued || e1.again || len(s.replays) != 1 {
		t.Errorf("end of a task replayed while sent: %+v", e1)
	}
	// Sent again and ended: a replay sends it again.
	if e := s.nextReplay(5); e != e1 {
		t.Fatalf("nextReplay: %+v", e)
	}
	s.ended(e1, wire.ShardEnd{Chunks: 1})
	if !s.replay(r1) || e1.phase != phaseQueued || len(s.replays) != 1 {
		t.Errorf("replay of an ended task: %+v", e1)
	}
	// Settling a queued replay drops it.
	if got, ok := s.settle(keyOf(r1)); !ok || got.phase != phaseQueued || len(s.replays) != 0 {
		t.Errorf("settle of a queued replay: %v, %d replays", ok, len(s.replays))
	}
	if out := s.clear(); len(out) != 1 || s.held() != 0 || s.sending != 0 {
		t.Errorf("clear: %d entries, then %+v", len(out), countsOf(s))
	}
}

func TestStateMalformed(t *testing.T) {
	s := newState()
	s.malformedTask()
	if s.malformed != 1 || s.held() != 0 {
		t.Errorf("malformed %d, held %d", s.malformed, s.held())
	}
}
