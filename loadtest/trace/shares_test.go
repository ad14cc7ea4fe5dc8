package trace

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
)

// mixed is a trace of 40 tasks whose demand the model draws, on cores
// enough that the pool is never short: at the default model a few are
// input-bound (2 cores per GPU), most are fed (16).
func mixed() Trace {
	tr := Trace{Cluster: Cluster{Cores: 4096, GPUs: 64, Nodes: 8}}
	for i := range 40 {
		cores := 16.0
		if i%4 == 0 {
			cores = 2
		}
		tr.Tasks = append(tr.Tasks, Task{Name: fmt.Sprintf("t%02d", i), Start: float64(60 * i), Duration: float64(300 + 97*(i%7)), GPUs: 1, Cores: cores})
	}
	return tr
}

// boundCount is how many of tr's tasks are input-bound under m.
func boundCount(tr Trace, m Model) (bound, all int) {
	for _, t := range Prepare(tr, m) {
		all++
		if InputBound(t) {
			bound++
		}
	}
	return bound, all
}

func TestReshareMakesTheShareInputBound(t *testing.T) {
	m := DefaultModel()
	tr := mixed()
	if b, n := boundCount(tr, m); b == 0 || b == n {
		t.Fatalf("%d of %d tasks input-bound before resharing: want some of each class to draw from", b, n)
	}
	natural := map[string]Task{}
	for _, x := range tr.Tasks {
		natural[x.Name] = m.draw(x)
	}
	for _, share := range DefaultShares {
		rt, err := Reshare(tr, m, share)
		if err != nil {
			t.Fatal(err)
		}
		if b, n := boundCount(rt, m); b != int(math.Round(share*float64(n))) {
			t.Errorf("share %v: %d of %d tasks input-bound", share, b, n)
		}
		for i, x := range rt.Tasks {
			o, d := tr.Tasks[i], natural[x.Name]
			if x.Name != o.Name || x.Start != o.Start || x.Duration != o.Duration || x.GPUs != o.GPUs || x.Cores != o.Cores {
				t.Errorf("share %v: task %d %+v, was %+v: the schedule, GPUs and cores must stay the trace's", share, i, x, o)
			}
			// Only the trainer rate moves, and only across classes.
			if x.CPUPerSample != d.CPUPerSample || (InputBound(x) == InputBound(d) && x.TrainerRate != d.TrainerRate) {
				t.Errorf("share %v: %s drawn %+v, reshared %+v", share, x.Name, d, x)
			}
		}
	}
	if _, err := Reshare(tr, m, 1.5); err == nil || !strings.Contains(err.Error(), "share 1.5") {
		t.Errorf("share 1.5: %v, want an error naming it", err)
	}
	fed := Trace{Cluster: tr.Cluster, Tasks: tr.Tasks[1:4]} // 16 cores each: none input-bound
	if _, err := Reshare(fed, m, 0.5); err == nil || !strings.Contains(err.Error(), "no input-bound task") {
		t.Errorf("a trace without input-bound tasks reshared to 50%%: %v, want an error saying there is none to draw from", err)
	}
}

