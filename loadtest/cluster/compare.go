package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-project/sluice/loadtest/trace"
)

// Run is one simulation of the scenario: a policy, how sweeps are
// submitted and, under static allocation, each trial's data loader cores.
// MaxReplicas caps each job's replicas (0: none but the pool): the
// baselines' knob, the requests in flight a job's dispatcher keeps (the
// KPA scales to them) or a ScaledObject's maxReplicaCount.
type Run struct {
	Policy      trace.Policy
	Sharing     Sharing
	StaticCores float64
	MaxReplicas int
}

// Name labels the run in tables and plots.
func (r Run) Name() string {
	switch {
	case r.Policy == trace.Static:
		return fmt.Sprintf("static %g cores/trial", r.StaticCores)
	case r.MaxReplicas > 0:
		return fmt.Sprintf("%s, %s, <=%d/job", r.Policy, r.Sharing, r.MaxReplicas)
	}
	return fmt.Sprintf("%s, %s", r.Policy, r.Sharing)
}

// Baseline says the run is one a platform team runs today, not Sluice's.
func (r Run) Baseline() bool { return r.Policy != trace.Sluice && r.Policy != trace.SluiceFair }

// DefaultRuns are every policy on the same arrivals: Sluice's allocators
// and the KPA and KEDA baselines with shared and independent sweeps (the
// baselines also at each of caps replicas per job), and static allocation
// at each of staticCores per trial (a static data loader cannot share).
func DefaultRuns(staticCores []float64, caps []int) []Run {
	var runs []Run
	for _, p := range []trace.Policy{trace.Sluice, trace.SluiceFair, trace.KPA, trace.KEDA} {
		for _, sh := range []Sharing{Shared, Independent} {
			runs = append(runs, Run{Policy: p, Sharing: sh})
			if p != trace.KPA && p != trace.KEDA {
				continue
			}
			for _, n := range caps {
				runs = append(runs, Run{Policy: p, Sharing: sh, MaxReplicas: n})
			}
		}
	}
	for _, n := range staticCores {
		runs = append(runs, Run{Policy: trace.Static, Sharing: Independent, StaticCores: n})
	}
	return runs
}

// RunResult is one run's outcome over every trial.
type RunResult struct {
	Run
	trace.Summary
	// Trials counted (a shared job's readers each count once).
	Trials int
	// StallGPUh is the GPU-hours trainers waited for data; StallShare the
	// share of GPU time held that did (1 - Summary.GPUUtil).
	StallGPUh, StallShare float64
	// ReservedCoreH are the preprocessing core-hours the cluster
	// reserved: replicas (serving or starting) times their cores over
	// time under the pooled policies, the data loader cores a trial asked
	// for while it ran under static allocation. NeededCoreH is the work
	// itself: every sample's preprocessing, once per job.
	ReservedCoreH, NeededCoreH float64
	// FirstBatchS is the trials' mean time from getting their GPUs to
	// their first batch.
	FirstBatchS float64
	Result      trace.Result
}

// Comparison is every run over one draw of the scenario.
type Comparison struct {
	Scenario Scenario
	Model    trace.Model
	Sweeps   []Sweep
	Results  []RunResult
	Wall     time.Duration
}

// Model is the trace simulator's model for s: its trainers' own cores,
// replicas of one core that serve coldStart after they are asked for,
// the whole cluster's idle cores lendable, trials queued first come, first
// served for the cluster's GPUs.
func (s Scenario) Model(coldStart time.Duration) trace.Model {
	m := trace.DefaultModel()
	m.HostCoresPerGPU, m.Lendable, m.ReplicaCores, m.ColdStart = s.HostCoresPerGPU, 1, 1, coldStart
	m.QueueGPUs = s.Nodes * s.GPUsPerNode
	m.SampleEvery = 10 * time.Second
	return m
}

// Compare draws the scenario's sweeps once and simulates every run on them.
func Compare(ctx context.Context, s Scenario, m trace.Model, runs []Run) (Comparison, error) {
	if err := s.Validate(); err != nil {
		return Comparison{}, fmt.Errorf("scenario: %w", err)
	}
	start := time.Now()
	c := Comparison{Scenario: s, Model: m, Sweeps: s.Draw()}
	for _, run := range runs {
		tr := s.Trace(c.Sweeps, run)
		res, err := trace.Simulate(ctx, tr, trace.Prepare(tr, m), m, run.Policy)
		if err != nil {
			return c, fmt.Errorf("simulating %s: %w", run.Name(), err)
		}
		r := summarize(run, res)
		for _, t := range tr.Tasks {
			r.NeededCoreH += t.Samples * t.CPUPerSample / 3600
		}
		c.Results = append(c.Results, r)
	}
	c.Wall = time.Since(start)
	return c, nil
}

func summarize(run Run, res trace.Result) RunResult {
	r := RunResult{Run: run, Summary: res.Summarize(), Result: res}
	for _, j := range res.Jobs {
		if j.Censored {
			continue
		}
		r.Trials += j.Readers
		r.StallGPUh += j.Stall * j.GPUs / float64(j.Readers) / 3600
		r.FirstBatchS += j.FirstBatch * float64(j.Readers)
	}
	if r.Trials > 0 {
		r.FirstBatchS /= float64(r.Trials)
	}
	r.StallShare = 1 - r.GPUUtil
	r.ReservedCoreH = r.CoreHours
	return r
}
