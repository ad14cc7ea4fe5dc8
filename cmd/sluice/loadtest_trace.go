package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-project/sluice/loadtest/trace"
)

// traceOptions are `sluice loadtest trace`'s flags.
type traceOptions struct {
	dir, jobs           string
	sensitivity, perJob bool
	asJSON              bool
	model               trace.Model
	// shares are the share table's rows (nil: none); sharesSet tells
	// whether --shares was given (a job list gets the table only then).
	shares    []float64
	sharesSet bool
}

func runLoadtestTrace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseTraceFlags(args, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	tr, source, err := loadTraceSource(&o)
	if err != nil {
		return err
	}
	c, err := trace.Compare(ctx, tr, o.model)
	if err != nil {
		return err
	}
	var rows []trace.Row
	if o.sensitivity {
		if rows, err = trace.Sensitivity(ctx, tr, o.model, trace.Variations()); err != nil {
			return err
		}
	}
	var shares []trace.ShareRow
	if o.shares != nil && (o.jobs == "" || o.sharesSet) {
		if shares, err = trace.Shares(ctx, tr, o.model, o.shares); err != nil {
			return err
		}
	}
	if o.asJSON {
		return printTraceJSON(stdout, source, o.model, c, rows, shares, time.Since(start))
	}
	printTrace(stdout, o, tr, source, c)
	if len(rows) > 0 {
		fmt.Fprintln(stdout)
		trace.PrintSensitivity(stdout, rows)
	}
	if len(shares) > 0 {
		fmt.Fprintf(stdout, "\ninput-bound share (the tasks reshared so that this share is input-bound, seed %d):\n", o.model.Seed)
		fmt.Fprintln(stdout)
		trace.PrintShares(stdout, shares)
	}
	fmt.Fprintf(stdout, "\nsimulated in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

func parseTraceFlags(args []string, stderr io.Writer) (traceOptions, error) {
	o := traceOptions{model: trace.DefaultModel(), shares: trace.DefaultShares}
	fs := newFlagSet("loadtest trace", stderr)
	fs.StringVar(&o.dir, "data", "", "`directory` of an Alibaba PAI trace (openb_pod_list_default.csv, openb_node_list_gpu_node.csv, each may be gzipped; default: the one shipped in Sluice, cluster-trace-gpu-v2023)")
	fs.StringVar(&o.jobs, "jobs", "", "a job list (YAML or JSON: cluster.cores and jobs with start_s, gpus, cores, samples[, trainer_rate, cpu_s_per_sample]) to simulate instead of the trace")
	fs.BoolVar(&o.sensitivity, "sensitivity", false, "also run the sensitivity table over the demand model's parameters")
	fs.BoolVar(&o.perJob, "per-job", false, "print every job's completion time and stall per policy (the default with --jobs)")
	fs.BoolVar(&o.asJSON, "json", false, "print the results as JSON")
	fs.Func("shares", "`percentages` of input-bound tasks for the share table, comma-separated, or none (default 0,10,25,50,75,100 for the trace, none for a job list)", func(v string) error {
		s, err := parseShares(v)
		o.shares, o.sharesSet = s, true
		return err
	})
	modelFlags(fs, &o.model)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice loadtest trace [flags]\n\nSimulates the Alibaba PAI GPU cluster trace (or a job list) on virtual time: each GPU\n"+
			"task preprocesses on the CPUs it asked for (static) or on replicas that the real autoscale\n"+
			"policy and allocator size from a pool of the cluster's cores (Sluice). Prints mean job\n"+
			"completion time and GPU utilisation per policy, as ratios to static, for the input-bound\n"+
			"tasks and for all, and the same over shares of input-bound tasks.\n\n")
		fs.PrintDefaults()
	}
	err := parse(fs, args, func() error { return o.model.Validate() })
	return o, err
}

