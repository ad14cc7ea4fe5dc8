package baseline

import (
	"testing"
	"time"
)

// kpaRun feeds DecideKPA one observation per second, the ready replicas
// following the decision after coldStart decisions, and returns the
// decisions.
type kpaRun struct {
	t     *testing.T
	cfg   KPAConfig
	st    KPAState
	now   time.Time
	ready int
}

func newKPARun(t *testing.T, cfg KPAConfig) *kpaRun {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &kpaRun{t: t, cfg: cfg, now: time.Unix(1_000_000, 0)}
}

// step observes concurrency for n seconds; every replica decided is ready
// at once unless holdReady.
func (r *kpaRun) step(concurrency float64, n int) KPADecision {
	var d KPADecision
	for range n {
		r.now = r.now.Add(time.Second)
		d, r.st = DecideKPA(r.cfg, r.st, concurrency, r.ready, r.now)
		r.ready = d.Replicas
	}
	return d
}

func TestKPASizesByStableConcurrency(t *testing.T) {
	cfg := DefaultKPAConfig(4)
	cfg.Target = 4 // utilization 100%
	r := newKPARun(t, cfg)
	if d := r.step(16, 120); d.Replicas != 4 || d.Panic {
		t.Errorf("16 in flight, target 4: %+v, want 4 stable", d)
	}
	if d := r.step(8, 120); d.Replicas != 2 {
		t.Errorf("8 in flight after a window: %+v, want 2", d)
	}
}

func TestKPADefaultUtilizationOverProvisions(t *testing.T) {
	r := newKPARun(t, DefaultKPAConfig(4)) // target 4 x 70%
	if d := r.step(16, 120); d.Replicas != 6 {
		t.Errorf("16 in flight at target 2.8: %+v, want 6 (ceil 5.7)", d)
	}
}

func TestKPAPanicsOnABurstAndHoldsForAStableWindow(t *testing.T) {
	cfg := DefaultKPAConfig(1)
	cfg.Target = 1
	r := newKPARun(t, cfg)
	r.step(1, 60)
	if r.ready != 1 {
		t.Fatalf("ready %d before the burst, want 1", r.ready)
	}
	// A burst to 10: the panic window (6s) sees it within a second, the
	// stable window (60s) would take most of a minute.
	d := r.step(10, 1)
	if !d.Panic || d.Replicas != 3 {
		t.Errorf("first second of a burst: %+v, want panic at 3 (6s average 2.5)", d)
	}
	d = r.step(10, 5)
	if !d.Panic || d.Replicas != 10 {
		t.Errorf("6s into the burst: %+v, want panic at 10", d)
	}
	// The burst ends; in panic the count does not drop ...
	d = r.step(1, 30)
	if !d.Panic || d.Replicas != 10 {
		t.Errorf("30s after the burst: %+v, want still 10 in panic", d)
	}
	// ... until a stable window passed below the threshold; then it
	// comes down at most by half per decision.
	d = r.step(1, 31)
	if d.Panic {
		t.Errorf("61s after the burst: %+v, want out of panic", d)
	}
	if d = r.step(1, 60); d.Replicas != 1 {
		t.Errorf("a minute later: %+v, want back to 1", d)
	}
}

func TestKPAScalesToZeroOnlyAfterWindowAndGrace(t *testing.T) {
	cfg := DefaultKPAConfig(1)
	cfg.Target, cfg.StableWindow, cfg.ScaleToZeroGrace = 1, 10*time.Second, 5*time.Second
	r := newKPARun(t, cfg)
	r.step(2, 10)
	if r.ready != 2 {
		t.Fatalf("ready %d, want 2", r.ready)
	}
	if d := r.step(0, 14); d.Replicas != 1 {
		t.Errorf("14s idle: %+v, want the last replica kept", d)
	}
	if d := r.step(0, 1); d.Replicas != 0 {
		t.Errorf("15s idle (window 10s + grace 5s): %+v, want 0", d)
	}
	// From zero, the first request activates it at once (panic: nothing ready).
	if d := r.step(3, 1); d.Replicas != 3 || !d.Panic {
		t.Errorf("first requests after zero: %+v, want 3 in panic", d)
	}
}

func TestKPABounds(t *testing.T) {
	cfg := DefaultKPAConfig(1)
	cfg.Target, cfg.MinScale, cfg.MaxScale = 1, 2, 5
	r := newKPARun(t, cfg)
	if d := r.step(0, 200); d.Replicas != 2 {
		t.Errorf("idle with min-scale 2: %+v", d)
	}
	if d := r.step(50, 100); d.Replicas != 5 {
		t.Errorf("50 in flight with max-scale 5: %+v", d)
	}
	bad := cfg
	bad.StableWindow = time.Second
	if bad.Validate() == nil {
		t.Error("stable window 1s: want an error (Knative allows 6s..1h)")
	}
}

func TestKPAScaleDownIsRateLimited(t *testing.T) {
	cfg := DefaultKPAConfig(1)
	cfg.Target, cfg.StableWindow = 1, 6*time.Second
	r := newKPARun(t, cfg)
	r.step(16, 12)
	if r.ready != 16 {
		t.Fatalf("ready %d, want 16", r.ready)
	}
	var seen []int
	for range 20 {
		seen = append(seen, r.step(0, 1).Replicas)
	}
	prev := 16
	for i, n := range seen {
		if n < prev/2 {
			t.Fatalf("decision %d: %d from %d, want at most halving (max scale down rate 2): %v", i, n, prev, seen)
		}
		prev = n
	}
}
