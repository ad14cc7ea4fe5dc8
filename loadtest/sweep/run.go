package sweep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/jobspec"
	"github.com/sluice-project/sluice/planner"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

const (
	bucket = "data"
	prefix = "sweep/"
	// s3Key and s3Secret are what the processes present to the embedded
	// S3, which takes any.
	s3Key, s3Secret = "sluice", "sluice-loadtest-secret"
	// drainWithin bounds the wait, after the last trainer finished, for
	// every job to end and its replicas to exit.
	drainWithin = time.Minute
)

// Run makes every run of o and reports them. progress, when not nil, gets
// a line as each run starts and ends.
func Run(ctx context.Context, o Options, logger *slog.Logger, progress func(string)) (Report, error) {
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if progress == nil {
		progress = func(string) {}
	}
	s3srv, err := embedded.StartS3("")
	if err != nil {
		return Report{}, err
	}
	defer s3srv.Close()
	shards, err := synth.Images(synth.ImageOptions{Samples: o.Samples, Shards: o.Shards, Seed: 1,
		MinSide: o.MinSide, MaxSide: o.MaxSide, Quality: 85, Classes: 10})
	if err != nil {
		return Report{}, fmt.Errorf("generating the dataset: %w", err)
	}
	s3c, err := s3Client(ctx, s3srv.Endpoint())
	if err != nil {
		return Report{}, err
	}
	if err := synth.Upload(ctx, s3c, bucket, prefix, shards); err != nil {
		return Report{}, err
	}
	rate, err := perReplicaRate(ctx, shards, time.Second)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Trials: o.Trials, Seeds: o.Seeds, ArrivalS: o.Arrival.Seconds(), Samples: o.Samples, Shards: o.Shards,
		Epochs: o.Epochs, BatchSize: o.BatchSize, StepS: o.StepTime.Seconds(), PerReplicaRate: rate,
		TrainerRate: trainerRate(o), MaxReplicas: o.MaxReplicas, JobMaxReplicas: o.JobMaxReplicas}
	logger.Info("dataset written", "samples", o.Samples, "shards", o.Shards, "per_replica_samples_per_s", rate)
	for _, r := range o.Runs {
		if r.Independent && r.Policy == "sluice" && rep.ReplicaServedRate == 0 {
			progress("one replica's end-to-end rate: measuring")
			if rep.ReplicaServedRate, err = servedRate(ctx, o, s3srv.Endpoint(), s3c, rate, logger); err != nil {
				return rep, err
			}
			progress(fmt.Sprintf("one replica's end-to-end rate: %.0f samples/s", rep.ReplicaServedRate))
		}
		progress(fmt.Sprintf("run %s: starting", r.Name()))
		res, err := runOne(ctx, o, r, s3srv.Endpoint(), s3c, rate, logger.With("run", r.Name()))
		if err != nil {
			return rep, fmt.Errorf("run %s: %w", r.Name(), err)
		}
		if r.Independent && r.Policy == "sluice" && len(res.Errors) == 0 {
			tr, err := JobList(rep, res, runtime.NumCPU(), o.OutputBufferBytes)
			if err == nil {
				res.SimJobs = &tr
				res.PredictedStallS, err = predictStall(ctx, tr, SimModel(rep, tr, o.SimColdStart))
			}
			if err != nil {
				return rep, fmt.Errorf("run %s: simulating it: %w", r.Name(), err)
			}
		}
		progress(fmt.Sprintf("run %s: %.0f s, stall %.1f s, replica cpu %.1f s", r.Name(), res.WallS, res.StallS, res.ReplicaCPUS))
		rep.Runs = append(rep.Runs, res)
	}
	return rep, nil
}

// trainerRate is one simulated trainer's samples per second when never
// stalled.
func trainerRate(o Options) float64 {
	if o.StepTime <= 0 {
		return 0
	}
	return float64(o.BatchSize) / o.StepTime.Seconds()
}

