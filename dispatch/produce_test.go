package dispatch

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// TestProduceCountsAsWorkUntilItEnds: a shard produced again while the
// job's plan has no replica (its queue drained, the job scaled to zero)
// waits for one and is counted meanwhile (Stats.Producing: the agent's
// demand brings a replica back); once a replica is planned it gets the
// shard's chunks, the queue untouched.
func TestProduceCountsAsWorkUntilItEnds(t *testing.T) {
	e := newEnv(t)
	job := testJob("produce", 2, 1)
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID})
	d := e.newDispatcher(t, job, newRecSink(t), Options{})
	run(t, d)
	task := job.Task(0, 1)
	type result struct {
		chunks int
		end    wire.ShardEnd
		err    error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.end, r.err = d.Produce(context.Background(), task, func(int, []byte) { r.chunks++ })
		done <- r
	}()
	checkFor(t, func() error {
		if n := d.Stats().Producing; n != 1 {
			return fmt.Errorf("producing %d, want 1", n)
		}
		return nil
	})
	select {
	case r := <-done:
		t.Fatalf("Produce returned without a replica: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	fn := newFakeFn(t, nil)
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 1, InFlight: 1})
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Produce did not end once a replica was planned")
	}
	if r.err != nil || r.chunks != chunksOf(task) || r.end.Chunks != chunksOf(task) {
		t.Errorf("Produce: %d chunks, end %+v, %v; want %d chunks", r.chunks, r.end, r.err, chunksOf(task))
	}
	if n := d.Stats().Producing; n != 0 {
		t.Errorf("producing %d after it ended, want 0", n)
	}
	if n := fn.callsOf(task); n != 1 {
		t.Errorf("the shard was sent %d times, want 1", n)
	}
}

// TestProduceWaitsOutABusyPool: a shard produced again while its replica
// pool answers 429 and 503, more times than MaxDeliver, is produced once
// the pool serves, as a task from the queue is: a busy pool is not the
// task's fault, and failing the re-production would lose the rows a
// reader's team moved to this agent. A real failure still counts.
func TestProduceWaitsOutABusyPool(t *testing.T) {
	e := newEnv(t)
	job := testJob("busyprod", 2, 1)
	const refusals = 4
	fn := newFakeFn(t, func(w http.ResponseWriter, task wire.ShardTask, n int) bool {
		switch {
		case task.Shard == 1:
			http.Error(w, "s3 timeout", http.StatusInternalServerError)
		case n < refusals && n%2 == 0:
			http.Error(w, "busy", http.StatusTooManyRequests)
		case n < refusals:
			http.Error(w, "draining", http.StatusServiceUnavailable)
		default:
			return false
		}
		return true
	})
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 1, InFlight: 1})
	d := e.newDispatcher(t, job, newRecSink(t), Options{MaxDeliver: 2})
	run(t, d)
	task := job.Task(0, 0)
	chunks := 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	end, err := d.Produce(ctx, task, func(int, []byte) { chunks++ })
	if err != nil || chunks != chunksOf(task) || end.Chunks != chunksOf(task) {
		t.Fatalf("Produce after %d refusals: %d chunks, end %+v, %v; want %d chunks", refusals, chunks, end, err, chunksOf(task))
	}
	if n := fn.callsOf(task); n != refusals+1 {
		t.Errorf("the shard was sent %d times, want %d", n, refusals+1)
	}
	_, err = d.Produce(ctx, job.Task(0, 1), func(int, []byte) {})
	if err == nil || !strings.Contains(err.Error(), "gave up after 2 failed sends") || !strings.Contains(err.Error(), "500") {
		t.Errorf("Produce of a shard whose sends fail: %v, want it given up after MaxDeliver (2) sends", err)
	}
}
