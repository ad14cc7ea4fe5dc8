package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/wire"
)

func TestBacklogOf(t *testing.T) {
	type backlog struct {
		Pending, InFlight int
		Done              bool
	}
	for _, c := range []struct {
		name             string
		queued           int
		known            bool
		inFlight, wanted int
		want             backlog
	}{
		{"not read yet", 0, false, 0, 0, backlog{}},
		{"not read yet, agents sending", 0, false, 3, 1, backlog{Pending: 1, InFlight: 3}},
		{"queued, none sent", 10, true, 0, 0, backlog{Pending: 10}},
		{"some in flight", 10, true, 4, 2, backlog{Pending: 6, InFlight: 4}},
		{"the last ones in flight", 3, true, 3, 0, backlog{InFlight: 3}},
		{"all acked", 0, true, 0, 0, backlog{Done: true}},
		{"all acked, a resumed reader wants shards again", 0, true, 0, 2, backlog{Pending: 2}},
		{"all acked, shards produced again in flight", 0, true, 2, 0, backlog{InFlight: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got backlog
			got.Pending, got.InFlight, got.Done = backlogOf(c.queued, c.known, c.inFlight, c.wanted)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("backlog (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAgentLoadCountsAgentsHeardLately(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	sig := func(inFlight, wanted int, age time.Duration) autoscale.Signal {
		return autoscale.Signal{Demand: wire.Demand{InFlight: inFlight, PendingTasks: wanted}, At: now.Add(-age)}
	}
	names, inFlight, wanted := agentLoad(map[string]autoscale.Signal{
		"n2":   sig(3, 1, time.Second),
		"n1":   sig(2, 0, 4*time.Second),
		"gone": sig(9, 9, time.Minute),
	}, now, 5*time.Second)
	if !cmp.Equal(names, []string{"n1", "n2"}) || inFlight != 5 || wanted != 1 {
		t.Errorf("agents %v, %d in flight, %d wanted; want [n1 n2], 5, 1", names, inFlight, wanted)
	}
}

// TestBacklogSaysWhenTasksArrive: set reports a job's tasks arriving
// (none, or not read yet, before), the moment to decide at once.
func TestBacklogSaysWhenTasksArrive(t *testing.T) {
	var b taskBacklog
	for i, c := range []struct {
		queued int
		want   bool
	}{{0, false}, {0, false}, {5, true}, {3, false}, {0, false}, {2, true}} {
		if got := b.set(c.queued); got != c.want {
			t.Errorf("step %d: set(%d) = %v, want %v", i, c.queued, got, c.want)
		}
	}
	var first taskBacklog
	if !first.set(4) {
		t.Error("a first read with tasks queued: want arrived")
	}
}

// TestTaskConsumerReadFastUntilTheFirstTasks: a run reads its task
// consumer every 50 ms until a read finds a task (a submit queues them
// after the record the controller took the job by), for at most 10 s, and
// every second after.
func TestTaskConsumerReadFastUntilTheFirstTasks(t *testing.T) {
	var b taskBacklog
	for i, c := range []struct {
		queued int
		since  time.Duration
		want   time.Duration
	}{
		{0, 0, firstTasksPoll},
		{0, 9 * time.Second, firstTasksPoll},
		{0, 10 * time.Second, backlogPoll}, // a job with no task yet: as before
		{3, time.Second, backlogPoll},
		{0, 2 * time.Second, backlogPoll}, // drained, not yet queued
	} {
		b.set(c.queued)
		if got := pollEvery(b.seenTasks(), c.since); got != c.want {
			t.Errorf("step %d: queued %d at %v: every %v, want %v", i, c.queued, c.since, got, c.want)
		}
	}
}
