package sweep

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Options size the sweep and say which runs to make.
type Options struct {
	// Command runs the sluice binary: its path and any leading arguments.
	// Env is added to its environment (the tests' way to make a test
	// binary act as sluice).
	Command []string
	Env     []string

	// Trials arrive over Arrival, evenly spread, the first at once; Seeds
	// distinct seeds go round-robin over them, so Trials/Seeds trials
	// share each job of a shared run.
	Trials  int
	Seeds   int
	Arrival time.Duration

	// The dataset: synthetic JPEGs of MinSide..MaxSide pixels, cut into
	// Shards; each trial reads it Epochs times in batches of BatchSize.
	Samples, Shards  int
	MinSide, MaxSide int
	Epochs           int
	BatchSize        int
	// StepTime is the simulated trainer's compute per step; the last
	// Lagging trials of each run compute LagFactor times longer (in a
	// shared run a lagging trial holds back the other trials of its job
	// once their agent's output buffer is full).
	StepTime  time.Duration
	Lagging   int
	LagFactor float64
	// OutputBufferBytes is each job's output buffer (0: the default).
	OutputBufferBytes int64

	// MaxReplicas is the controller's cap over all jobs; JobMaxReplicas
	// one job's.
	MaxReplicas    int
	JobMaxReplicas int

	// Runs are the runs to make, in order (see ParseCase).
	Runs []Case

	// KEDA and KPA settings of those runs.
	KEDAPolling      time.Duration
	KEDALagThreshold float64
	KPAWindow        time.Duration

	// SimColdStart is the replica cold start the simulator's prediction
	// of an independent Sluice run assumes.
	SimColdStart time.Duration

	// SampleEvery is how often replicas, their CPU and stalled trainers
	// are sampled.
	SampleEvery time.Duration
	// RunTimeout bounds one run.
	RunTimeout time.Duration
}

// Case is one policy over one way of submitting the trials.
type Case struct {
	Policy string // sluice, keda, kpa or static
	Static int    // replicas per job, for static
	// Independent: each trial its own job; otherwise they are a sweep.
	Independent bool
	// NoShed: the agents never shed a lagging trial (sluice agent
	// --max-lag-bytes -1), so a full output buffer holds every trial of a
	// job to the slowest one's pace.
	NoShed bool
	// Trials overrides Options.Trials and Seeds, where > 0.
	Trials, Seeds int
}

// Name is the run's label in reports: policy[:N][/independent][@trials].
func (r Case) Name() string {
	n := r.Policy
	if r.Policy == "static" {
		n += ":" + strconv.Itoa(r.Static)
	}
	if r.Independent {
		n += "/independent"
	}
	if r.NoShed {
		n += "/noshed"
	}
	if r.Trials > 0 {
		n += fmt.Sprintf("@%dx%d", r.Trials, r.Seeds)
	}
	return n
}

// ParseCase reads a run's Name back: "sluice", "keda", "kpa", "static:4",
// each optionally with "/independent", "/noshed" and "@TRIALSxSEEDS".
func ParseCase(s string) (Case, error) {
	var r Case
	rest := s
	if i := strings.IndexByte(rest, '@'); i >= 0 {
		if _, err := fmt.Sscanf(rest[i+1:], "%dx%d", &r.Trials, &r.Seeds); err != nil || r.Trials < 1 || r.Seeds < 1 || r.Seeds > r.Trials {
			return Case{}, fmt.Errorf("run %q: want @TRIALSxSEEDS, 1 <= seeds <= trials", s)
		}
		rest = rest[:i]
	}
	if p, ok := strings.CutSuffix(rest, "/noshed"); ok {
		r.NoShed, rest = true, p
	}
	if p, ok := strings.CutSuffix(rest, "/independent"); ok {
		r.Independent, rest = true, p
	}
	switch {
	case rest == "sluice" || rest == "keda" || rest == "kpa":
		r.Policy = rest
	case strings.HasPrefix(rest, "static:"):
		n, err := strconv.Atoi(rest[len("static:"):])
		if err != nil || n < 1 || n > 64 {
			return Case{}, fmt.Errorf("run %q: want static:N, N 1..64", s)
		}
		r.Policy, r.Static = "static", n
	default:
		return Case{}, fmt.Errorf("run %q: want sluice, keda, kpa or static:N, then /independent, /noshed, @TRIALSxSEEDS", s)
	}
	return r, nil
}

