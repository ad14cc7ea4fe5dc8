package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluice-project/sluice/loadtest/chart"
	"github.com/sluice-project/sluice/loadtest/cluster"
	"github.com/sluice-project/sluice/loadtest/trace"
)

func runLoadtestCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("loadtest cluster", stderr)
	s := cluster.DefaultScenario()
	fs.IntVar(&s.Nodes, "nodes", s.Nodes, "GPU nodes")
	fs.IntVar(&s.GPUsPerNode, "gpus-per-node", s.GPUsPerNode, "GPUs per node")
	fs.Float64Var(&s.CoresPerNode, "cores-per-node", s.CoresPerNode, "cores per node")
	fs.IntVar(&s.Sweeps, "sweeps", s.Sweeps, "sweeps arriving over --window")
	fs.IntVar(&s.TrialsMin, "trials-min", s.TrialsMin, "fewest trials of a sweep")
	fs.IntVar(&s.TrialsMax, "trials-max", s.TrialsMax, "most trials of a sweep")
	fs.DurationVar(&s.Window, "window", s.Window, "time over which the sweeps arrive")
	fs.Float64Var(&s.BurstShare, "burst-share", s.BurstShare, "share of the sweeps arriving in bursts (0..1)")
	fs.IntVar(&s.Bursts, "bursts", s.Bursts, "burst episodes")
	fs.DurationVar(&s.TrialMin, "trial-min", s.TrialMin, "shortest trial (training time at full speed)")
	fs.DurationVar(&s.TrialMax, "trial-max", s.TrialMax, "longest trial")
	fs.Float64Var(&s.TrainerPerGPU, "trainer-per-gpu", s.TrainerPerGPU, "median samples/s one GPU's trainer eats")
	fs.Float64Var(&s.PerCore, "per-core", s.PerCore, "median samples/s one core preprocesses")
	fs.Uint64Var(&s.Seed, "seed", s.Seed, "seed of the arrivals and rates")
	coldStart := fs.Duration("cold-start", trace.DefaultModel().ColdStart, "time a new replica takes to serve")
	static := fs.String("static-cores", "1,2,3,4,6", "comma-separated data loader `cores` per trial of the static allocation runs")
	capsFlag := fs.String("baseline-caps", "2,4,8", "comma-separated replica caps per job (`N`: the requests in flight a job's dispatcher keeps, or a ScaledObject's maxReplicaCount) at which the KPA and KEDA baselines run again, beside uncapped")
	asJSON := fs.Bool("json", false, "print the comparison as JSON")
	out := fs.String("out", "", "`directory` to write cost.svg (stall against reserved core-hours) and reserved.svg (reserved cores over the arrival window) into")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice loadtest cluster [flags]\n\nSimulates bursty hyperparameter sweeps on a GPU cluster on virtual time under every\n"+
			"scaling policy on the same arrivals (the trace simulator, with the real autoscale policy and\n"+
			"allocator), and prints the trainers' stall beside the preprocessing core-hours reserved.\n\n")
		fs.PrintDefaults()
	}
	var staticCores []float64
	var caps []int
	parseLists := func() error {
		var err error
		if staticCores, err = floatList(*static); err != nil {
			return fmt.Errorf("--static-cores %w", err)
		}
		var cs []float64
		if cs, err = floatList(*capsFlag); err != nil {
			return fmt.Errorf("--baseline-caps %w", err)
		}
		for _, c := range cs {
			if c != float64(int(c)) {
				return fmt.Errorf("--baseline-caps %q: want whole numbers", *capsFlag)
			}
			caps = append(caps, int(c))
		}
		return nil
	}
	if err := parse(fs, args, func() error { return s.Validate() }, parseLists); err != nil {
		return err
	}
	c, err := cluster.Compare(ctx, s, s.Model(*coldStart), cluster.DefaultRuns(staticCores, caps))
	if err != nil {
		return err
	}
	if *asJSON {
		err = printJSON(stdout, clusterJSON(c))
	} else {
		err = c.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	if *out == "" {
		return nil
	}
	return writeClusterCharts(c, *out, staticCores, stdout)
}