func s3Client(ctx context.Context, endpoint string) (*s3.Client, error) {
	cfg := objstore.Config{Endpoint: endpoint, PathStyle: true}
	cfg.Credentials = credentials.NewStaticCredentialsProvider(s3Key, s3Secret, "")
	return objstore.NewClient(ctx, cfg, nil)
}

// plannedTrial is one trial of a run: its reader, job and arrival.
type plannedTrial struct {
	name, job string
	seed      uint64
	at        time.Duration
}

// runOne makes one run on a NATS server of its own.
func runOne(ctx context.Context, o Options, r Case, s3Endpoint string, s3c *s3.Client, rate float64, logger *slog.Logger) (RunResult, error) {
	ctx, cancel := context.WithTimeout(ctx, o.RunTimeout)
	defer cancel()
	nsrv, err := embedded.StartNATS(embedded.NATSOptions{})
	if err != nil {
		return RunResult{}, err
	}
	defer nsrv.Shutdown()
	conn := connect.Default()
	conn.NATS.URLs = []string{nsrv.URL()}
	nc, js, err := conn.ConnectNATS(ctx, "sluice-loadtest", logger)
	if err != nil {
		return RunResult{}, err
	}
	defer nc.Close()
	b := broker.New(js, s3c, conn.Streams(), logger).WithSpecCheck(jobspec.Check)

	ctl, stopCtl, err := startController(ctx, o, r, nsrv.URL(), s3Endpoint)
	if err != nil {
		return RunResult{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			stopCtl(0)
		}
	}()
	plan, trials, seeds := o.planTrials(r)
	spec, prewarm := o.sweepSpec(r, rate)
	start := time.Now()
	var jobs []string
	if !r.Independent {
		if jobs, err = submitShared(ctx, b, spec, prewarm, plan); err != nil {
			return RunResult{}, err
		}
	}
	res := RunResult{Name: r.Name(), Policy: r.Policy, Independent: r.Independent, TrialsN: trials, Seeds: seeds}
	trainers, independent := newTrainers(o, r, plan)
	jobs = append(jobs, independent...)
	cpu := newChildCPU(ctl.Process.Pid)
	cpuBefore := processCPU()
	stopSampling := sample(ctx, o.SampleEvery, cpu, trainers, start, &res)
	if err := runTrials(ctx, o, r, b, spec, prewarm, plan, trainers, nsrv.URL(), start); err != nil {
		stopSampling()
		return RunResult{}, err
	}
	// The jobs end once every reader is done, and their replicas stop.
	drained := waitFor(ctx, drainWithin, func() bool {
		for _, id := range jobs {
			j, err := b.Job(ctx, id)
			if err != nil || !j.State.Terminal() {
				return false
			}
		}
		return cpu.sample() == 0
	})
	res.WallS = time.Since(start).Seconds()
	stopSampling()
	if err := collect(ctx, b, jobs, &res); err != nil {
		return RunResult{}, err
	}
	if !drained {
		res.Errors = append(res.Errors, "jobs or replicas still there "+strconv.Itoa(int(drainWithin.Seconds()))+"s after the last trainer")
	}
	stopCtl(0)
	stopped = true
	cpu.sample()
	res.ReplicaCPUS = cpu.seconds()
	res.OtherCPUS = max(processCPU()-cpuBefore-res.ReplicaCPUS, 0)
	for _, t := range trainers {
		res.Trials = append(res.Trials, t.result())
	}
	res.summarize()
	return res, nil
}

// planTrials names run r's trials, their seeds (round-robin) and their
// arrivals, spread evenly over Options.Arrival.
func (o Options) planTrials(r Case) (plan []plannedTrial, trials, seeds int) {
	trials, seeds = o.shape(r)
	plan = make([]plannedTrial, trials)
	for i := range plan {
		plan[i] = plannedTrial{name: fmt.Sprintf("t%02d", i), seed: uint64(1 + i%seeds),
			at: time.Duration(int64(o.Arrival) * int64(i) / int64(trials))}
	}
	return plan, trials, seeds
}

