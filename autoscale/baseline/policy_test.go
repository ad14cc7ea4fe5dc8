package baseline

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-project/sluice/autoscale"
)

// fakeActuator runs what it is asked at once.
type fakeActuator struct{ n map[string]int }

func (f *fakeActuator) Scale(_ context.Context, job string, n int) error { f.n[job] = n; return nil }
func (f *fakeActuator) Ready(job string) int                             { return f.n[job] }

type backlog struct{ pending, inflight int }

// inputs are job j's inputs of a tick: its backlog, no demand.
func (b *backlog) inputs() map[string]autoscale.Inputs {
	return map[string]autoscale.Inputs{"j": {Pending: b.pending, InFlight: b.inflight}}
}

// baselineRunner is a runner of one job j with at most maxReplicas
// replicas, sized by p.
func baselineRunner(t *testing.T, p autoscale.Policy, b *backlog, maxReplicas int) (*autoscale.Runner, *fakeActuator) {
	t.Helper()
	f := &fakeActuator{n: map[string]int{}}
	cfg := autoscale.DefaultConfig()
	cfg.MaxReplicas, cfg.ClusterCapacity = 16, 16
	r, err := autoscale.NewRunner(f, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.UsePolicy(p)
	r.AddJob("j", autoscale.Job{MaxReplicas: maxReplicas})
	return r, f
}

// TestKPAPolicyFollowsConcurrency runs Knative's own decider through
// the runner on scripted time.
func TestKPAPolicyFollowsConcurrency(t *testing.T) {
	b := &backlog{pending: 40}
	conc := BacklogConcurrency(16)
	if got := conc(autoscale.RoundJob{Inputs: autoscale.Inputs{Pending: 40}}); got != 16 {
		t.Fatalf("concurrency of 40 pending at parallelism 16 = %v", got)
	}
	cfg := DefaultKPAConfig(4)
	cfg.StableWindow = 6 * time.Second
	p, err := NewKPA(cfg, conc)
	if err != nil {
		t.Fatal(err)
	}
	r, f := baselineRunner(t, p, b, 3)
	now := time.Unix(1000, 0)
	ctx := context.Background()
	tick := func(seconds int) {
		for range seconds {
			now = now.Add(time.Second)
			r.Tick(ctx, now, b.inputs())
		}
	}
	tick(10)
	if f.n["j"] != 3 {
		t.Errorf("16 in flight, target 4 x 70%%, max 3: %d replicas, want 3", f.n["j"])
	}
	b.pending = 0
	tick(5)
	if f.n["j"] != 3 {
		t.Errorf("idle for 5s after a panic: %d replicas, want 3 (no scale-down in panic mode for a stable window)", f.n["j"])
	}
	tick(2)
	if f.n["j"] != 1 {
		t.Errorf("idle for 7s: %d replicas, want 1 (down at most 2x a decision)", f.n["j"])
	}
	tick(28)
	if f.n["j"] != 1 {
		t.Errorf("idle for 35s: %d replicas, want 1 (the scale-to-zero grace, 30s)", f.n["j"])
	}
	tick(3)
	if f.n["j"] != 0 {
		t.Errorf("idle for window + grace: %d replicas, want 0", f.n["j"])
	}
	b.pending = 2
	tick(1)
	if f.n["j"] != 1 {
		t.Errorf("2 requests from zero: %d, want 1", f.n["j"])
	}
	if n, _ := r.Decision("j"); n != 1 {
		t.Errorf("the runner's decision is %d, want the KPA's 1", n)
	}
	r.RemoveJob("j")
	tick(1)
	if f.n["j"] != 0 {
		t.Errorf("after the job's removal: %d", f.n["j"])
	}
}

func TestKEDAPolicyFollowsLag(t *testing.T) {
	b := &backlog{pending: 35, inflight: 5}
	if got := BacklogLag(autoscale.RoundJob{Inputs: autoscale.Inputs{Pending: 35, InFlight: 5}}); got != 40 {
		t.Fatalf("lag of 35 pending and 5 in flight = %v", got)
	}
	cfg := DefaultKEDAConfig()
	now := time.Unix(1000, 0)
	cfg.Phase, cfg.PollingInterval, cfg.HPASyncPeriod = now, 2*time.Second, time.Second
	p, err := NewKEDA(cfg, BacklogLag)
	if err != nil {
		t.Fatal(err)
	}
	r, f := baselineRunner(t, p, b, 3)
	ctx := context.Background()
	for range 6 {
		now = now.Add(time.Second)
		r.Tick(ctx, now, b.inputs())
	}
	if f.n["j"] != 3 {
		t.Errorf("lag 40, threshold 10, max 3: %d replicas, want 3", f.n["j"])
	}
	r.RemoveJob("j")
	r.Tick(ctx, now.Add(time.Second), b.inputs())
	if f.n["j"] != 0 {
		t.Errorf("after the job's removal: %d", f.n["j"])
	}
}
