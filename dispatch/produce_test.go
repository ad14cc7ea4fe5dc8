package dispatch

import (
	"context"
	"fmt"
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
