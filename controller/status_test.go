package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/wire"
)

// TestStatusStepTimes: each reader's status has its latest step times and
// GPU reading; the job's step times merge those of the readers that
// signalled lately and are not done.
func TestStatusStepTimes(t *testing.T) {
	approx := cmpopts.EquateApprox(0, 1e-9)
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	sig := func(gpu float64, steps wire.StepTimes, done bool, age time.Duration) autoscale.Signal {
		return autoscale.Signal{Demand: wire.Demand{GPUUtilization: gpu, Step: steps, Done: done}, At: now.Add(-age)}
	}
	job := wire.Job{Spec: wire.JobSpec{ID: "j", Epochs: 1, Readers: []string{"a", "b", "stale", "done"}}}
	s := buildStatus(statusInputs{
		job: job, stale: 5 * time.Second,
		signals: map[string]autoscale.Signal{
			"a":     sig(0.8, wire.StepTimes{Steps: 3, Ranks: 3, WaitS: 0.2, ComputeS: 0.6, OtherS: 0.2}, false, time.Second),
			"b":     sig(-1, wire.StepTimes{Steps: 1, Ranks: 1, WaitS: 0.6, ComputeS: 0.2}, false, 2*time.Second),
			"stale": sig(-1, wire.StepTimes{Steps: 50, Ranks: 1, WaitS: 9}, false, time.Minute),
			"done":  sig(-1, wire.StepTimes{Steps: 50, Ranks: 1, WaitS: 9}, true, time.Second),
		},
	}, now)
	want := wire.StepTimes{Steps: 4, Ranks: 4, WaitS: 0.3, ComputeS: 0.5, OtherS: 0.15}
	if diff := cmp.Diff(want, s.Step, approx); diff != "" {
		t.Errorf("job step times (-want +got):\n%s", diff)
	}
	a, b := s.Readers["a"], s.Readers["b"]
	if a.GPUUtilization == nil || *a.GPUUtilization != 0.8 || a.Step.Steps != 3 {
		t.Errorf("reader a %+v, want its gpu reading and 3 steps", a)
	}
	if b.GPUUtilization != nil || b.Step.Steps != 1 {
		t.Errorf("reader b %+v, want no gpu reading and 1 step", b)
	}
	if s.Readers["stale"].Step.Steps != 50 {
		t.Errorf("a stale reader's own status lost its step times")
	}
}

// TestStatusListsDeclaredReadersOnly: a status has the declared readers'
// progress only, whatever signals reached it or an earlier status held.
func TestStatusListsDeclaredReadersOnly(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	job := wire.Job{Spec: wire.JobSpec{ID: "j", Epochs: 1, Readers: []string{"train"}}}
	prev := wire.JobStatus{Job: "j", Readers: map[string]wire.ReaderStatus{}}
	signals := map[string]autoscale.Signal{"train": {Demand: wire.Demand{SamplesDone: 5}, At: now}}
	for i := range 1000 {
		prev.Readers[fmt.Sprintf("old-%d", i)] = wire.ReaderStatus{}
		signals[fmt.Sprintf("new-%d", i)] = autoscale.Signal{At: now}
	}
	s := buildStatus(statusInputs{job: job, prev: prev, signals: signals}, now)
	if len(s.Readers) != 1 || s.Readers["train"].SamplesDelivered != 5 {
		t.Errorf("status lists %d readers, want train's (5 delivered) only: %+v", len(s.Readers), s.Readers["train"])
	}
}

// TestStatusPerSource: a mixed job's status counts each source's tasks
// done and their samples, on top of an earlier owner's counts, and within
// its tasks.
func TestStatusPerSource(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	job := wire.Job{Spec: wire.JobSpec{ID: "j", Epochs: 2, Sources: []wire.SourceSpec{{Dataset: "s3://d/a/", Weight: 3}, {Dataset: "s3://d/b/", Weight: 1}}},
		Shards: make([]string, 4), Sources: []wire.JobSource{{First: 0, Slots: 3}, {First: 3, Slots: 1}}}
	jr := newJobResults(job)
	for _, r := range []wire.ShardResult{
		{End: wire.ShardEnd{Job: "j", Epoch: 0, Shard: 0, Samples: 10}},
		{End: wire.ShardEnd{Job: "j", Epoch: 0, Shard: 3, Samples: 7}},
		{End: wire.ShardEnd{Job: "j", Epoch: 1, Shard: 3, Samples: 7}},
		{End: wire.ShardEnd{Job: "j", Epoch: 1, Shard: 3, Samples: 7}}, // again: counted once
	} {
		jr.add(r)
	}
	prev := wire.JobStatus{Sources: []wire.SourceProgress{{TasksDone: 2, SamplesProcessed: 20}, {TasksDone: 1, SamplesProcessed: 5}}}
	s := buildStatus(statusInputs{job: job, results: jr.snapshot(), prev: prev}, now)
	want := []wire.SourceProgress{
		{Dataset: "s3://d/a/", Tasks: 6, TasksDone: 3, SamplesProcessed: 30},
		{Dataset: "s3://d/b/", Tasks: 2, TasksDone: 2, SamplesProcessed: 19}, // 3 done, held to its 2 tasks
	}
	if diff := cmp.Diff(want, s.Sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	if s := buildStatus(statusInputs{job: wire.Job{Spec: wire.JobSpec{ID: "j", Epochs: 1}}}, now); s.Sources != nil {
		t.Errorf("a job of one dataset: sources %+v, want none", s.Sources)
	}
}
