package cluster

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/loadtest/chart"
	"github.com/sluice-project/sluice/loadtest/trace"
)

func result(p trace.Policy, sh Sharing, cores, coreH, stall float64) RunResult {
	return RunResult{Run: Run{Policy: p, Sharing: sh, StaticCores: cores}, ReservedCoreH: coreH, StallGPUh: stall}
}

// TestVerdictTakesTheBestBaselineAtSluicesCost: baselines that reserved
// more are out; a baseline is interpolated between the points of its
// knob; shared baselines are compared only with a shared Sluice run.
func TestVerdictTakesTheBestBaselineAtSluicesCost(t *testing.T) {
	kpa := func(sh Sharing, n int, coreH, stall float64) RunResult {
		r := result(trace.KPA, sh, 0, coreH, stall)
		r.MaxReplicas = n
		return r
	}
	c := Comparison{Results: []RunResult{
		result(trace.Sluice, Independent, 0, 30, 1),
		result(trace.Sluice, Shared, 0, 5, 1),
		result(trace.Static, Independent, 2, 20, 10),
		result(trace.Static, Independent, 4, 40, 2),
		result(trace.Static, Independent, 8, 80, 0.5),
		kpa(Shared, 2, 4, 3),
		kpa(Shared, 4, 8, 0.5),
	}}
	v := c.Verdicts()
	if len(v) != 2 {
		t.Fatalf("%d verdicts, want one per Sluice run", len(v))
	}
	// Independent at 30 core-h: static 2 (10) and the 2-4 line halfway
	// (6); the shared KPA does not count.
	if !v[0].AtCostFound || math.Abs(v[0].AtCostStall-6) > 1e-9 || !strings.Contains(v[0].AtCost, "between") {
		t.Errorf("at 30 core-h: %+v, want the interpolated static stall 6", v[0])
	}
	if math.Abs(v[0].StallRatio()-1.0/6) > 1e-9 {
		t.Errorf("stall ratio %v, want 1/6", v[0].StallRatio())
	}
	// Stall 1: static between 4 (40, 2) and 8 (80, 0.5): 40 + 40*(1/1.5).
	if !v[0].AtStallFound || math.Abs(v[0].AtStallCoreH-(40+40.0/1.5)) > 1e-9 {
		t.Errorf("at stall 1: %+v, want static interpolated at %.2f core-h", v[0], 40+40.0/1.5)
	}
	// Shared at 5 core-h: the shared KPA between 4 and 8 core-h, a
	// quarter of the way: 3 - 2.5/4 = 2.375.
	if !v[1].AtCostFound || math.Abs(v[1].AtCostStall-2.375) > 1e-9 {
		t.Errorf("at 5 core-h, shared: %+v, want the shared KPA's 2.375", v[1])
	}
	c.Results = c.Results[:5]
	if v := c.Verdicts(); v[1].AtCostFound {
		t.Errorf("at 5 core-h without the shared KPA no baseline reserved as little, got %+v", v[1])
	}
}

// TestCompareRunsEveryPolicyOnTheSameArrivals: a small cluster's runs all
// train every trial; more data loader cores reserve more and stall less.
func TestCompareRunsEveryPolicyOnTheSameArrivals(t *testing.T) {
	s := DefaultScenario()
	s.Nodes, s.Sweeps, s.Window = 4, 6, 10*time.Minute
	s.TrialMin, s.TrialMax = time.Minute, 3*time.Minute
	c, err := Compare(context.Background(), s, s.Model(2*time.Second), DefaultRuns([]float64{1, 4}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Results) != 10 {
		t.Fatalf("%d results, want 10", len(c.Results))
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
	one, four := c.Results[8], c.Results[9]
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
	// 8 points and the static curve, and 9 lines, where identical ones
	// (the fair split's, with the pool never short) are drawn once.
	for name, series := range map[string][]chart.Series{"cost": cost, "reserved": reserved} {
		var names []string
		for _, s := range series {
			names = append(names, s.Name)
		}
		all := strings.Join(names, " | ")
		for _, r := range c.Results[:8] {
			if !strings.Contains(all, string(r.Policy)) {
				t.Errorf("%s chart %q lacks %s", name, all, r.Name())
			}
		}
		if len(series) < 7 || len(series) > 9 {
			t.Errorf("%s chart: %d series: %q", name, len(series), all)
		}
	}
}

func TestMergedDrawsIdenticalSeriesOnce(t *testing.T) {
	got := merged([]chart.Series{
		{Name: "sluice, shared", Points: [][2]float64{{1, 2}}},
		{Name: "b", Points: [][2]float64{{1, 3}}},
		{Name: "sluice-fair, shared", Points: [][2]float64{{1, 2}}},
		{Name: "c", Points: [][2]float64{{1, 3}}},
	})
	if len(got) != 2 || got[0].Name != "sluice = sluice-fair, shared" || got[1].Name != "b = c" {
		t.Errorf("merged: %+v, want sluice = sluice-fair, shared and b = c", got)
	}
}

func TestBaselinesRunOverTheirKnob(t *testing.T) {
	runs := DefaultRuns([]float64{2}, []int{2, 8})
	var names []string
	for _, r := range runs {
		if r.MaxReplicas > 0 {
			names = append(names, r.Name())
			if !r.Baseline() {
				t.Errorf("%s: only baselines run over a replica cap", r.Name())
			}
		}
	}
	want := []string{"kpa, shared, <=2/job", "kpa, shared, <=8/job", "kpa, independent, <=2/job", "kpa, independent, <=8/job",
		"keda, shared, <=2/job", "keda, shared, <=8/job", "keda, independent, <=2/job", "keda, independent, <=8/job"}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Errorf("capped runs %q, want %q", names, want)
	}
	s := DefaultScenario()
	s.Sweeps = 2
	for _, j := range s.Trace(s.Draw(), Run{Policy: trace.KPA, Sharing: Independent, MaxReplicas: 3}).Tasks {
		if j.MaxReplicas != 3 {
			t.Errorf("%s: max replicas %d, want the run's 3", j.Name, j.MaxReplicas)
		}
	}
}
