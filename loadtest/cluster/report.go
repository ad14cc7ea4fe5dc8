package cluster

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/sluice-project/sluice/loadtest/chart"
	"github.com/sluice-project/sluice/loadtest/trace"
)

// WriteTable prints one row per run and the verdicts.
func (c Comparison) WriteTable(w io.Writer) error {
	s := c.Scenario
	fmt.Fprintf(w, "%d nodes x %d GPUs, %d sweeps (%d trials) over %v, %.0f%% in %d bursts; trials %v-%v; cold start %v; simulated in %.1fs\n\n",
		s.Nodes, s.GPUsPerNode, len(c.Sweeps), Trials(c.Sweeps), s.Window, 100*s.BurstShare, s.Bursts, s.TrialMin, s.TrialMax,
		c.Model.ColdStart, c.Wall.Seconds())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tstall GPU-h\tstall share\treserved core-h\tneeded core-h\tfirst batch s\tmean JCT s\t")
	for _, r := range c.Results {
		fmt.Fprintf(tw, "%s\t%.2f\t%.3f\t%.1f\t%.1f\t%.1f\t%.0f\t\n", r.Name(), r.StallGPUh, r.StallShare,
			r.ReservedCoreH, r.NeededCoreH, r.FirstBatchS, r.MeanJCT)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, v := range c.Verdicts() {
		if !v.Found {
			fmt.Fprintf(w, "%s: %.2f stall GPU-h at %.1f core-h; no baseline reserved as little\n",
				v.Sluice.Name(), v.Sluice.StallGPUh, v.Sluice.ReservedCoreH)
			continue
		}
		fmt.Fprintf(w, "%s: %.2f stall GPU-h at %.1f core-h = %.2fx the best baseline at that cost (%s: %.2f)\n",
			v.Sluice.Name(), v.Sluice.StallGPUh, v.Sluice.ReservedCoreH, v.StallRatio(), v.Baseline, v.StallGPUh)
	}
	return nil
}

// Charts are the comparison's two charts: stall against reserved
// core-hours (a point per run, static allocation a curve over its cores
// per trial), and the reserved cores over the hour the sweeps arrive, a
// line per run (static allocation at staticCores only).
func (c Comparison) Charts(staticCores float64) (cost, reserved []chart.Series) {
	static := chart.Series{Name: "static, cores/trial"}
	window := c.Scenario.Window.Seconds()
	for _, r := range c.Results {
		p := [2]float64{r.ReservedCoreH, r.StallGPUh}
		if r.Policy == trace.Static {
			static.Points = append(static.Points, p)
			if r.StaticCores != staticCores {
				continue
			}
		} else {
			cost = append(cost, chart.Series{Name: r.Name(), Points: [][2]float64{p}})
		}
		line := chart.Series{Name: r.Name()}
		for _, s := range r.Result.Timeline {
			if s.T <= window {
				line.Points = append(line.Points, [2]float64{s.T / 60, s.ReservedCores})
			}
		}
		reserved = append(reserved, line)
	}
	sort.Slice(static.Points, func(i, j int) bool { return static.Points[i][0] < static.Points[j][0] })
	if len(static.Points) > 0 {
		cost = append(cost, static)
	}
	return cost, reserved
}