// sweepSpec is run r's sweep and the planner that pre-warms its jobs
// (Sluice's from rate, a replica's samples/s; the others' at their min).
func (o Options) sweepSpec(r Case, rate float64) (wire.SweepSpec, broker.Planner) {
	var prewarm broker.Planner = planner.MinReplicas{}
	if r.Policy == "sluice" {
		prewarm = planner.ByRate{PerReplica: func(context.Context, wire.JobSpec) (float64, error) { return rate, nil }}
	}
	minReplicas, maxReplicas := 0, o.JobMaxReplicas
	if r.Policy == "static" {
		minReplicas, maxReplicas = r.Static, r.Static
	}
	spec := wire.SweepSpec{ID: "sw", Dataset: "s3://" + bucket + "/" + prefix, Pipeline: Pipeline, BatchSize: o.BatchSize,
		Epochs: o.Epochs, MinReplicas: minReplicas, MaxReplicas: maxReplicas, TrainerRate: trainerRate(o),
		OutputBufferBytes: o.OutputBufferBytes}
	if o.OutputBufferBytes > 0 {
		// A small buffer needs small chunks: a job's buffer holds at least four.
		spec.ChunkMaxBytes = int(max(64<<10, o.OutputBufferBytes/8))
	}
	return spec, prewarm
}

// submitShared submits the plan's trials as one sweep at once and notes
// each trial's job; it returns the jobs.
func submitShared(ctx context.Context, b *broker.Broker, spec wire.SweepSpec, prewarm broker.Planner, plan []plannedTrial) ([]string, error) {
	for _, p := range plan {
		seed := p.seed
		spec.Trials = append(spec.Trials, wire.Trial{Name: p.name, Seed: &seed})
	}
	sw, err := b.SubmitSweep(ctx, spec, prewarm)
	if err != nil {
		return nil, err
	}
	var jobs []string
	for _, j := range sw.Jobs {
		jobs = append(jobs, j.ID)
		for _, name := range j.Trials {
			for i := range plan {
				if plan[i].name == name {
					plan[i].job = j.ID
				}
			}
		}
	}
	return jobs, nil
}

// newTrainers makes the plan's trainers, the last Options.Lagging of them
// lagging, and one agent per job serving every trial of it; it returns
// the independent jobs (one per trial) too.
func newTrainers(o Options, r Case, plan []plannedTrial) (trainers []*trainer, jobs []string) {
	trainers = make([]*trainer, len(plan))
	for i, p := range plan {
		trainers[i] = &trainer{name: p.name, job: p.job, stepTime: o.StepTime, expected: int64(o.Samples * o.Epochs)}
		if i >= len(plan)-o.Lagging {
			trainers[i].lagging = true
			trainers[i].stepTime = time.Duration(float64(o.StepTime) * o.LagFactor)
		}
		if r.Independent {
			trainers[i].name, trainers[i].job = wire.DefaultReader, "tr-"+p.name
			jobs = append(jobs, trainers[i].job)
		}
	}
	agents := map[string]*jobAgent{}
	for _, t := range trainers {
		if agents[t.job] == nil {
			n := 0
			for _, u := range trainers {
				if u.job == t.job {
					n++
				}
			}
			agents[t.job] = newJobAgent(t.job, n, r.NoShed)
		}
		t.agent = agents[t.job]
	}
	return trainers, jobs
}

// sample adds a point to res's timeline every interval (the live
// replicas, the active and stalled trainers) until stop is called.
func sample(ctx context.Context, every time.Duration, cpu *childCPU, trainers []*trainer, start time.Time, res *RunResult) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			pt := Point{T: time.Since(start).Seconds(), Replicas: cpu.sample()}
			for _, t := range trainers {
				if t.started.Load() && !t.done.Load() {
					pt.Active++
					if t.waiting.Load() {
						pt.Stalled++
					}
				}
			}
			res.Timeline = append(res.Timeline, pt)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); sampled.Wait() }
}