// TestSharesClasses: at 100% the input-bound class is every task, at 0% it
// is empty; with the whole pool Sluice does at least static's for the
// input-bound tasks and about as well for the rest.
func TestSharesClasses(t *testing.T) {
	m := DefaultModel()
	rows, err := Shares(context.Background(), mixed(), m, []float64{0, 0.5, 1})
	if err != nil {
		t.Fatal(err)
	}
	none, half, all := rows[0], rows[1], rows[2]
	if none.InputBound != 0 || none.Bound.Static.Jobs != 0 || !math.IsNaN(none.Bound.JCTRatio()) {
		t.Errorf("0%%: input-bound %v, class %+v; want none", none.InputBound, none.Bound)
	}
	if all.InputBound != 1 || all.Bound != all.Summaries || all.Bound.Static.Jobs != 40 {
		t.Errorf("100%%: input-bound %v, class %+v, all %+v; want the class to be every task", all.InputBound, all.Bound, all.Summaries)
	}
	if half.InputBound != 0.5 || half.Bound.Static.Jobs != 20 || half.Static.Jobs != 40 {
		t.Errorf("50%%: input-bound %v, %d of %d tasks in the class", half.InputBound, half.Bound.Static.Jobs, half.Static.Jobs)
	}
	for _, r := range rows {
		if r.Bound.Static.Jobs > 0 && (r.Bound.JCTRatio() < 1 || r.Bound.UtilRatio() < 1 || r.BoundSlowdown <= 1) {
			t.Errorf("%v: input-bound JCT ratio %.2f, util ratio %.2f, static slowdown %.2f; want all at least 1",
				r.Share, r.Bound.JCTRatio(), r.Bound.UtilRatio(), r.BoundSlowdown)
		}
		// A fed task loses at most its replicas' cold start.
		if r.JCTRatio() < 0.95 || r.UtilRatio() < 0.95 {
			t.Errorf("%v: JCT ratio %.2f, util ratio %.2f over all; want at least 0.95", r.Share, r.JCTRatio(), r.UtilRatio())
		}
	}
	if all.UtilRatio() <= none.UtilRatio() {
		t.Errorf("GPU utilisation ratio %.2f with every task input-bound, %.2f with none: want a gain", all.UtilRatio(), none.UtilRatio())
	}
	again, err := Shares(context.Background(), mixed(), m, []float64{0, 0.5, 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if again[i].Summaries != rows[i].Summaries || again[i].Bound != rows[i].Bound {
			t.Errorf("share %v: two runs differ", rows[i].Share)
		}
	}
}

// TestCompareClasses: small's input-bound class is its two bound tasks.
func TestCompareClasses(t *testing.T) {
	c, err := Compare(context.Background(), small(), DefaultModel())
	if err != nil {
		t.Fatal(err)
	}
	if c.Bound.Static.Jobs != 2 || c.Static.Jobs != 4 {
		t.Fatalf("%d input-bound of %d tasks, want 2 of 4", c.Bound.Static.Jobs, c.Static.Jobs)
	}
	// bound-a trains at 300/s under static (3 data loader cores), 3.3x
	// slower than its trainer; bound-b at 400/s (6 cores less 2 for its
	// two GPUs' trainer), 5x.
	if want := (1000.0/300 + 5) / 2; math.Abs(c.BoundSlowdown-want) > 1e-6 {
		t.Errorf("median static slowdown %.3f, want %.3f", c.BoundSlowdown, want)
	}
	if c.Bound.JCTRatio() <= c.JCTRatio() || c.Bound.UtilRatio() <= c.UtilRatio() {
		t.Errorf("input-bound ratios %.2f / %.2f, all %.2f / %.2f: want the gain to be the input-bound tasks'",
			c.Bound.JCTRatio(), c.Bound.UtilRatio(), c.JCTRatio(), c.UtilRatio())
	}
}

func TestReached(t *testing.T) {
	rows := []ShareRow{{Share: 0}, {Share: 0.5}, {Share: 1}}
	for i, x := range []float64{1, 2.6, 2.4} {
		rows[i].Static.MeanJCT, rows[i].Sluice.MeanJCT = x, 1
	}
	jct := func(r ShareRow) float64 { return r.JCTRatio() }
	if got := Reached(rows, jct, GoldMinerJCT); got != "reached at 50% input-bound (2.60x)" {
		t.Errorf("Reached: %q", got)
	}
	if got := Reached(rows, jct, 3); got != "not reached (at most 2.60x, at 50% input-bound)" {
		t.Errorf("Reached: %q", got)
	}
}

func TestParseJobsRefusesRepeatedNames(t *testing.T) {
	_, err := ParseJobs(strings.NewReader(`
cluster: {cores: 2}
jobs:
  - {name: a, gpus: 1, cores: 1, samples: 10}
  - {name: a, gpus: 1, cores: 1, samples: 10}
`))
	if err == nil || !strings.Contains(err.Error(), `jobs[1].name "a"`) {
		t.Errorf("two jobs named a: %v, want an error naming the second", err)
	}
}

// TestAlibabaTraceHeadShares reshares the trace's first 300 GPU tasks:
// static still reproduces their recorded durations, and every share's
// ratios stay sane.
func TestAlibabaTraceHeadShares(t *testing.T) {
	tr := loadTrace(t)
	tr.Tasks = tr.Tasks[:300]
	m := DefaultModel()
	for _, share := range []float64{0, 1} {
		rt, err := Reshare(tr, m, share)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Simulate(context.Background(), rt, Prepare(rt, m), m, Static)
		if err != nil {
			t.Fatal(err)
		}
		dur := map[string]float64{}
		for _, x := range rt.Tasks {
			dur[x.Name] = x.Duration
		}
		for _, j := range r.Jobs {
			if d := dur[j.Name]; math.Abs(j.JCT-d) > 1e-6*d {
				t.Errorf("share %v: %s static JCT %.1fs, the trace's %.1fs", share, j.Name, j.JCT, d)
			}
		}
	}
	rows, err := Shares(context.Background(), tr, m, []float64{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if rows[1].Bound != rows[1].Summaries || rows[0].Bound.Static.Jobs != 0 {
		t.Errorf("classes at 0%% and 100%%: %+v, %+v", rows[0].Bound, rows[1].Bound)
	}
	for _, r := range rows {
		if r.JCTRatio() < 0.95 || r.UtilRatio() < 0.95 {
			t.Errorf("share %v: JCT ratio %.2f, util ratio %.2f; want at least 0.95", r.Share, r.JCTRatio(), r.UtilRatio())
		}
	}
}
