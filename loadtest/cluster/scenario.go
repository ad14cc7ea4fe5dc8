package cluster

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Scenario is a GPU cluster and the bursty hyperparameter sweeps that
// arrive on it.
type Scenario struct {
	// Nodes of GPUsPerNode GPUs and CoresPerNode cores each.
	Nodes, GPUsPerNode int
	CoresPerNode       float64
	// Sweeps arrive over Window; each has TrialsMin..TrialsMax trials of
	// GPUsPerTrial GPUs, which start within TrialSpread of the sweep's
	// arrival (dozens at once).
	Sweeps, TrialsMin, TrialsMax, GPUsPerTrial int
	Window, TrialSpread                        time.Duration
	// BurstShare of the sweeps arrive in Bursts episodes (at times drawn
	// over Window), each spread over BurstSpread; the rest arrive as a
	// Poisson process over Window.
	BurstShare  float64
	Bursts      int
	BurstSpread time.Duration
	// A sweep's trials train TrialMin..TrialMax (uniform) at their
	// trainers' full rate: early-stopped trials of a few epochs.
	TrialMin, TrialMax time.Duration
	// TrainerPerGPU is the median samples/s one GPU's trainer eats,
	// PerCore the median samples/s one core preprocesses; each sweep
	// (one model, one input pipeline) draws both, log-normal with the
	// sigmas.
	TrainerPerGPU, TrainerSigma, PerCore, PerCoreSigma float64
	// HostCoresPerGPU are the cores a trainer keeps for its own loop.
	HostCoresPerGPU float64
	Seed            uint64
}

// DefaultScenario is docs/simulations.md's: 64 nodes of 8 GPUs, 50 sweeps of 8-16
// one-GPU trials over an hour, half of them in four bursts, trials of 5-30
// minutes. A current GPU trains a ResNet-50 at 1,000-3,000 images/s; the
// median here, 1,000 samples/s, with 449 samples/s per core (torchvision's
// ImageNet transform on one core, the trace simulator's default) needs
// about 2.2 cores per GPU, beyond the 1 a trainer keeps for its loop.
func DefaultScenario() Scenario {
	return Scenario{
		Nodes: 64, GPUsPerNode: 8, CoresPerNode: 96,
		Sweeps: 50, TrialsMin: 8, TrialsMax: 16, GPUsPerTrial: 1,
		Window: time.Hour, TrialSpread: 30 * time.Second,
		BurstShare: 0.5, Bursts: 4, BurstSpread: 2 * time.Minute,
		TrialMin: 5 * time.Minute, TrialMax: 30 * time.Minute,
		TrainerPerGPU: 1000, TrainerSigma: 0.5, PerCore: 449, PerCoreSigma: 0.3,
		HostCoresPerGPU: 1, Seed: 1,
	}
}

// Validate names every parameter out of range.
func (s Scenario) Validate() error {
	var errs []error
	count := func(name string, v, lo, hi int) {
		if v < lo || v > hi {
			errs = append(errs, fmt.Errorf("%s %d: want %d..%d", name, v, lo, hi))
		}
	}
	count("nodes", s.Nodes, 1, 100_000)
	count("gpus per node", s.GPUsPerNode, 1, 64)
	count("sweeps", s.Sweeps, 1, 100_000)
	count("trials min", s.TrialsMin, 1, 10_000)
	count("trials max", s.TrialsMax, s.TrialsMin, 10_000)
	count("gpus per trial", s.GPUsPerTrial, 1, s.GPUsPerNode)
	count("bursts", s.Bursts, 0, 10_000)
	positive := func(name string, v float64) {
		if !(v > 0) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("%s %v: want > 0", name, v))
		}
	}
	positive("cores per node", s.CoresPerNode)
	positive("trainer per gpu", s.TrainerPerGPU)
	positive("per core", s.PerCore)
	positive("window", s.Window.Seconds())
	positive("trial min", s.TrialMin.Seconds())
	if s.TrialMax < s.TrialMin {
		errs = append(errs, fmt.Errorf("trial max %v: want at least trial min %v", s.TrialMax, s.TrialMin))
	}
	if s.TrialSpread < 0 || s.BurstSpread < 0 {
		errs = append(errs, fmt.Errorf("spreads %v, %v: want >= 0", s.TrialSpread, s.BurstSpread))
	}
	if !(s.BurstShare >= 0 && s.BurstShare <= 1) {
		errs = append(errs, fmt.Errorf("burst share %v: want 0..1", s.BurstShare))
	}
	if s.BurstShare > 0 && s.Bursts == 0 {
		errs = append(errs, errors.New("burst share above 0 needs at least one burst"))
	}
	for name, v := range map[string]float64{"trainer sigma": s.TrainerSigma, "per core sigma": s.PerCoreSigma} {
		if !(v >= 0 && v <= 3) {
			errs = append(errs, fmt.Errorf("%s %v: want 0..3", name, v))
		}
	}
	if !(s.HostCoresPerGPU >= 0 && s.HostCoresPerGPU*float64(s.GPUsPerNode) <= s.CoresPerNode) {
		errs = append(errs, fmt.Errorf("host cores per gpu %v: want 0..cores per node / gpus per node", s.HostCoresPerGPU))
	}
	return errors.Join(errs...)
}