// clusterReport is a comparison as --json prints it.
type clusterReport struct {
	Nodes       int              `json:"nodes"`
	GPUsPerNode int              `json:"gpus_per_node"`
	Sweeps      int              `json:"sweeps"`
	Trials      int              `json:"trials"`
	WindowS     float64          `json:"window_s"`
	BurstShare  float64          `json:"burst_share"`
	Bursts      int              `json:"bursts"`
	ColdStartS  float64          `json:"cold_start_s"`
	WallS       float64          `json:"wall_s"`
	Runs        []clusterRun     `json:"runs"`
	Verdicts    []clusterVerdict `json:"verdicts"`
}

type clusterRun struct {
	Run           string  `json:"run"`
	Trials        int     `json:"trials"`
	StallGPUh     float64 `json:"stall_gpu_h"`
	StallShare    float64 `json:"stall_share"`
	ReservedCoreH float64 `json:"reserved_core_h"`
	NeededCoreH   float64 `json:"needed_core_h"`
	FirstBatchS   float64 `json:"first_batch_s"`
	MeanJCTS      float64 `json:"mean_jct_s"`
}

// clusterVerdict is a Sluice run against the baselines: the best at its
// cost and the cheapest at its stall (absent where none qualifies).
type clusterVerdict struct {
	Run          string   `json:"run"`
	AtCost       string   `json:"at_cost,omitempty"`
	AtCostStall  *float64 `json:"at_cost_stall_gpu_h,omitempty"`
	StallRatio   *float64 `json:"stall_ratio,omitempty"`
	AtStall      string   `json:"at_stall,omitempty"`
	AtStallCoreH *float64 `json:"at_stall_reserved_core_h,omitempty"`
	CostRatio    *float64 `json:"cost_ratio,omitempty"`
}

func clusterJSON(c cluster.Comparison) clusterReport {
	s := c.Scenario
	r := clusterReport{Nodes: s.Nodes, GPUsPerNode: s.GPUsPerNode, Sweeps: len(c.Sweeps), Trials: cluster.Trials(c.Sweeps),
		WindowS: s.Window.Seconds(), BurstShare: s.BurstShare, Bursts: s.Bursts, ColdStartS: c.Model.ColdStart.Seconds(),
		WallS: c.Wall.Seconds(), Runs: []clusterRun{}, Verdicts: []clusterVerdict{}}
	for _, x := range c.Results {
		r.Runs = append(r.Runs, clusterRun{x.Name(), x.Trials, x.StallGPUh, x.StallShare, x.ReservedCoreH, x.NeededCoreH, x.FirstBatchS, x.MeanJCT})
	}
	for _, v := range c.Verdicts() {
		cv := clusterVerdict{Run: v.Sluice.Name()}
		if v.AtCostFound {
			cv.AtCost, cv.AtCostStall, cv.StallRatio = v.AtCost, finite(v.AtCostStall), finite(v.StallRatio())
		}
		if v.AtStallFound {
			cv.AtStall, cv.AtStallCoreH, cv.CostRatio = v.AtStall, finite(v.AtStallCoreH), finite(v.CostRatio())
		}
		r.Verdicts = append(r.Verdicts, cv)
	}
	return r
}

// writeClusterCharts writes the comparison's charts into dir.
func writeClusterCharts(c cluster.Comparison, dir string, staticCores []float64, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cost, reserved := c.Charts(staticCores[len(staticCores)/2])
	for _, ch := range []struct {
		file, title, x, y string
		series            []chart.Series
		write             func(io.Writer, string, string, string, []chart.Series) error
	}{
		{"cost.svg", "Trainer stall against preprocessing cores reserved", "reserved core-hours (log)", "stall GPU-hours (log)", cost, chart.WritePoints},
		{"reserved.svg", "Preprocessing cores reserved while the sweeps arrive", "minutes", "cores (log)", reserved, chart.WriteStepsLogY},
	} {
		path := filepath.Join(dir, ch.file)
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		err = ch.write(f, ch.title, ch.x, ch.y, ch.series)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		fmt.Fprintf(stdout, "wrote %s\n", path)
	}
	return nil
}

// floatList parses "1,2,3" into at least one positive number.
func floatList(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || v > 1024 {
			return nil, fmt.Errorf("%q: want positive numbers up to 1024, comma-separated", s)
		}
		out = append(out, v)
	}
	return out, nil
}
