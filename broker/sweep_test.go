package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/planner"
	"github.com/sluice-project/sluice/wire"
)

// A sweep submits one job per set of trials fed the same samples, each
// pre-warmed with what the planner says one trial's rate needs, and its
// status names the jobs and their trials.
func TestSubmitSweep(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	two := uint64(2)
	spec := wire.SweepSpec{ID: "sw", Dataset: "s3://data/ds/", Pipeline: "imagenet-train", BatchSize: 4, Epochs: 1, Seed: 1,
		MinReplicas: 1, TrainerRate: 250,
		Trials: []wire.Trial{{Name: "a"}, {Name: "b", Seed: &two}, {Name: "c"}}}
	planner := planner.ByRate{PerReplica: func(context.Context, wire.JobSpec) (float64, error) { return 100, nil }}
	sw, err := e.b.SubmitSweep(ctx, spec, planner)
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.SweepJob{{ID: "sw-0", Trials: []string{"a", "c"}, Prewarm: 3}, {ID: "sw-1", Trials: []string{"b"}, Prewarm: 3}}
	if diff := cmp.Diff(want, sw.Jobs); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	job, err := e.b.Job(ctx, "sw-1")
	if err != nil {
		t.Fatal(err)
	}
	if job.Spec.Seed != 2 || job.Spec.InitialReplicas != 3 || !cmp.Equal(job.Spec.Readers, []string{"b"}) {
		t.Errorf("job sw-1: seed %d initial %d readers %v; want 2, 3, [b]", job.Spec.Seed, job.Spec.InitialReplicas, job.Spec.Readers)
	}
	if _, err := e.b.SubmitSweep(ctx, spec, nil); !errors.Is(err, ErrSweepExists) {
		t.Errorf("second submit: %v; want ErrSweepExists", err)
	}
	st, err := e.b.Sweep(ctx, "sw")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Jobs) != 2 || st.Jobs[0].Job.Spec.ID != "sw-0" || st.Jobs[0].Done["a"] {
		t.Errorf("status %+v: want both jobs, no trial done", st.Jobs)
	}
	if _, err := e.b.Sweep(ctx, "nope"); !errors.Is(err, ErrSweepNotFound) {
		t.Errorf("status of a missing sweep: %v; want ErrSweepNotFound", err)
	}
}

// A sweep whose second job is refused leaves none of its jobs behind.
func TestSubmitSweepRollsBack(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	spec := wire.SweepSpec{ID: "rb", Dataset: "s3://data/ds/", Pipeline: "imagenet-train", BatchSize: 4, Epochs: 1,
		Trials: []wire.Trial{{Name: "a"}, {Name: "b", Dataset: "s3://data/none/"}}}
	if _, err := e.b.SubmitSweep(ctx, spec, nil); err == nil {
		t.Fatal("submitted a sweep with an empty dataset")
	}
	if _, err := e.b.Job(ctx, "rb-0"); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("job rb-0 after a failed sweep: %v; want it removed", err)
	}
}

// A deleted sweep's id may be submitted again; deleting it twice says it
// is gone.
func TestDeleteSweep(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	spec := wire.SweepSpec{ID: "del", Dataset: "s3://data/ds/", Pipeline: "imagenet-train", BatchSize: 4, Epochs: 1, Count: 2}
	sw, err := e.b.SubmitSweep(ctx, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range sw.Jobs {
		if err := e.b.Delete(ctx, j.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.b.DeleteSweep(ctx, "del"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Sweep(ctx, "del"); !errors.Is(err, ErrSweepNotFound) {
		t.Errorf("status of a deleted sweep: %v; want ErrSweepNotFound", err)
	}
	if err := e.b.DeleteSweep(ctx, "del"); !errors.Is(err, ErrSweepNotFound) {
		t.Errorf("deleting it again: %v; want ErrSweepNotFound", err)
	}
	if _, err := e.b.SubmitSweep(ctx, spec, nil); err != nil {
		t.Errorf("submitting the id again: %v", err)
	}
}