// Sweep is one drawn sweep: its trials' arrivals (s from the scenario's
// start, sorted), how long each trains at full speed, and its trainers'
// and pipeline's rates.
type Sweep struct {
	Name     string
	Arrivals []float64
	// TrainS is each trial's training time at its trainer's full rate.
	TrainS float64
	// TrainerRate is one trial's samples/s at full speed (all its GPUs);
	// CPUPerSample the CPU-seconds one sample's preprocessing costs.
	TrainerRate, CPUPerSample float64
}

// Draw draws the scenario's sweeps from its seed: the same scenario always
// gives the same sweeps, so every policy runs on the same arrivals.
func (s Scenario) Draw() []Sweep {
	rng := rand.New(rand.NewPCG(s.Seed, 0x5eed))
	window := s.Window.Seconds()
	bursts := make([]float64, s.Bursts)
	for i := range bursts {
		bursts[i] = rng.Float64() * window
	}
	nBurst := int(math.Round(s.BurstShare * float64(s.Sweeps)))
	starts := make([]float64, 0, s.Sweeps)
	for i := range nBurst {
		at := bursts[i%len(bursts)] + rng.Float64()*s.BurstSpread.Seconds()
		starts = append(starts, at)
	}
	// Poisson: exponential gaps at the rate that fills the window.
	rate := float64(s.Sweeps-nBurst) / window
	for t := 0.0; len(starts) < s.Sweeps; {
		t += rng.ExpFloat64() / rate
		if t > window {
			t = rng.Float64() * window // a rare overflow lands anywhere
		}
		starts = append(starts, t)
	}
	sort.Float64s(starts)
	logn := func(median, sigma float64) float64 { return median * math.Exp(sigma*rng.NormFloat64()) }
	out := make([]Sweep, len(starts))
	for i, at := range starts {
		n := s.TrialsMin + rng.IntN(s.TrialsMax-s.TrialsMin+1)
		sw := Sweep{
			Name:         fmt.Sprintf("sweep-%03d", i),
			TrainS:       s.TrialMin.Seconds() + rng.Float64()*(s.TrialMax-s.TrialMin).Seconds(),
			TrainerRate:  float64(s.GPUsPerTrial) * logn(s.TrainerPerGPU, s.TrainerSigma),
			CPUPerSample: 1 / logn(s.PerCore, s.PerCoreSigma),
		}
		for range n {
			sw.Arrivals = append(sw.Arrivals, at+rng.Float64()*s.TrialSpread.Seconds())
		}
		sort.Float64s(sw.Arrivals)
		out[i] = sw
	}
	return out
}

// Trials counts the sweeps' trials.
func Trials(sweeps []Sweep) int {
	n := 0
	for _, sw := range sweeps {
		n += len(sw.Arrivals)
	}
	return n
}