// runTrials runs every trainer from its arrival (submitting its own job
// first when independent) to its end.
func runTrials(ctx context.Context, o Options, r Case, b *broker.Broker, spec wire.SweepSpec, prewarm broker.Planner,
	plan []plannedTrial, trainers []*trainer, natsURL string, start time.Time) error {
	var wg sync.WaitGroup
	var submitErr error
	var submitMu sync.Mutex
	for i, p := range plan {
		t := trainers[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(time.Until(start.Add(p.at))):
			case <-ctx.Done():
				return
			}
			if r.Independent {
				if err := submitIndependent(ctx, b, spec, prewarm, t.job, p.seed); err != nil {
					submitMu.Lock()
					submitErr = errors.Join(submitErr, fmt.Errorf("submitting %s: %w", t.job, err))
					submitMu.Unlock()
					return
				}
			}
			t.run(ctx, o, natsURL, start)
		}()
	}
	wg.Wait()
	return submitErr
}

// submitIndependent submits one trial's own job, pre-warmed.
func submitIndependent(ctx context.Context, b *broker.Broker, spec wire.SweepSpec, prewarm broker.Planner, job string, seed uint64) error {
	js := wire.JobSpec{ID: job, Dataset: spec.Dataset, Pipeline: spec.Pipeline, BatchSize: spec.BatchSize,
		Epochs: spec.Epochs, Seed: seed, MinReplicas: spec.MinReplicas, MaxReplicas: spec.MaxReplicas,
		OutputBufferBytes: spec.OutputBufferBytes, ChunkMaxBytes: spec.ChunkMaxBytes}
	n, err := prewarm.Replicas(ctx, js, spec.TrainerRate)
	if err != nil {
		return err
	}
	js.InitialReplicas = n
	_, err = b.Submit(ctx, js)
	return err
}

// collect counts the jobs' shard tasks into res and notes those that did
// not succeed.
func collect(ctx context.Context, b *broker.Broker, jobs []string, res *RunResult) error {
	for _, id := range jobs {
		j, st, err := b.Status(ctx, id)
		if err != nil {
			return err
		}
		res.Jobs++
		res.ShardTasks += st.Tasks.Done + st.Tasks.Failed + st.Tasks.Redeliveries
		res.ShardTasksNeeded += j.Tasks()
		if j.State != wire.JobSucceeded {
			res.Errors = append(res.Errors, fmt.Sprintf("job %s %s %s", id, j.State, j.Reason))
		}
	}
	return nil
}

// startController runs the controller for run r: `sluice loadtest
// controller`, the production controller with the baselines' flags.
func startController(ctx context.Context, o Options, r Case, natsURL, s3Endpoint string) (*exec.Cmd, func(time.Duration), error) {
	args := append(append([]string{}, o.Command[1:]...), "loadtest", "controller", "--id", "loadtest",
		"--nats", natsURL, "--s3-endpoint", s3Endpoint, "--listen", "127.0.0.1:0",
		"--max-replicas", strconv.Itoa(o.MaxReplicas), "--tick", "500ms", "--log-level", "warn")
	switch r.Policy {
	case "keda":
		args = append(args, "--local-scaling", "keda", "--keda-polling-interval", o.KEDAPolling.String(),
			"--keda-lag-threshold", strconv.FormatFloat(o.KEDALagThreshold, 'g', -1, 64))
	case "kpa":
		args = append(args, "--local-scaling", "kpa", "--kpa-window", o.KPAWindow.String())
	}
	cmd := exec.Command(o.Command[0], args...)
	cmd.Env = append(append(os.Environ(), o.Env...), "AWS_ACCESS_KEY_ID="+s3Key, "AWS_SECRET_ACCESS_KEY="+s3Secret)
	cmd.Stderr = os.Stderr
	_, stop, err := startReady(ctx, cmd, "controller")
	if err != nil {
		return nil, nil, err
	}
	return cmd, stop, nil
}

// waitFor polls cond until it holds or within passes.
func waitFor(ctx context.Context, within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
	return cond()
}
