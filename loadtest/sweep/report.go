package sweep

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/sluice-project/sluice/loadtest/trace"
)

// Report is every run of one `sluice loadtest sweep`.
type Report struct {
	Trials         int     `json:"trials"`
	Seeds          int     `json:"seeds"`
	ArrivalS       float64 `json:"arrival_s"`
	Samples        int     `json:"samples"`
	Shards         int     `json:"shards"`
	Epochs         int     `json:"epochs"`
	BatchSize      int     `json:"batch_size"`
	StepS          float64 `json:"step_s"`
	TrainerRate    float64 `json:"trainer_samples_per_s"`
	PerReplicaRate float64 `json:"per_replica_samples_per_s"`
	// ReplicaServedRate is what one replica delivered end to end to a
	// trainer that never computes (measured where a run is simulated).
	ReplicaServedRate float64     `json:"replica_served_samples_per_s,omitempty"`
	MaxReplicas       int         `json:"max_replicas"`
	JobMaxReplicas    int         `json:"job_max_replicas"`
	Runs              []RunResult `json:"runs"`
}

// Point is one sample of a run's timeline.
type Point struct {
	T        float64 `json:"t"`
	Replicas int     `json:"replicas"`
	// Active trainers had arrived and not finished; Stalled of them were
	// waiting for a batch.
	Active  int `json:"active"`
	Stalled int `json:"stalled"`
}

// RunResult is one run: its policy's cost and what its trainers saw.
type RunResult struct {
	Name        string  `json:"name"`
	Policy      string  `json:"policy"`
	Independent bool    `json:"independent"`
	TrialsN     int     `json:"trials"`
	Seeds       int     `json:"seeds"`
	Jobs        int     `json:"jobs"`
	WallS       float64 `json:"wall_s"`
	// ReplicaCPUS is the CPU the replicas used; ReservedCoreS the cores
	// they reserved: live replica processes (starting ones included) x
	// their cores (one each) x time, from the timeline. On one machine the
	// used CPU is the same fixed work under every policy; what a cluster
	// pays is the reserved cores.
	ReplicaCPUS   float64 `json:"replica_cpu_s"`
	ReservedCoreS float64 `json:"reserved_core_s"`
	// OtherCPUS is what every other process of the run used: NATS, S3,
	// the trainers (this process), the controller and the agents (which
	// send the tasks and receive the output).
	OtherCPUS float64 `json:"other_cpu_s"`
	// SimJobs is the run as the trace simulator's job list (JobList) and
	// PredictedStallS the stall the simulator predicts for it, where the
	// simulator can run it.
	SimJobs         *trace.Trace `json:"sim_jobs,omitempty"`
	PredictedStallS float64      `json:"predicted_stall_s,omitempty"`
	PeakReplicas    int          `json:"peak_replicas"`
	// StallS is every trainer's stall added up; the others are over the
	// trials.
	StallS         float64 `json:"stall_s"`
	MeanFirstBatch float64 `json:"mean_first_batch_s"`
	MaxFirstBatch  float64 `json:"max_first_batch_s"`
	MeanDone       float64 `json:"mean_completion_s"`
	MaxDone        float64 `json:"max_completion_s"`
	// MeanDoneKeepingUp is the mean completion of the trials that do not
	// lag (all of them when none lags).
	MeanDoneKeepingUp float64 `json:"mean_completion_keeping_up_s"`
	// ShardTasks were run (redeliveries and replays included) against
	// ShardTasksNeeded: one per shard per epoch per job.
	ShardTasks       int `json:"shard_tasks"`
	ShardTasksNeeded int `json:"shard_tasks_needed"`
	// Duplicates and Missing are over every trial: both must be 0.
	Duplicates int64         `json:"duplicates"`
	Missing    int64         `json:"missing"`
	Errors     []string      `json:"errors,omitempty"`
	Trials     []TrialResult `json:"trial_results"`
	Timeline   []Point       `json:"timeline"`
}

