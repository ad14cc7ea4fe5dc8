package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sluice-project/sluice/loadtest/trace"
)

func runLoadtestTrace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("loadtest trace", stderr)
	dir := fs.String("data", "", "`directory` of the Alibaba PAI trace (openb_pod_list_default.csv, openb_node_list_gpu_node.csv; default: shared/data/alibaba-openb-2023 here or in the nearest parent)")
	jobs := fs.String("jobs", "", "a job list (YAML or JSON: cluster.cores and jobs with start_s, gpus, cores, samples[, trainer_rate, cpu_s_per_sample]) to simulate instead of the trace")
	sensitivity := fs.Bool("sensitivity", false, "also run the sensitivity table over the demand model's parameters")
	perJob := fs.Bool("per-job", false, "print every job's completion time and stall per policy (the default with --jobs)")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	m := trace.DefaultModel()
	fs.Float64Var(&m.TrainerPerGPU, "trainer-per-gpu", m.TrainerPerGPU, "median samples/s one GPU's trainer eats")
	fs.Float64Var(&m.TrainerSigma, "trainer-sigma", m.TrainerSigma, "sigma of the trainer rate's log-normal spread")
	fs.Float64Var(&m.PerCore, "per-core", m.PerCore, "median samples/s one core preprocesses (sluice bench ops: samples_per_s_per_core)")
	fs.Float64Var(&m.PerCoreSigma, "per-core-sigma", m.PerCoreSigma, "sigma of the per-core rate's log-normal spread")
	fs.Float64Var(&m.HostCoresPerGPU, "host-cores-per-gpu", m.HostCoresPerGPU, "cores a trainer keeps for its own loop, per GPU")
	fs.Float64Var(&m.Lendable, "lendable", m.Lendable, "share of the cluster's unrequested cores Sluice may pool (0..1)")
	fs.Float64Var(&m.ReplicaCores, "replica-cores", m.ReplicaCores, "cores of one function replica")
	fs.DurationVar(&m.ColdStart, "cold-start", m.ColdStart, "time a new replica takes to serve")
	fs.IntVar(&m.QueueGPUs, "queue-gpus", 0, "schedule the tasks first come, first served on a cluster of this many `GPUs` (pooled, the trace's cores per GPU) instead of replaying the trace's start times; completion times then count the wait")
	fs.Uint64Var(&m.Seed, "seed", m.Seed, "seed of the tasks' demand draws")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice loadtest trace [flags]\n\nSimulates the Alibaba PAI GPU cluster trace (or a job list) on virtual time: each GPU\n"+
			"task preprocesses on the CPUs it asked for (static) or on replicas that the real autoscale\n"+
			"policy and allocator size from a pool of the cluster's cores (Sluice). Prints mean job\n"+
			"completion time and GPU utilisation per policy, as ratios to static.\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args, func() error { return m.Validate() }); err != nil {
		return err
	}
	start := time.Now()
	var tr trace.Trace
	var err error
	source := *dir
	if *jobs != "" {
		tr, err = trace.LoadJobs(*jobs)
		source, *perJob = *jobs, true
	} else {
		if source == "" {
			if source, err = trace.AlibabaDir(); err != nil {
				return err
			}
		}
		tr, err = trace.LoadAlibaba(source)
	}
	if err != nil {
		return err
	}
	c, err := trace.Compare(ctx, tr, m)
	if err != nil {
		return err
	}
	var rows []trace.Row
	if *sensitivity {
		if rows, err = trace.Sensitivity(ctx, tr, m, trace.Variations()); err != nil {
			return err
		}
	}
	if *asJSON {
		type row struct {
			Param, Value                               string
			InputBound, JCTRatio, UtilRatio, CoreRatio float64
			FairJCTRatio, FairUtilRatio                float64
		}
		out := struct {
			Source                          string
			Model                           trace.Model
			Static, Sluice, Fair            trace.Summary
			InputBound, JCTRatio, UtilRatio float64
			CoreRatio                       float64
			Sensitivity                     []row `json:",omitempty"`
			WallS                           float64
		}{source, m, c.Static, c.Sluice, c.Fair, c.InputBound, c.JCTRatio(), c.UtilRatio(), c.CoreRatio(), nil, time.Since(start).Seconds()}
		for _, r := range rows {
			out.Sensitivity = append(out.Sensitivity, row{r.Param, r.Value, r.InputBound, r.JCTRatio(), r.UtilRatio(), r.CoreRatio(), r.FairJCTRatio(), r.FairUtilRatio()})
		}
		return printJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "%s: %d GPU tasks (%d finished within the trace), %d CPU-only tasks; %d nodes, %.0f cores, %.0f GPUs\n",
		source, len(tr.Tasks), c.Static.Jobs, len(tr.Cluster.Other), tr.Cluster.Nodes, tr.Cluster.Cores, tr.Cluster.GPUs)
	fmt.Fprintf(stdout, "model: trainer %.0f samples/s per GPU (sigma %.2f), %.0f samples/s per core (sigma %.2f), %.0f host cores per GPU, lendable %.2f, replicas of %.0f cores, cold start %v, seed %d\n",
		m.TrainerPerGPU, m.TrainerSigma, m.PerCore, m.PerCoreSigma, m.HostCoresPerGPU, m.Lendable, m.ReplicaCores, m.ColdStart, m.Seed)
	if m.QueueGPUs > 0 {
		fmt.Fprintf(stdout, "schedule: first come, first served on %d GPUs (completion times count the wait)\n", m.QueueGPUs)
	} else {
		fmt.Fprintln(stdout, "schedule: the trace's start times")
	}
	fmt.Fprintf(stdout, "input-bound under static: %.1f%% of the tasks\n\n", 100*c.InputBound)
	trace.PrintComparison(stdout, c)
	if *perJob {
		fmt.Fprintln(stdout)
		trace.PrintJobs(stdout, c)
	}
	if len(rows) > 0 {
		fmt.Fprintln(stdout)
		trace.PrintSensitivity(stdout, rows)
	}
	fmt.Fprintf(stdout, "\nsimulated in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}
