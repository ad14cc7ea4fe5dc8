package local

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-project/sluice/autoscale"
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

func TestKEDAModeFollowsLag(t *testing.T) {
	backlog := map[string][2]int{"j": {35, 5}}
	lag := BacklogLag{Backlog: func(job string) (int, int, bool) { b, ok := backlog[job]; return b[0], b[1], ok }}
	if got := lag.Lag("j"); got != 40 {
		t.Fatalf("lag of 35 pending and 5 in flight = %v", got)
	}
	cfg := DefaultKEDAConfig()
	now := time.Unix(1000, 0)
	cfg.Phase, cfg.PollingInterval, cfg.HPASyncPeriod = now, 2*time.Second, time.Second
	f := &fakeRunner{n: map[string]int{}}
	k, err := NewKEDAMode(f, cfg, lag, nil)
	if err != nil {
		t.Fatal(err)
	}
	k.Now = func() time.Time { return now }
	ctx := context.Background()
	if err := k.StartJob(ctx, "j", autoscale.JobBounds{MaxReplicas: 3}); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		now = now.Add(time.Second)
		if err := k.Scale(ctx, "j", 1); err != nil {
			t.Fatal(err)
		}
	}
	if f.n["j"] != 3 {
		t.Errorf("lag 40, threshold 10, max 3: %d replicas (Sluice asked 1), want 3", f.n["j"])
	}
	if err := k.EndJob(ctx, "j"); err != nil || f.n["j"] != 0 {
		t.Errorf("after EndJob: %d, %v", f.n["j"], err)
	}
}