func (r *RunResult) summarize() {
	n := float64(max(len(r.Trials), 1))
	keeping := 0
	for _, t := range r.Trials {
		if !t.Lagging {
			r.MeanDoneKeepingUp += t.DoneS
			keeping++
		}
		r.StallS += t.StallS
		r.MeanFirstBatch += t.FirstBatchS / n
		r.MaxFirstBatch = max(r.MaxFirstBatch, t.FirstBatchS)
		r.MeanDone += t.DoneS / n
		r.MaxDone = max(r.MaxDone, t.DoneS)
		r.Duplicates += t.Duplicates
		r.Missing += t.Missing
		if t.Err != "" {
			r.Errors = append(r.Errors, fmt.Sprintf("trial %s: %s", t.Name, t.Err))
		}
	}
	r.MeanDoneKeepingUp /= float64(max(keeping, 1))
	for i, p := range r.Timeline {
		r.PeakReplicas = max(r.PeakReplicas, p.Replicas)
		if i > 0 {
			r.ReservedCoreS += float64(r.Timeline[i-1].Replicas) * (p.T - r.Timeline[i-1].T)
		}
	}
}

// Print writes the report as tables: one row per run, then the sharing
// target where the report has a shared and an independent run of the
// same shape under one policy.
func (rep Report) Print(w io.Writer) {
	fmt.Fprintf(w, "sweep: %d trials over %.0f s (%d seeds), %d samples x %d epochs each, batch %d, step %.0f ms (%.0f samples/s per trainer); one replica %.0f samples/s; cap %d replicas, %d per job\n\n",
		rep.Trials, rep.ArrivalS, rep.Seeds, rep.Samples, rep.Epochs, rep.BatchSize, rep.StepS*1000, rep.TrainerRate, rep.PerReplicaRate, rep.MaxReplicas, rep.JobMaxReplicas)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tjobs\tstall s\treplica cpu s\treserved core s\tpeak replicas\tfirst batch s (mean/max)\tcompletion s (mean/max)\tkeeping up s\tshard tasks\tdup/missing\twall s\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%d\t%.1f / %.1f\t%.1f / %.1f\t%.1f\t%d/%d\t%d/%d\t%.0f\t\n", r.Name, r.Jobs, r.StallS, r.ReplicaCPUS, r.ReservedCoreS, r.PeakReplicas,
			r.MeanFirstBatch, r.MaxFirstBatch, r.MeanDone, r.MaxDone, r.MeanDoneKeepingUp, r.ShardTasks, r.ShardTasksNeeded, r.Duplicates, r.Missing, r.WallS)
	}
	_ = tw.Flush()
	for _, r := range rep.Runs {
		for _, e := range r.Errors {
			fmt.Fprintf(w, "run %s: %s\n", r.Name, e)
		}
	}
	for _, r := range rep.Runs {
		if r.SimJobs != nil {
			fmt.Fprintf(w, "\nsimulator, run %s (%d jobs on %.2f cores for replicas, %.4f CPU-s per sample, one replica %.0f samples/s end to end): predicted stall %.1f s vs %.1f s measured = %.2fx (target within 20%%)\n",
				r.Name, len(r.SimJobs.Tasks), r.SimJobs.Cluster.Cores, r.SimJobs.Tasks[0].CPUPerSample, rep.ReplicaServedRate, r.PredictedStallS, r.StallS, r.PredictedStallS/max(r.StallS, 1e-9))
		}
	}
	for _, pair := range rep.SharingPairs() {
		s, i := pair[0], pair[1]
		fmt.Fprintf(w, "\nsharing, %d trials, %s policy: replica cpu %.1f s shared vs %.1f s independent = %.2fx (target <= 0.2x); stall %.1f s vs %.1f s\n",
			s.TrialsN, s.Policy, s.ReplicaCPUS, i.ReplicaCPUS, s.ReplicaCPUS/max(i.ReplicaCPUS, 1e-9), s.StallS, i.StallS)
	}
}

// SharingPairs are the (shared, independent) runs of the same policy and
// shape.
func (rep Report) SharingPairs() [][2]RunResult {
	var out [][2]RunResult
	for _, s := range rep.Runs {
		if s.Independent {
			continue
		}
		i := slices.IndexFunc(rep.Runs, func(r RunResult) bool {
			return r.Independent && r.Policy == s.Policy && r.TrialsN == s.TrialsN && r.Seeds == s.Seeds
		})
		if i >= 0 {
			out = append(out, [2]RunResult{s, rep.Runs[i]})
		}
	}
	return out
}
