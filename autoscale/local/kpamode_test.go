package local

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-project/sluice/autoscale"
)

type fakeRunner struct{ n map[string]int }

func (f *fakeRunner) Scale(_ context.Context, job string, n int) error { f.n[job] = n; return nil }
func (f *fakeRunner) Ready(job string) int                             { return f.n[job] }
func (f *fakeRunner) Endpoints(string) []string                        { return nil }

func TestKPAModeIgnoresSluiceAndFollowsConcurrency(t *testing.T) {
	backlog := map[string][2]int{"j": {40, 0}}
	conc := BacklogConcurrency{Parallelism: 16, Backlog: func(job string) (int, int, bool) {
		b, ok := backlog[job]
		return b[0], b[1], ok
	}}
	if got := conc.Concurrency("j"); got != 16 {
		t.Fatalf("concurrency of 40 pending at parallelism 16 = %v", got)
	}
	cfg := DefaultKPAConfig(4)
	cfg.Target, cfg.StableWindow, cfg.ScaleToZeroGrace = 4, 6*time.Second, 2*time.Second
	f := &fakeRunner{n: map[string]int{}}
	k, err := NewKPAMode(f, cfg, conc, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	k.Now = func() time.Time { return now }
	ctx := context.Background()
	if err := k.StartJob(ctx, "j", autoscale.JobBounds{MinReplicas: 0, MaxReplicas: 3}); err != nil {
		t.Fatal(err)
	}
	tick := func(sluiceWants, seconds int) {
		for range seconds {
			now = now.Add(time.Second)
			if err := k.Scale(ctx, "j", sluiceWants); err != nil {
				t.Fatal(err)
			}
		}
	}
	tick(1, 10)
	if f.n["j"] != 3 {
		t.Errorf("16 in flight, target 4, max 3: %d replicas (Sluice asked 1), want 3", f.n["j"])
	}
	backlog["j"] = [2]int{0, 0}
	tick(8, 7)
	if f.n["j"] != 1 {
		t.Errorf("idle for 7s: %d replicas, want 1 (grace)", f.n["j"])
	}
	tick(8, 2)
	if f.n["j"] != 0 {
		t.Errorf("idle for window + grace: %d replicas (Sluice asked 8), want 0", f.n["j"])
	}
	backlog["j"] = [2]int{2, 0}
	tick(0, 1)
	if f.n["j"] != 1 {
		t.Errorf("2 requests from zero: %d, want 1", f.n["j"])
	}
	if err := k.EndJob(ctx, "j"); err != nil || f.n["j"] != 0 {
		t.Errorf("after EndJob: %d, %v", f.n["j"], err)
	}
}
