package dispatch

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// holdingSink has no room for the first frame of each task's first send
// until its reply was cut: an agent whose output buffer is full while the
// replica gives up.
type holdingSink struct {
	*recSink
	cut func(wire.ShardTask) <-chan struct{}
	mu  sync.Mutex
	hit map[string]bool
}

func (s *holdingSink) WaitRoom(ctx context.Context, task wire.ShardTask) error {
	s.mu.Lock()
	first := !s.hit[task.ID()]
	s.hit[task.ID()] = true
	s.mu.Unlock()
	if first {
		select {
		case <-s.cut(task):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// TestCutWhileTheSinkHeldTheReplyDoesNotCount: a reply the replica cut
// while the sink held it back (back-pressure) is sent again without
// counting against MaxDeliver: a slow trainer must not fail tasks.
func TestCutWhileTheSinkHeldTheReplyDoesNotCount(t *testing.T) {
	defer func(d time.Duration) { heldForgiven = d }(heldForgiven)
	heldForgiven = time.Nanosecond
	e := newEnv(t)
	job := testJob("held", 2, 1)
	e.queue(t, job)
	var mu sync.Mutex
	cut := map[string]chan struct{}{}
	cutOf := func(task wire.ShardTask) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if cut[task.ID()] == nil {
			cut[task.ID()] = make(chan struct{})
		}
		return cut[task.ID()]
	}
	fn := newFakeFn(t, func(w http.ResponseWriter, task wire.ShardTask, n int) bool {
		if n == 0 {
			defer close(cutOf(task))
			writeShard(w, task, chunksOf(task)) // every chunk, then cut before the end
			return true
		}
		return false
	})
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 4, InFlight: 4})
	sink := &holdingSink{recSink: newRecSink(t), hit: map[string]bool{},
		cut: func(task wire.ShardTask) <-chan struct{} { return cutOf(task) }}
	d, _ := e.start(t, job, sink, Options{MaxDeliver: 1})
	tasks := allTasks(job)
	sink.waitEnds(t, len(tasks))
	sink.checkShards(t, tasks)
	for _, task := range tasks {
		if n := fn.callsOf(task); n != 2 {
			t.Errorf("task %s sent %d times, want 2", task.ID(), n)
		}
	}
	if st := d.Stats(); st.Failed != 0 {
		t.Errorf("stats %+v: want no task failed", st)
	}
}
