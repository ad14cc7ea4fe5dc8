package trace

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"
)

// Model is the preprocessing demand model every GPU task is given, and the
// assumptions of the comparison; see the package documentation for where
// each default comes from.
type Model struct {
	// TrainerPerGPU is the median samples/s one GPU's trainer eats at
	// full speed, TrainerSigma the sigma of its log-normal spread.
	TrainerPerGPU, TrainerSigma float64
	// PerCore is the median samples/s one core preprocesses, PerCoreSigma
	// the sigma of its log-normal spread (a task's CPU-seconds per sample
	// is 1/its draw).
	PerCore, PerCoreSigma float64
	// HostCoresPerGPU are the cores a trainer keeps for its own loop (at
	// most half its request); the rest of its request is its static data
	// loader's.
	HostCoresPerGPU float64
	// Lendable is the share of the cluster's unrequested cores that
	// Sluice may pool, beyond the data loader cores of the running tasks.
	Lendable float64
	// ReplicaCores are the cores of one function replica.
	ReplicaCores float64
	// ColdStart is how long a new replica takes to serve.
	ColdStart time.Duration
	// BufferSamples is how far a task's replicas may preprocess ahead of
	// its trainer (its output buffer), ShardSamples one shard task's
	// samples: where a task gives none.
	BufferSamples, ShardSamples float64
	// QueueGPUs, when above 0, replaces the trace's schedule by a
	// scheduler: tasks arrive at their submission and start in arrival
	// order (first come, first served, no backfilling) once a cluster of
	// QueueGPUs GPUs, with the trace's cores per GPU, has theirs free, so
	// a task finished sooner lets the next start sooner. GPUs are pooled
	// (no placement on nodes); CPU-only tasks are left out; a completion
	// time then counts the wait.
	QueueGPUs int
	// Seed draws the tasks' demand.
	Seed uint64
	// SampleEvery, above 0, samples the cluster into Result.Timeline.
	SampleEvery time.Duration
}

// DefaultModel is the model the figures of docs/simulations.md use.
func DefaultModel() Model {
	return Model{
		TrainerPerGPU: 400, TrainerSigma: 1.0,
		PerCore: 449, PerCoreSigma: 0.7,
		HostCoresPerGPU: 1, Lendable: 1,
		ReplicaCores: 1, ColdStart: 2 * time.Second,
		// A job's default 1 GiB output buffer holds 7,133 samples of
		// 224x224x3 bytes; a WebDataset shard of ImageNet is about 1,000.
		BufferSamples: 7133, ShardSamples: 1000,
		Seed: 1,
	}
}

// Validate names the first parameter out of range.
func (m Model) Validate() error {
	var errs []error
	pos := func(name string, v float64) {
		if !(v > 0) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("%s %v: want > 0", name, v))
		}
	}
	pos("trainer per gpu", m.TrainerPerGPU)
	pos("per core", m.PerCore)
	pos("replica cores", m.ReplicaCores)
	pos("buffer samples", m.BufferSamples)
	pos("shard samples", m.ShardSamples)
	for name, v := range map[string]float64{"trainer sigma": m.TrainerSigma, "per core sigma": m.PerCoreSigma} {
		if !(v >= 0 && v <= 3) {
			errs = append(errs, fmt.Errorf("%s %v: want 0..3", name, v))
		}
	}
	if !(m.HostCoresPerGPU >= 0 && m.HostCoresPerGPU <= 64) {
		errs = append(errs, fmt.Errorf("host cores per gpu %v: want 0..64", m.HostCoresPerGPU))
	}
	if !(m.Lendable >= 0 && m.Lendable <= 1) {
		errs = append(errs, fmt.Errorf("lendable %v: want 0..1", m.Lendable))
	}
	if m.QueueGPUs < 0 || m.QueueGPUs > 1_000_000 {
		errs = append(errs, fmt.Errorf("queue gpus %d: want 0 (the trace's schedule)..1000000", m.QueueGPUs))
	}
	if m.ColdStart < 0 || m.ColdStart > time.Hour {
		errs = append(errs, fmt.Errorf("cold start %v: want 0..1h", m.ColdStart))
	}
	return errors.Join(errs...)
}

// draw gives t its trainer rate and CPU cost where it has none, from a
// random stream of its own (by name and seed), so that a task's draw does
// not depend on the others and is the same under every policy.
func (m Model) draw(t Task) Task {
	h := fnv.New64a()
	h.Write([]byte(t.Name))
	rng := rand.New(rand.NewPCG(m.Seed, h.Sum64()))
	logn := func(median, sigma float64) float64 { return median * math.Exp(sigma*rng.NormFloat64()) }
	tr, pc := logn(m.TrainerPerGPU, m.TrainerSigma), logn(m.PerCore, m.PerCoreSigma)
	if t.TrainerRate == 0 {
		t.TrainerRate = t.GPUs * tr
	}
	if t.CPUPerSample == 0 {
		t.CPUPerSample = 1 / pc
	}
	if t.Readers == 0 {
		t.Readers = 1
	}
	if t.BufferSamples == 0 {
		t.BufferSamples = m.BufferSamples
	}
	if t.ShardSamples == 0 {
		t.ShardSamples = m.ShardSamples
	}
	if t.HostCores == 0 {
		t.HostCores = min(m.HostCoresPerGPU*math.Ceil(t.GPUs), t.Cores/2)
	}
	return t
}

// staticRate is the samples/s a task trains at with its own request: its
// trainer's rate or what its data loader cores preprocess, the lower.
func staticRate(t Task) float64 {
	return min(t.TrainerRate, max(t.Cores-t.HostCores, 0)/t.CPUPerSample)
}
