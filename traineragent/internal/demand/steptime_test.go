package demand

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluice-project/sluice/wire"
)

func rep(rank int, steps int64, wait, compute float64) StepReport {
	return StepReport{Rank: rank, Steps: steps, WaitS: wait, ComputeS: compute}
}

func TestStepReportsCountOnce(t *testing.T) {
	approx := cmpopts.EquateApprox(0, 1e-9)
	for _, tc := range []struct {
		name    string
		reports []StepReport
		want    []StepDelta // what each report adds
	}{
		{
			name:    "the first report only sets where counting starts",
			reports: []StepReport{rep(0, 100, 40, 60), rep(0, 101, 40.5, 61)},
			want:    []StepDelta{{}, {1, 0.5, 1}},
		},
		{
			name:    "a retried request adds nothing, or the wait of the retry",
			reports: []StepReport{rep(0, 0, 0, 0), rep(0, 1, 1, 2), rep(0, 1, 1, 2), rep(0, 1, 1.5, 2)},
			want:    []StepDelta{{}, {1, 1, 2}, {}, {0, 0.5, 0}},
		},
		{
			name:    "a stale report arriving late adds nothing and takes nothing away",
			reports: []StepReport{rep(0, 0, 0, 0), rep(0, 2, 1, 2), rep(0, 1, 0.5, 1), rep(0, 3, 1.5, 3)},
			want:    []StepDelta{{}, {2, 1, 2}, {}, {1, 0.5, 1}},
		},
		{
			name: "a restarted client counts from its first report",
			reports: []StepReport{
				rep(0, 0, 0, 0), rep(0, 50, 10, 40),
				rep(0, 0, 0, 0), // restarted: behind, nothing yet
				rep(0, 1, 2, 1), // goes on from it: the restart is certain
				rep(0, 2, 2.5, 2),
			},
			want: []StepDelta{{}, {50, 10, 40}, {}, {1, 2, 1}, {1, 0.5, 1}},
		},
		{
			name:    "one total going back is behind too",
			reports: []StepReport{rep(0, 0, 0, 0), rep(0, 2, 1, 2), rep(0, 3, 0.9, 3), rep(0, 4, 1.2, 4)},
			want:    []StepDelta{{}, {2, 1, 2}, {}, {2, 0.2, 2}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b StepBook
			var got []StepDelta
			for _, r := range tc.reports {
				got = append(got, b.Report(r))
			}
			if diff := cmp.Diff(tc.want, got, approx); diff != "" {
				t.Errorf("deltas (-want +got):\n%s", diff)
			}
			var sum StepDelta
			for _, d := range got {
				if d.Steps < 0 || d.WaitS < 0 || d.ComputeS < 0 {
					t.Errorf("negative delta %+v", d)
				}
				sum.add(d)
			}
			if diff := cmp.Diff(sum, b.ranks[0].window, approx); diff != "" {
				t.Errorf("window (-deltas +window):\n%s", diff)
			}
		})
	}
}

func TestStepReportValid(t *testing.T) {
	for _, r := range []StepReport{rep(-1, 0, 0, 0), rep(0, -1, 0, 0), rep(0, 0, -0.1, 0), rep(0, 0, math.NaN(), 0), rep(0, 0, 0, math.Inf(1))} {
		if r.Valid() {
			t.Errorf("%+v is valid, want invalid", r)
		}
	}
	if !rep(3, 0, 0, 0).Valid() {
		t.Error("a fresh client's report is invalid")
	}
}

func TestSplitCompute(t *testing.T) {
	d := StepDelta{Steps: 4, WaitS: 1, ComputeS: 2}
	for _, tc := range []struct {
		name  string
		busyS float64
		want  StepParts
	}{
		{"no gpu: all compute", -1, StepParts{4, 1, 2, 0}},
		{"gpu busy part of the compute", 1.5, StepParts{4, 1, 1.5, 0.5}},
		{"gpu busy longer than the compute", 3, StepParts{4, 1, 2, 0}},
		{"idle gpu: all other", 0, StepParts{4, 1, 0, 2}},
	} {
		if diff := cmp.Diff(tc.want, splitCompute(d, tc.busyS)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestStepBookWindows(t *testing.T) {
	approx := cmpopts.EquateApprox(0, 1e-9)
	var b StepBook
	if c := b.CloseWindow(time.Second, -1); c.Reporting || c.Reported {
		t.Errorf("no reports: %+v, want nothing", c)
	}
	// Two ranks start, then step in a 2 s window on a GPU 60% busy: 1.2 s
	// of GPU time per rank.
	b.Report(rep(0, 0, 0, 0))
	b.Report(rep(1, 0, 0, 0))
	if c := b.CloseWindow(time.Second, 0.5); c.Reporting || c.Reported {
		t.Errorf("reports of zeros: %+v, want not reporting (a client that does not measure)", c)
	}
	b.Report(rep(1, 0, 0, 0.1)) // rank 1 computes its first step
	c := b.CloseWindow(time.Second, 0.5)
	if !c.Reporting || !c.Reported || c.Times != (wire.StepTimes{}) || c.MaxWait != 0 {
		t.Errorf("a report of compute only: %+v, want reporting, no step, no wait", c)
	}
	b.Report(rep(0, 1, 0.2, 0.7))
	b.Report(rep(0, 2, 0.3, 1.4)) // rank 0: 2 steps, 0.3 s wait, 1.4 s compute
	b.Report(rep(1, 1, 0.6, 1.0)) // rank 1: 1 step, 0.6 s wait, 1 s compute
	c = b.CloseWindow(2*time.Second, 0.6)
	want := ClientWindow{
		Reporting: true, Reported: true, MaxWait: 600 * time.Millisecond,
		Times: wire.StepTimes{Steps: 3, Ranks: 2, WaitS: 0.3, ComputeS: 2.1 / 3, OtherS: 0.2 / 3},
		PerRank: map[int]StepParts{
			0: {Steps: 2, WaitS: 0.3, ComputeS: 1.2, OtherS: 0.2},
			1: {Steps: 1, WaitS: 0.6, ComputeS: 0.9},
		},
	}
	if diff := cmp.Diff(want, c, approx); diff != "" {
		t.Errorf("window (-want +got):\n%s", diff)
	}
	// The next window starts empty; the totals keep the closed ones.
	b.Report(rep(1, 2, 0.6, 2.0))
	c = b.CloseWindow(time.Second, -1)
	if c.Times.Steps != 1 || c.Times.Ranks != 1 || c.PerRank[0] != (StepParts{}) {
		t.Errorf("next window %+v, want rank 1's one step", c)
	}
	wantTotals := []RankSteps{
		{Rank: 0, Steps: 2, WaitS: 0.3, ComputeS: 1.2, OtherS: 0.2},
		{Rank: 1, Steps: 2, WaitS: 0.6, ComputeS: 2.0},
	}
	if diff := cmp.Diff(wantTotals, b.Totals(), approx); diff != "" {
		t.Errorf("totals (-want +got):\n%s", diff)
	}
}
