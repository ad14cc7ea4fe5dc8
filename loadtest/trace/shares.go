package trace

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"text/tabwriter"
)

// GoldMiner's reported gains over static CPU allocation (Zhao et al.,
// SIGMOD'23, on 64 GPUs): average job completion time and GPU
// utilisation, the figures the share table is read against.
const (
	GoldMinerJCT  = 2.5
	GoldMinerUtil = 2.1
)

// DefaultShares are the share table's rows: the share of tasks made
// input-bound.
var DefaultShares = []float64{0, 0.10, 0.25, 0.50, 0.75, 1}

// reshareStream tells the share table's random stream from the demand
// draws' (both start from Model.Seed).
const reshareStream = 0x5a4e_7e5

// Reshare gives tr's tasks, drawn under m, a new demand so that share of
// them (rounded to a task) are input-bound; their schedule, durations, GPUs
// and cores stay the trace's. The input-bound ones are chosen at random
// (seeded by m.Seed). A task keeps its own draw where it already is in its
// class; otherwise its trainer rate is set so that its demand ratio (the
// cores its trainer's rate needs over its data loader cores: above 1 is
// input-bound) is one drawn from the tasks of its new class under m. So
// a reshared input-bound task is as input-bound as m makes the trace's own.
// Tasks without data loader cores, which Prepare drops, keep their draw.
func Reshare(tr Trace, m Model, share float64) (Trace, error) {
	if !(share >= 0 && share <= 1) {
		return tr, fmt.Errorf("input-bound share %v: want 0..1", share)
	}
	tasks := make([]Task, len(tr.Tasks))
	var ratio []float64 // per task; 0: no data loader cores
	var bound, fed, eligible []int
	for i, t := range tr.Tasks {
		t = m.draw(t)
		tasks[i] = t
		r := 0.0
		if data := t.Cores - t.HostCores; data > 0 {
			r = t.TrainerRate * t.CPUPerSample / data
			eligible = append(eligible, i)
			if InputBound(t) {
				bound = append(bound, i)
			} else {
				fed = append(fed, i)
			}
		}
		ratio = append(ratio, r)
	}
	rng := rand.New(rand.NewPCG(m.Seed, reshareStream))
	pick := func(from []int, class string) (float64, error) {
		if len(from) == 0 {
			return 0, fmt.Errorf("input-bound share %v: the model makes no %s task of the trace to draw from", share, class)
		}
		return ratio[from[rng.IntN(len(from))]], nil
	}
	rng.Shuffle(len(eligible), func(a, b int) { eligible[a], eligible[b] = eligible[b], eligible[a] })
	nBound := int(math.Round(share * float64(len(eligible))))
	for k, i := range eligible {
		want, t := k < nBound, &tasks[i]
		if InputBound(*t) == want {
			continue
		}
		from, class := fed, "fed"
		if want {
			from, class = bound, "input-bound"
		}
		r, err := pick(from, class)
		if err != nil {
			return tr, err
		}
		t.TrainerRate = r * (t.Cores - t.HostCores) / t.CPUPerSample
	}
	out := tr
	out.Tasks = tasks
	return out, nil
}

// ShareRow is one row of the share table: the comparison over the trace
// reshared so that Share of its tasks are input-bound.
type ShareRow struct {
	Share float64
	Comparison
}

// Shares runs Compare over tr reshared to each share.
func Shares(ctx context.Context, tr Trace, m Model, shares []float64) ([]ShareRow, error) {
	rows := make([]ShareRow, 0, len(shares))
	for _, s := range shares {
		rt, err := Reshare(tr, m, s)
		if err != nil {
			return rows, err
		}
		c, err := Compare(ctx, rt, m)
		if err != nil {
			return rows, fmt.Errorf("input-bound share %v: %w", s, err)
		}
		c.Results = nil // keep the table's memory small
		rows = append(rows, ShareRow{s, c})
	}
	return rows, nil
}

// Reached is the first row whose ratio over all tasks reaches target, as
// words: "at N% input-bound" or "not reached (at most X at N%)".
func Reached(rows []ShareRow, ratio func(ShareRow) float64, target float64) string {
	best, at := math.Inf(-1), -1.0
	for _, r := range rows {
		x := ratio(r)
		if x >= target {
			return fmt.Sprintf("reached at %.0f%% input-bound (%.2fx)", 100*r.Share, x)
		}
		if x > best {
			best, at = x, r.Share
		}
	}
	if at < 0 {
		return "not reached (no rows)"
	}
	return fmt.Sprintf("not reached (at most %.2fx, at %.0f%% input-bound)", best, 100*at)
}

// PrintShares writes the share table as Markdown, and where GoldMiner's
// figures are reached over all tasks.
func PrintShares(w io.Writer, rows []ShareRow) {
	fmt.Fprintln(w, "| input-bound share | tasks input-bound | static slowdown of input-bound (median) | JCT static/Sluice, input-bound | GPU util Sluice/static, input-bound | JCT static/Sluice, all | GPU util Sluice/static, all | core-hours Sluice/static, all |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintf(w, "| %.0f%% | %.1f%% (%d) | %s | %s | %s | %s | %s | %s |\n", 100*r.Share, 100*r.InputBound, r.Bound.Static.Jobs,
			times(r.BoundSlowdown), times(r.Bound.JCTRatio()), times(r.Bound.UtilRatio()), times(r.JCTRatio()), times(r.UtilRatio()), times(r.CoreRatio()))
	}
	fmt.Fprintf(w, "\nGoldMiner's %.1fx JCT, all tasks: %s\n", GoldMinerJCT, Reached(rows, func(r ShareRow) float64 { return r.JCTRatio() }, GoldMinerJCT))
	fmt.Fprintf(w, "GoldMiner's %.1fx GPU utilisation, all tasks: %s\n", GoldMinerUtil, Reached(rows, func(r ShareRow) float64 { return r.UtilRatio() }, GoldMinerUtil))
}

// PrintClasses writes a comparison's ratios per class of tasks:
// input-bound and all.
func PrintClasses(w io.Writer, c Comparison) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASKS\tJOBS\tSTATIC JCT\tSLUICE JCT\tSTATIC UTIL\tSLUICE UTIL\tJCT VS STATIC\tUTIL VS STATIC\tFAIR: JCT\tFAIR: UTIL")
	for _, k := range []struct {
		name string
		s    Summaries
	}{{"input-bound", c.Bound}, {"all", c.Summaries}} {
		s := k.s
		fmt.Fprintf(tw, "%s\t%d\t%.0fs\t%.0fs\t%.1f%%\t%.1f%%\t%s\t%s\t%s\t%s\n", k.name, s.Static.Jobs, s.Static.MeanJCT, s.Sluice.MeanJCT,
			100*s.Static.GPUUtil, 100*s.Sluice.GPUUtil, times(s.JCTRatio()), times(s.UtilRatio()), times(s.FairJCTRatio()), times(s.FairUtilRatio()))
	}
	_ = tw.Flush()
}

// times is a ratio as "1.23x", "n/a" where it is undefined (no tasks).
func times(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", x)
}
