package baseline

import (
	"testing"
	"time"
)

func TestDecideKEDA(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cfg := DefaultKEDAConfig()
	cfg.Phase, cfg.MaxReplicaCount = t0, 16
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var st KEDAState
	step := func(lag, s float64, want int) {
		t.Helper()
		var d KEDADecision
		d, st = DecideKEDA(cfg, st, lag, at(s))
		if d.Replicas != want {
			t.Errorf("t=%vs lag %v: %d replicas (%s); want %d", s, lag, d.Replicas, d.Reason, want)
		}
	}
	step(100, 5, 0)  // the job arrives mid-interval: nothing until the poll
	step(100, 29, 0) // still before it
	step(100, 30, 5) // the poll activates (1), the HPA syncs in that second: 10 wanted, max(2x, +4) = 5
	step(100, 44, 5) // hold until the next sync
	step(100, 45, 10)
	step(300, 75, 16) // capped
	step(20, 90, 16)  // down only to the highest recommendation of the last 300s
	step(20, 374, 16)
	step(20, 390, 2) // t=75's 30 left the window
	step(0, 420, 2)  // no lag: 1 wanted, the window still holds 2s
	step(0, 660, 2)  // active: the cooldown counts from the last poll with lag (390)
	step(0, 690, 0)  // 300s without lag: deactivate
	step(50, 705, 0) // between polls
	step(50, 720, 5) // activate and sync at once
}

func TestHPADesiredHoldsWithinTheTolerance(t *testing.T) {
	for _, c := range []struct {
		current        int
		metric, target float64
		want           int
	}{
		{10, 105, 10, 10}, // usage 1.05: within 0.1, hold
		{10, 109, 10, 10}, // 1.09: still within
		{10, 111, 10, 12}, // ceil(11.1)
		{10, 91, 10, 10},  // 0.91
		{10, 89, 10, 9},   // ceil(8.9)
		{0, 5, 10, 1},     // from zero: no ratio to hold at
		{4, 0, 10, 0},
	} {
		if got := HPADesired(c.current, c.metric, c.target, 0.1); got != c.want {
			t.Errorf("HPADesired(%d, %v, %v, 0.1) = %d, want %d", c.current, c.metric, c.target, got, c.want)
		}
	}
}

// TestDecideKEDAToleranceOnScriptedTime: a lag that drifts within 10% of
// what the replicas are sized for moves nothing; one past it does, at the
// next HPA sync.
func TestDecideKEDAToleranceOnScriptedTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cfg := DefaultKEDAConfig()
	cfg.Phase, cfg.MaxReplicaCount = t0, 100
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var st KEDAState
	var d KEDADecision
	for _, s := range []int{1, 30, 45, 60} { // activate at 30, grow at the syncs to 10
		d, st = DecideKEDA(cfg, st, 100, at(s))
	}
	if d.Replicas != 10 {
		t.Fatalf("lag 100, threshold 10: %d replicas (%s), want 10", d.Replicas, d.Reason)
	}
	if d, st = DecideKEDA(cfg, st, 108, at(75)); d.Replicas != 10 {
		t.Errorf("lag 108 on 10 replicas (usage 1.08): %d, want 10 held", d.Replicas)
	}
	if d, st = DecideKEDA(cfg, st, 108, at(80)); d.Replicas != 10 {
		t.Errorf("between syncs: %d, want 10", d.Replicas)
	}
	if d, _ = DecideKEDA(cfg, st, 125, at(90)); d.Replicas != 13 {
		t.Errorf("lag 125 (usage 1.25): %d, want 13", d.Replicas)
	}
}