// modelFlags binds the demand model's flags to m.
func modelFlags(fs *flag.FlagSet, m *trace.Model) {
	fs.Float64Var(&m.TrainerPerGPU, "trainer-per-gpu", m.TrainerPerGPU, "median samples/s one GPU's trainer eats")
	fs.Float64Var(&m.TrainerSigma, "trainer-sigma", m.TrainerSigma, "sigma of the trainer rate's log-normal spread")
	fs.Float64Var(&m.PerCore, "per-core", m.PerCore, "median samples/s one core preprocesses (sluice bench ops: samples_per_s_per_core)")
	fs.Float64Var(&m.PerCoreSigma, "per-core-sigma", m.PerCoreSigma, "sigma of the per-core rate's log-normal spread")
	fs.Float64Var(&m.HostCoresPerGPU, "host-cores-per-gpu", m.HostCoresPerGPU, "cores a trainer keeps for its own loop, per GPU")
	fs.Float64Var(&m.Lendable, "lendable", m.Lendable, "share of the cluster's unrequested cores Sluice may pool (0..1)")
	fs.Float64Var(&m.ReplicaCores, "replica-cores", m.ReplicaCores, "cores of one function replica")
	fs.DurationVar(&m.ColdStart, "cold-start", m.ColdStart, "time a new replica takes to serve")
	fs.IntVar(&m.QueueGPUs, "queue-gpus", 0, "schedule the tasks first come, first served on a cluster of this many `GPUs` (pooled, the trace's cores per GPU) instead of replaying the trace's start times; completion times then count the wait")
	fs.Uint64Var(&m.Seed, "seed", m.Seed, "seed of the tasks' demand draws (and of the share table's choice)")
}

// parseShares reads --shares: percentages 0..100, or none.
func parseShares(v string) ([]float64, error) {
	if strings.TrimSpace(v) == "none" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > 100 {
		return nil, fmt.Errorf("%d shares: want at most 100", len(parts))
	}
	out := make([]float64, 0, len(parts))
	for _, p := range parts {
		x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(x >= 0 && x <= 100) {
			return nil, fmt.Errorf("share %q: want a percentage 0..100 (or none)", p)
		}
		out = append(out, x/100)
	}
	return out, nil
}

// loadTraceSource reads the job list or the trace o names, and what to
// call it; a job list prints its jobs.
func loadTraceSource(o *traceOptions) (trace.Trace, string, error) {
	if o.jobs != "" {
		o.perJob = true
		tr, err := trace.LoadJobs(o.jobs)
		return tr, o.jobs, err
	}
	if o.dir != "" {
		tr, err := trace.LoadAlibaba(os.DirFS(o.dir))
		return tr, o.dir, err
	}
	tr, err := trace.LoadAlibaba(trace.Alibaba())
	return tr, trace.AlibabaSource, err
}

// printTrace writes the run's header, its per-policy table and its
// per-class one (and the jobs, with --per-job).
func printTrace(w io.Writer, o traceOptions, tr trace.Trace, source string, c trace.Comparison) {
	m := o.model
	fmt.Fprintf(w, "%s: %d GPU tasks (%d finished within the trace), %d CPU-only tasks; %d nodes, %.0f cores, %.0f GPUs\n",
		source, len(tr.Tasks), c.Static.Jobs, len(tr.Cluster.Other), tr.Cluster.Nodes, tr.Cluster.Cores, tr.Cluster.GPUs)
	fmt.Fprintf(w, "model: trainer %.0f samples/s per GPU (sigma %.2f), %.0f samples/s per core (sigma %.2f), %.0f host cores per GPU, lendable %.2f, replicas of %.0f cores, cold start %v, seed %d\n",
		m.TrainerPerGPU, m.TrainerSigma, m.PerCore, m.PerCoreSigma, m.HostCoresPerGPU, m.Lendable, m.ReplicaCores, m.ColdStart, m.Seed)
	if m.QueueGPUs > 0 {
		fmt.Fprintf(w, "schedule: first come, first served on %d GPUs (completion times count the wait)\n", m.QueueGPUs)
	} else {
		fmt.Fprintln(w, "schedule: the trace's start times")
	}
	fmt.Fprintf(w, "input-bound under static (data loader cores slower than the trainer): %.1f%% of the tasks", 100*c.InputBound)
	if c.BoundSlowdown > 0 {
		fmt.Fprintf(w, "; static trains them a median %.2fx slower than their trainers could", c.BoundSlowdown)
	}
	fmt.Fprint(w, "\n\n")
	trace.PrintComparison(w, c)
	fmt.Fprintln(w)
	trace.PrintClasses(w, c)
	if o.perJob {
		fmt.Fprintln(w)
		trace.PrintJobs(w, c)
	}
}

// traceRatios are one class's ratios in the JSON output; nil where the
// class has no tasks.
type traceRatios struct {
	Jobs                 int           `json:"jobs"`
	JCTRatio             *float64      `json:"jct_ratio"`
	UtilRatio            *float64      `json:"util_ratio"`
	CoreRatio            *float64      `json:"core_ratio"`
	FairJCTRatio         *float64      `json:"fair_jct_ratio"`
	FairUtilRatio        *float64      `json:"fair_util_ratio"`
	Static               trace.Summary `json:"static"`
	Sluice               trace.Summary `json:"sluice"`
	Fair                 trace.Summary `json:"fair"`
	MedianStaticSlowdown float64       `json:"median_static_slowdown,omitempty"`
	InputBoundShare      *float64      `json:"input_bound_share,omitempty"`
	InputBoundShareAsked *float64      `json:"input_bound_share_asked,omitempty"`
}

