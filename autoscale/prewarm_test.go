package autoscale

import (
	"context"
	"testing"
)

// A pre-warmed job starts with its InitialReplicas on the first tick,
// before any demand signal, and holds them while no signal comes; one
// without starts with the config's; the job's max caps it.
func TestRunnerPrewarmsAJobWithItsInitialReplicas(t *testing.T) {
	act := newFakeActuator()
	cfg := DefaultConfig()
	cfg.MaxReplicas = 16
	r, err := NewRunner(act, cfg, nil, nil)
	f := newFeed()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.add(r, "warm", Job{InitialReplicas: 5}, &fakeBacklog{pending: 100})
	f.add(r, "cold", Job{}, &fakeBacklog{pending: 100})
	f.add(r, "capped", Job{InitialReplicas: 5, MaxReplicas: 3}, &fakeBacklog{pending: 100})
	for i := range 3 {
		f.tick(ctx, r, sec(float64(i)))
		for job, want := range map[string]int{"warm": 5, "cold": cfg.InitialReplicas, "capped": 3} {
			if got := act.count(job); got != want {
				t.Errorf("tick %d: %s has %d replicas; want %d", i, job, got, want)
			}
		}
	}
}
