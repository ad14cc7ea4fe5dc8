package sweep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-project/sluice/loadtest/trace"
)

// The trace simulator's calibration check: a run of independent jobs
// under Sluice's policy, described by what the run measured, is simulated
// with the real autoscale policy and allocator, and the stall it predicts
// is set beside the stall the trainers measured.

// sampleBytes is one preprocessed sample of Pipeline: 32x32x3 bytes.
const sampleBytes = 32 * 32 * 3

// JobList describes run r as the simulator's job list, or says why it
// cannot: only a run of independent jobs (one reader each) under Sluice's
// policy is what the simulator simulates. The figures are the run's own:
// each trial arrives when it did, its trainer eats its samples at the
// rate it computed them (samples over compute seconds), one sample costs
// the replica CPU-seconds the run used per sample made, and the replicas
// have the machine's cores less what every other process of the run (NATS,
// S3, controller, agents, trainers) used on average while trainers ran.
func JobList(rep Report, r RunResult, cores int, bufferBytes int64) (trace.Trace, error) {
	if !r.Independent || r.Policy != "sluice" {
		return trace.Trace{}, fmt.Errorf("run %s: the simulator runs independent jobs under Sluice's policy only", r.Name)
	}
	made := float64(r.Jobs * rep.Samples * rep.Epochs)
	busy := 0.0
	for _, t := range r.Trials {
		busy = max(busy, t.StartS+t.DoneS)
	}
	if made == 0 || busy == 0 || r.ReplicaCPUS == 0 {
		return trace.Trace{}, fmt.Errorf("run %s: no samples, time or replica CPU measured", r.Name)
	}
	if bufferBytes == 0 {
		bufferBytes = 1 << 30 // a job's default output buffer
	}
	pool := float64(cores) - r.OtherCPUS/busy
	if pool <= 0.1 {
		return trace.Trace{}, fmt.Errorf("run %s: the other processes used %.1f of %d cores", r.Name, r.OtherCPUS/busy, cores)
	}
	tr := trace.Trace{Cluster: trace.Cluster{Cores: pool, MaxReplicas: rep.MaxReplicas}}
	for _, t := range r.Trials {
		if t.ComputeS <= 0 || t.Samples == 0 {
			return trace.Trace{}, fmt.Errorf("run %s: trial %s computed nothing", r.Name, t.Name)
		}
		tr.Tasks = append(tr.Tasks, trace.Task{Name: t.Job, Start: t.StartS, Arrival: t.StartS, GPUs: 1, Cores: 1,
			Samples: float64(rep.Samples * rep.Epochs), TrainerRate: float64(t.Samples) / t.ComputeS,
			CPUPerSample: r.ReplicaCPUS / made, HostCores: 0, MaxReplicas: rep.JobMaxReplicas, Readers: 1,
			BufferSamples: float64(bufferBytes / sampleBytes), ShardSamples: float64(rep.Samples) / float64(rep.Shards)})
	}
	return tr, nil
}

// SimModel is the model the prediction of run r uses beside its job
// list: replicas that serve coldStart after they are asked for, each
// using, while it works flat out, the share of a core that one replica's
// measured end-to-end rate costs at the run's CPU per sample (a replica
// also waits on S3 and on its agent reading the response).
func SimModel(rep Report, tr trace.Trace, coldStart time.Duration) trace.Model {
	m := trace.DefaultModel()
	m.HostCoresPerGPU, m.ColdStart = 0, coldStart
	if len(tr.Tasks) > 0 && rep.ReplicaServedRate > 0 {
		m.ReplicaCores = min(rep.ReplicaServedRate*tr.Tasks[0].CPUPerSample, 1)
	}
	return m
}

// servedRate runs one job on one replica, read by a trainer that never
// computes: the samples/s one replica delivers end to end (its shard
// fetches and its responses to the agent included), which the
// simulator's replicas serve at when their core is theirs.
func servedRate(ctx context.Context, o Options, s3Endpoint string, s3c *s3.Client, rate float64, logger *slog.Logger) (float64, error) {
	one := o
	one.StepTime, one.Lagging = 0, 0
	r := Case{Policy: "static", Static: 1, Independent: true, Trials: 1, Seeds: 1}
	res, err := runOne(ctx, one, r, s3Endpoint, s3c, rate, logger.With("run", "one replica"))
	if err != nil {
		return 0, fmt.Errorf("measuring one replica's rate: %w", err)
	}
	if len(res.Errors) > 0 || len(res.Trials) != 1 {
		return 0, fmt.Errorf("measuring one replica's rate: %v", res.Errors)
	}
	t := res.Trials[0]
	if d := t.DoneS - t.FirstBatchS; d > 0 && t.Samples > 0 {
		return float64(t.Samples) / d, nil
	}
	return 0, errors.New("measuring one replica's rate: no samples read")
}

// predictStall simulates the job list and returns the trainers' stall
// added up.
func predictStall(ctx context.Context, tr trace.Trace, m trace.Model) (float64, error) {
	res, err := trace.Simulate(ctx, tr, trace.Prepare(tr, m), m, trace.Sluice)
	if err != nil {
		return 0, err
	}
	stall := 0.0
	for _, j := range res.Jobs {
		stall += j.Stall
	}
	return stall, nil
}

// processCPU is the CPU-seconds this process and its reaped children
// used so far.
func processCPU() float64 {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	sec := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return sec(self.Utime) + sec(self.Stime) + sec(children.Utime) + sec(children.Stime)
}
