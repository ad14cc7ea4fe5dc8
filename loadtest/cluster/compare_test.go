package cluster

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/loadtest/trace"
)

func result(p trace.Policy, sh Sharing, cores, coreH, stall float64) RunResult {
	return RunResult{Run: Run{Policy: p, Sharing: sh, StaticCores: cores}, ReservedCoreH: coreH, StallGPUh: stall}
}

// TestVerdictTakesTheBestBaselineAtSluicesCost: baselines that reserved
// more are out; static allocation is interpolated between its points.
func TestVerdictTakesTheBestBaselineAtSluicesCost(t *testing.T) {
	c := Comparison{Results: []RunResult{
		result(trace.Sluice, Independent, 0, 30, 1),
		result(trace.Sluice, Shared, 0, 5, 1),
		result(trace.Static, Independent, 2, 20, 10),
		result(trace.Static, Independent, 4, 40, 2),
		result(trace.Static, Independent, 8, 80, 0.5),
	}}
	v := c.Verdicts()
	if len(v) != 2 {
		t.Fatalf("%d verdicts, want one per Sluice run", len(v))
	}
	// At 30 core-h: static 2 (10) and the 2-4 line halfway (6).
	if !v[0].Found || math.Abs(v[0].StallGPUh-6) > 1e-9 || !strings.Contains(v[0].Baseline, "interpolated") {
		t.Errorf("at 30 core-h: %+v, want the interpolated static stall 6", v[0])
	}
	if math.Abs(v[0].StallRatio()-1.0/6) > 1e-9 {
		t.Errorf("stall ratio %v, want 1/6", v[0].StallRatio())
	}
	if v[1].Found {
		t.Errorf("at 5 core-h no baseline reserved as little, got %+v", v[1])
	}
}

// TestCompareRunsEveryPolicyOnTheSameArrivals: a small cluster's runs all
// train every trial; more data loader cores reserve more and stall less.
func TestCompareRunsEveryPolicyOnTheSameArrivals(t *testing.T) {
	s := DefaultScenario()
	s.Nodes, s.Sweeps, s.Window = 4, 6, 10*time.Minute
	s.TrialMin, s.TrialMax = time.Minute, 3*time.Minute
	c, err := Compare(context.Background(), s, s.Model(2*time.Second), DefaultRuns([]float64{1, 4}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Results) != 6 {
		t.Fatalf("%d results, want 6", len(c.Results))
	}
	trials := Trials(c.Sweeps)
	for _, r := range c.Results {
		if r.Trials != trials || !(r.ReservedCoreH > 0) || r.NeededCoreH <= 0 {
			t.Errorf("%s: %d trials, %.2f core-h reserved for %.2f needed; want %d trials and some", r.Name(), r.Trials, r.ReservedCoreH, r.NeededCoreH, trials)
		}
		if r.Policy != trace.Static && r.FirstBatchS < 2 {
			t.Errorf("%s: first batch after %.2f s, want at least the 2 s cold start", r.Name(), r.FirstBatchS)
		}
		if len(r.Result.Timeline) == 0 {
			t.Errorf("%s: no timeline", r.Name())
		}
	}
	one, four := c.Results[4], c.Results[5]
	if !(four.ReservedCoreH > one.ReservedCoreH && four.StallGPUh < one.StallGPUh) {
		t.Errorf("static 1 core: %.2f core-h, %.2f stall; 4 cores: %.2f, %.2f; want more cores to cost more and stall less",
			one.ReservedCoreH, one.StallGPUh, four.ReservedCoreH, four.StallGPUh)
	}
	shared, indep := c.Results[0], c.Results[1]
	if !(shared.NeededCoreH < indep.NeededCoreH) {
		t.Errorf("shared sweeps need %.2f core-h, independent %.2f: sharing should preprocess once", shared.NeededCoreH, indep.NeededCoreH)
	}
	var b strings.Builder
	if err := c.WriteTable(&b); err != nil || !strings.Contains(b.String(), "static 4 cores/trial") {
		t.Errorf("table (%v):\n%s", err, b.String())
	}
	cost, reserved := c.Charts(4)
	if len(cost) != 5 || len(reserved) != 5 {
		t.Errorf("%d cost and %d reserved series, want 4 points and the static curve, and 5 lines", len(cost), len(reserved))
	}
}
