package cluster

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/sluice-project/sluice/loadtest/trace"
)

// Run is one simulation of the scenario: a policy, how sweeps are
// submitted and, under static allocation, each trial's data loader cores.
type Run struct {
	Policy      trace.Policy
	Sharing     Sharing
	StaticCores float64
}

// Name labels the run in tables and plots.
func (r Run) Name() string {
	if r.Policy == trace.Static {
		return fmt.Sprintf("static %g cores/trial", r.StaticCores)
	}
	return fmt.Sprintf("%s, %s", r.Policy, r.Sharing)
}

// Baseline says the run is one a platform team runs today, not Sluice's.
func (r Run) Baseline() bool { return r.Policy != trace.Sluice && r.Policy != trace.SluiceFair }

// DefaultRuns are every policy on the same arrivals: Sluice's allocators
// with shared and independent sweeps, and static allocation at each of
// staticCores per trial (a static data loader cannot share).
func DefaultRuns(staticCores []float64) []Run {
	var runs []Run
	for _, p := range []trace.Policy{trace.Sluice, trace.SluiceFair} {
		for _, sh := range []Sharing{Shared, Independent} {
			runs = append(runs, Run{Policy: p, Sharing: sh})
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
		tr := s.Trace(c.Sweeps, run.Sharing, run.StaticCores)
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

// Verdict sets one Sluice run beside the best baseline at its cost.
type Verdict struct {
	Sluice RunResult
	// Baseline names the best baseline at equal or fewer reserved
	// core-hours (static allocation interpolated between its points), and
	// StallGPUh its stall; Found is false when no baseline reserved as
	// little.
	Baseline  string
	StallGPUh float64
	Found     bool
}

// StallRatio is Sluice's stall over the baseline's (target: at most 0.5).
func (v Verdict) StallRatio() float64 {
	if v.StallGPUh == 0 {
		if v.Sluice.StallGPUh == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return v.Sluice.StallGPUh / v.StallGPUh
}

// Verdicts set each Sluice run beside the best baseline that reserved at
// most its core-hours.
func (c Comparison) Verdicts() []Verdict {
	var out []Verdict
	for _, r := range c.Results {
		if r.Baseline() {
			continue
		}
		v := Verdict{Sluice: r}
		v.Baseline, v.StallGPUh, v.Found = c.bestBaselineAt(r.ReservedCoreH)
		out = append(out, v)
	}
	return out
}

// bestBaselineAt is the baseline with the least stall among those that
// reserved at most coreH: each baseline run as a point, and static
// allocation as the line between its points (a mix of two core counts).
func (c Comparison) bestBaselineAt(coreH float64) (name string, stall float64, found bool) {
	limit := coreH * (1 + 1e-9)
	consider := func(n string, s float64) {
		if !found || s < stall {
			name, stall, found = n, s, true
		}
	}
	var static []RunResult
	for _, r := range c.Results {
		if !r.Baseline() {
			continue
		}
		if r.Policy == trace.Static {
			static = append(static, r)
		}
		if r.ReservedCoreH <= limit {
			consider(r.Name(), r.StallGPUh)
		}
	}
	sort.Slice(static, func(i, j int) bool { return static[i].ReservedCoreH < static[j].ReservedCoreH })
	for i := 1; i < len(static); i++ {
		a, b := static[i-1], static[i]
		if a.ReservedCoreH < coreH && coreH < b.ReservedCoreH {
			f := (coreH - a.ReservedCoreH) / (b.ReservedCoreH - a.ReservedCoreH)
			consider(fmt.Sprintf("static, %g-%g cores/trial interpolated", a.StaticCores, b.StaticCores),
				a.StallGPUh+f*(b.StallGPUh-a.StallGPUh))
		}
	}
	return name, stall, found
}
