package controller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/planner"
	"github.com/sluice-project/sluice/wire"
)

func TestRateMeter(t *testing.T) {
	var m rateMeter
	at := func(s float64) time.Time { return time.Unix(0, 0).Add(time.Duration(s * float64(time.Second))) }
	period := 30 * time.Second
	if _, ok := m.observe("j", at(0), 2, 300, period); ok {
		t.Fatal("a record on the first tick")
	}
	for s := 1; s < 30; s++ {
		if _, ok := m.observe("j", at(float64(s)), 2, 300, period); ok {
			t.Fatalf("a record at %ds, before the period", s)
		}
	}
	o, ok := m.observe("j", at(30), 4, 310, period)
	want := planner.Observation{Job: "j", PerReplica: 310, ReplicaSeconds: 29*2 + 4, At: at(30)}
	if !ok || o != want {
		t.Fatalf("at 30s: %+v, %v; want %+v", o, ok, want)
	}
	// No rate learned yet, or nothing served: nothing to record.
	for s := 31; s <= 60; s++ {
		if _, ok := m.observe("j", at(float64(s)), 2, 0, period); ok {
			t.Fatalf("a record without a rate at %ds", s)
		}
	}
	for s := 61; s <= 90; s++ {
		if _, ok := m.observe("j", at(float64(s)), 0, 300, period); ok {
			t.Fatalf("a record without serving replicas at %ds", s)
		}
	}
}

// TestRunningJobRecordsItsPerReplicaRate: the rate a job's policy learns
// from its demand signals lands in the plan store, under the job's
// pipeline and dataset, while the job runs.
func TestRunningJobRecordsItsPerReplicaRate(t *testing.T) {
	e := newEnv(t, 6) // no agent: the job keeps running
	defer e.gate.release()
	run := e.startController(t, "c1", Options{LearnEvery: 200 * time.Millisecond})
	s := spec("learn", "img", 1)
	e.submit(t, s)
	ctx := context.Background()
	testenv.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		// A trainer agent's signal: 100 samples/s per ready replica, the
		// trainer half stalled, its buffer empty.
		ready := e.pool.Ready("learn")
		run.c.observeDemand(wire.Demand{Job: "learn", ArrivedPerS: 100 * float64(ready), ConsumedPerS: 100 * float64(ready),
			StallFraction: 0.5, BufferCapacity: 100}, time.Now())
		plans := run.c.Plans()
		if plans == nil {
			return errors.New("no plan store yet")
		}
		est, err := plans.Get(ctx, s.Pipeline, s.Dataset)
		if err != nil {
			return err
		}
		if est.Source != planner.SourceDataset || math.Abs(est.PerReplica-100) > 1e-6 || est.Job != "learn" {
			return fmt.Errorf("estimate %+v, want 100/s from job learn on its dataset", est)
		}
		return nil
	})
}
