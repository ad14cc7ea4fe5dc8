package cluster

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
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
		fmt.Fprintf(w, "%s: %.2f stall GPU-h at %.1f reserved core-h\n", v.Sluice.Name(), v.Sluice.StallGPUh, v.Sluice.ReservedCoreH)
		if v.AtCostFound {
			fmt.Fprintf(w, "  stall %.3fx the best baseline at that cost (%s: %.2f)\n", v.StallRatio(), v.AtCost, v.AtCostStall)
		} else {
			fmt.Fprintln(w, "  no baseline reserved as little")
		}
		if v.AtStallFound {
			fmt.Fprintf(w, "  cost %.2fx the cheapest baseline that stalls no more (%s: %.1f core-h)\n", v.CostRatio(), v.AtStall, v.AtStallCoreH)
		} else {
			fmt.Fprintln(w, "  no baseline stalls as little")
		}
	}
	return nil
}

// Charts are the comparison's two charts: stall against reserved
// core-hours (a point per Sluice run, a curve over its knob per baseline:
// static allocation's cores per trial, the KPA's and KEDA's replica caps),
// and the reserved cores over the hour the sweeps arrive, a line per
// uncapped run and static allocation at staticCores.
func (c Comparison) Charts(staticCores float64) (cost, reserved []chart.Series) {
	curves := map[string]int{} // series name -> index in cost
	window := c.Scenario.Window.Seconds()
	for _, r := range c.Results {
		name := r.Name()
		if r.Baseline() {
			name = fmt.Sprintf("%s, %s, over its knob", r.Policy, r.Sharing)
			if r.Policy == trace.Static {
				name = "static, over cores/trial"
			}
		}
		i, ok := curves[name]
		if !ok {
			i = len(cost)
			curves[name] = i
			cost = append(cost, chart.Series{Name: name})
		}
		cost[i].Points = append(cost[i].Points, [2]float64{r.ReservedCoreH, r.StallGPUh})
		if r.MaxReplicas > 0 || r.Policy == trace.Static && r.StaticCores != staticCores {
			continue
		}
		line := chart.Series{Name: r.Name()}
		for _, s := range r.Result.Timeline {
			if s.T <= window {
				line.Points = append(line.Points, [2]float64{s.T / 60, s.ReservedCores})
			}
		}
		reserved = append(reserved, line)
	}
	for _, s := range cost {
		sort.Slice(s.Points, func(i, j int) bool { return s.Points[i][0] < s.Points[j][0] })
	}
	return merged(cost), merged(reserved)
}

// merged draws identical series once, named after all of them (the fair
// split's runs are the marginal allocator's whenever the pool is never
// short), so that no line hides another.
func merged(series []chart.Series) []chart.Series {
	var out []chart.Series
	for _, s := range series {
		same := slices.IndexFunc(out, func(o chart.Series) bool { return slices.Equal(o.Points, s.Points) })
		if same < 0 {
			out = append(out, s)
			continue
		}
		out[same].Name = joinNames(out[same].Name, s.Name)
	}
	return out
}

// joinNames names two runs drawn as one: "sluice, shared" and
// "sluice-fair, shared" are "sluice = sluice-fair, shared".
func joinNames(a, b string) string {
	pa, sa, _ := strings.Cut(a, ", ")
	pb, sb, _ := strings.Cut(b, ", ")
	if sa != "" && sa == sb {
		return pa + " = " + pb + ", " + sa
	}
	return a + " = " + b
}