func ratios(s trace.Summaries) traceRatios {
	return traceRatios{Jobs: s.Static.Jobs, JCTRatio: finite(s.JCTRatio()), UtilRatio: finite(s.UtilRatio()), CoreRatio: finite(s.CoreRatio()),
		FairJCTRatio: finite(s.FairJCTRatio()), FairUtilRatio: finite(s.FairUtilRatio()), Static: s.Static, Sluice: s.Sluice, Fair: s.Fair}
}

// finite is x, nil where JSON cannot hold it.
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func printTraceJSON(w io.Writer, source string, m trace.Model, c trace.Comparison, rows []trace.Row, shares []trace.ShareRow, wall time.Duration) error {
	type row struct {
		Param         string  `json:"param"`
		Value         string  `json:"value"`
		InputBound    float64 `json:"input_bound"`
		JCTRatio      float64 `json:"jct_ratio"`
		UtilRatio     float64 `json:"util_ratio"`
		CoreRatio     float64 `json:"core_ratio"`
		FairJCTRatio  float64 `json:"fair_jct_ratio"`
		FairUtilRatio float64 `json:"fair_util_ratio"`
	}
	type shareRow struct {
		All        traceRatios `json:"all"`
		InputBound traceRatios `json:"input_bound"`
	}
	out := struct {
		Source      string                 `json:"source"`
		Model       traceModel             `json:"model"`
		Static      trace.Summary          `json:"static"`
		Sluice      trace.Summary          `json:"sluice"`
		Fair        trace.Summary          `json:"fair"`
		InputBound  float64                `json:"input_bound"`
		JCTRatio    float64                `json:"jct_ratio"`
		UtilRatio   float64                `json:"util_ratio"`
		CoreRatio   float64                `json:"core_ratio"`
		Classes     map[string]traceRatios `json:"classes"`
		Sensitivity []row                  `json:"sensitivity,omitempty"`
		Shares      []shareRow             `json:"shares,omitempty"`
		WallS       float64                `json:"wall_s"`
	}{Source: source, Model: modelJSON(m), Static: c.Static, Sluice: c.Sluice, Fair: c.Fair, InputBound: c.InputBound, JCTRatio: c.JCTRatio(),
		UtilRatio: c.UtilRatio(), CoreRatio: c.CoreRatio(), WallS: wall.Seconds(), Classes: classes(c)}
	for _, r := range rows {
		out.Sensitivity = append(out.Sensitivity, row{r.Param, r.Value, r.InputBound, r.JCTRatio(), r.UtilRatio(), r.CoreRatio(), r.FairJCTRatio(), r.FairUtilRatio()})
	}
	for _, r := range shares {
		cl := classes(r.Comparison)
		a := cl["all"]
		a.InputBoundShareAsked, a.InputBoundShare = finite(r.Share), finite(r.InputBound)
		out.Shares = append(out.Shares, shareRow{All: a, InputBound: cl["input_bound"]})
	}
	return printJSON(w, out)
}

// traceModel is trace.Model as the JSON output names it (durations in
// seconds).
type traceModel struct {
	TrainerPerGPU   float64 `json:"trainer_per_gpu"`
	TrainerSigma    float64 `json:"trainer_sigma"`
	PerCore         float64 `json:"per_core"`
	PerCoreSigma    float64 `json:"per_core_sigma"`
	HostCoresPerGPU float64 `json:"host_cores_per_gpu"`
	Lendable        float64 `json:"lendable"`
	ReplicaCores    float64 `json:"replica_cores"`
	ColdStartS      float64 `json:"cold_start_s"`
	BufferSamples   float64 `json:"buffer_samples"`
	ShardSamples    float64 `json:"shard_samples"`
	QueueGPUs       int     `json:"queue_gpus"`
	Seed            uint64  `json:"seed"`
}

func modelJSON(m trace.Model) traceModel {
	return traceModel{m.TrainerPerGPU, m.TrainerSigma, m.PerCore, m.PerCoreSigma, m.HostCoresPerGPU, m.Lendable,
		m.ReplicaCores, m.ColdStart.Seconds(), m.BufferSamples, m.ShardSamples, m.QueueGPUs, m.Seed}
}

// classes are c's ratios per class of tasks.
func classes(c trace.Comparison) map[string]traceRatios {
	b := ratios(c.Bound)
	b.MedianStaticSlowdown = c.BoundSlowdown
	return map[string]traceRatios{"all": ratios(c.Summaries), "input_bound": b}
}
