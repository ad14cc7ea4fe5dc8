package trace

import (
	"context"
	"testing"
	"time"
)

// TestSharedJobHoldsEveryReadersGPUs: a job read by three trainers of one
// GPU each holds three GPUs, so on a cluster of four a job wanting two
// waits for it; its first batch waits for a replica's cold start, and the
// timeline sees the replicas.
func TestSharedJobHoldsEveryReadersGPUs(t *testing.T) {
	tr := Trace{Cluster: Cluster{Cores: 64, GPUs: 4}, Tasks: []Task{
		{Name: "sweep", Arrival: 0, GPUs: 1, Readers: 3, Cores: 3, HostCores: 3, Samples: 20000, TrainerRate: 1000, CPUPerSample: 1.0 / 500},
		{Name: "late", Arrival: 1, GPUs: 2, Readers: 1, Cores: 2, HostCores: 2, Samples: 1000, TrainerRate: 1000, CPUPerSample: 1.0 / 500},
	}}
	m := DefaultModel()
	m.QueueGPUs, m.ColdStart, m.SampleEvery = 4, 3*time.Second, time.Second
	r, err := Simulate(context.Background(), tr, Prepare(tr, m), m, Sluice)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]JobResult{}
	for _, j := range r.Jobs {
		byName[j.Name] = j
	}
	sweep, late := byName["sweep"], byName["late"]
	if sweep.GPUs != 3 || sweep.Readers != 3 {
		t.Errorf("sweep holds %v GPUs for %d readers, want 3 for 3", sweep.GPUs, sweep.Readers)
	}
	if late.Wait < sweep.JCT-1-1e-6 {
		t.Errorf("late waited %.1fs for GPUs, want until the sweep ended (%.1fs after it arrived)", late.Wait, sweep.JCT-1)
	}
	if sweep.FirstBatch < 3 {
		t.Errorf("sweep's first batch after %.2fs, want at least the 3s cold start", sweep.FirstBatch)
	}
	peak := 0
	for _, p := range r.Timeline {
		peak = max(peak, p.Replicas)
	}
	if len(r.Timeline) < int(sweep.JCT) || peak == 0 {
		t.Errorf("%d samples with a peak of %d replicas over a %.0fs run", len(r.Timeline), peak, sweep.JCT+late.JCT)
	}
}