// DefaultOptions is the full sweep: 12 trials in 10 s over 3 seeds, each
// 2 epochs of 1,200 small images at 160 samples/s, under each policy;
// then the sharing target: 10 trials of one seed, shared against
// independent, under Sluice's policy. It takes some minutes on 2 cores.
func DefaultOptions() Options {
	runs := []Case{{Policy: "sluice"}, {Policy: "keda"}, {Policy: "kpa"}, {Policy: "static", Static: 2},
		{Policy: "sluice", Trials: 10, Seeds: 1}, {Policy: "sluice", Independent: true, Trials: 10, Seeds: 1}}
	return Options{
		Trials: 12, Seeds: 3, Arrival: 10 * time.Second,
		Samples: 1200, Shards: 24, MinSide: 320, MaxSide: 640, Epochs: 2, BatchSize: 16,
		StepTime: 100 * time.Millisecond, LagFactor: 4,
		MaxReplicas: 8, JobMaxReplicas: 4,
		Runs:        runs,
		KEDAPolling: 30 * time.Second, KEDALagThreshold: 10, KPAWindow: 60 * time.Second,
		SimColdStart: time.Second,
		SampleEvery:  250 * time.Millisecond,
		RunTimeout:   5 * time.Minute,
	}
}

// Validate names every option out of range.
func (o Options) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(len(o.Command) > 0, "command: want the sluice binary")
	check(o.Trials >= 1 && o.Trials <= 64, "trials %d: want 1..64", o.Trials)
	check(o.Seeds >= 1 && o.Seeds <= o.Trials, "seeds %d: want 1..trials", o.Seeds)
	check(o.Arrival >= 0 && o.Arrival <= time.Hour, "arrival %v: want 0..1h", o.Arrival)
	check(o.Samples >= 1 && o.Samples <= 1_000_000, "samples %d: want 1..1000000", o.Samples)
	check(o.Shards >= 1 && o.Shards <= o.Samples, "shards %d: want 1..samples", o.Shards)
	check(o.MinSide >= 8 && o.MaxSide >= o.MinSide && o.MaxSide <= 4096, "image sides %d..%d: want 8 <= min <= max <= 4096", o.MinSide, o.MaxSide)
	check(o.Epochs >= 1 && o.Epochs <= 100, "epochs %d: want 1..100", o.Epochs)
	check(o.BatchSize >= 1 && o.BatchSize <= 4096, "batch size %d: want 1..4096", o.BatchSize)
	check(o.StepTime >= 0 && o.StepTime <= time.Minute, "step time %v: want 0..1m", o.StepTime)
	check(o.Lagging >= 0 && o.Lagging <= o.Trials, "lagging %d: want 0..trials", o.Lagging)
	check(o.Lagging == 0 || (o.LagFactor >= 1 && o.LagFactor <= 100), "lag factor %v: want 1..100", o.LagFactor)
	check(o.OutputBufferBytes >= 0, "output buffer %d: want >= 0", o.OutputBufferBytes)
	check(o.MaxReplicas >= 1 && o.MaxReplicas <= 256, "max replicas %d: want 1..256", o.MaxReplicas)
	check(o.JobMaxReplicas >= 1 && o.JobMaxReplicas <= o.MaxReplicas, "job max replicas %d: want 1..max replicas", o.JobMaxReplicas)
	check(len(o.Runs) > 0, "runs: want at least one")
	check(o.KEDAPolling >= time.Second, "keda polling %v: want >= 1s", o.KEDAPolling)
	check(o.KEDALagThreshold > 0, "keda lag threshold %v: want > 0", o.KEDALagThreshold)
	check(o.KPAWindow >= 6*time.Second, "kpa window %v: want >= 6s", o.KPAWindow)
	check(o.SimColdStart >= 0 && o.SimColdStart <= time.Minute, "sim cold start %v: want 0..1m", o.SimColdStart)
	check(o.SampleEvery >= 10*time.Millisecond, "sample every %v: want >= 10ms", o.SampleEvery)
	check(o.RunTimeout >= time.Second, "run timeout %v: want >= 1s", o.RunTimeout)
	return errors.Join(errs...)
}

// trials and seeds of run r.
func (o Options) shape(r Case) (trials, seeds int) {
	if r.Trials > 0 {
		return r.Trials, r.Seeds
	}
	return o.Trials, o.Seeds
}
