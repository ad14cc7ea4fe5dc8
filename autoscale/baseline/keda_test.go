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
