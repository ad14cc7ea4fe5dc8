package local

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-project/sluice/autoscale"
)

// Concurrency reports the requests a job has outstanding now: what
// Knative's queue-proxies and activator would count for it.
type Concurrency interface {
	Concurrency(job string) float64
}

// BacklogConcurrency is the concurrency a push dispatcher with a fixed
// parallelism would keep outstanding, as eventing's dispatchers do: the
// job's pending and in-flight tasks, at most Parallelism. Knative holds
// the requests beyond the pods' containerConcurrency in its queue-proxies
// and activator, and counts them; local replicas refuse them, so they are
// counted from the backlog instead.
type BacklogConcurrency struct {
	// Backlog gives a job's tasks; ok false for a job it does not know.
	Backlog     func(job string) (pending, inflight int, ok bool)
	Parallelism int
}

// Concurrency implements Concurrency.
func (b BacklogConcurrency) Concurrency(job string) float64 {
	p, f, ok := b.Backlog(job)
	if !ok {
		return 0
	}
	return float64(min(p+f, b.Parallelism))
}

// replicaRunner is what KPAMode scales; the Actuator is one.
type replicaRunner interface {
	Scale(ctx context.Context, job string, n int) error
	Ready(job string) int
	Endpoints(job string) []string
}

// KPAMode lets Knative's KPA alone (DecideKPA) size each job's replicas
// from the concurrency it would see, instead of Sluice's policy: on one
// machine, the baseline "Knative decides alone" to compare with "Sluice
// decides" on the same work. Sluice's runner still calls Scale on every
// tick; KPAMode takes each call as its own tick and ignores the count
// asked for. A job's min/max replicas are its min-scale and max-scale
// (StartJob); a job that ends (EndJob) goes to zero at once.
type KPAMode struct {
	act  replicaRunner
	cfg  KPAConfig
	conc Concurrency
	log  *slog.Logger
	// Now is the clock (time.Now when nil); tests script it.
	Now func() time.Time

	mu   sync.Mutex
	jobs map[string]*kpaJob
}

type kpaJob struct {
	cfg KPAConfig
	st  KPAState
	dec KPADecision
}

var (
	_ autoscale.Actuator     = (*KPAMode)(nil)
	_ autoscale.JobLifecycle = (*KPAMode)(nil)
)

// NewKPAMode wraps act; logger may be nil.
func NewKPAMode(act replicaRunner, cfg KPAConfig, conc Concurrency, logger *slog.Logger) (*KPAMode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &KPAMode{act: act, cfg: cfg, conc: conc, log: logger, jobs: map[string]*kpaJob{}}, nil
}

func (k *KPAMode) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// StartJob takes the job's bounds as its min-scale and max-scale.
func (k *KPAMode) StartJob(_ context.Context, job string, b autoscale.JobBounds) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	cfg := k.cfg
	cfg.MinScale, cfg.MaxScale = b.MinReplicas, b.MaxReplicas
	if cfg.MaxScale > 0 && k.cfg.MaxScale > 0 {
		cfg.MaxScale = min(cfg.MaxScale, k.cfg.MaxScale)
	}
	if cfg.MaxScale > 0 {
		cfg.MinScale = min(cfg.MinScale, cfg.MaxScale)
	}
	j := k.job(job)
	j.cfg = cfg
	return nil
}

// EndJob stops the job's replicas and forgets it.
func (k *KPAMode) EndJob(ctx context.Context, job string) error {
	k.mu.Lock()
	delete(k.jobs, job)
	k.mu.Unlock()
	return k.act.Scale(ctx, job, 0)
}

// job returns job's state, creating it; k.mu is held.
func (k *KPAMode) job(name string) *kpaJob {
	j := k.jobs[name]
	if j == nil {
		j = &kpaJob{cfg: k.cfg}
		k.jobs[name] = j
	}
	return j
}

// Scale runs one KPA decision for job and scales to it; the count Sluice
// asked for is ignored.
func (k *KPAMode) Scale(ctx context.Context, job string, _ int) error {
	c := k.conc.Concurrency(job)
	ready := k.act.Ready(job)
	now := k.now()
	k.mu.Lock()
	j := k.job(job)
	prev := j.dec.Replicas
	j.dec, j.st = DecideKPA(j.cfg, j.st, c, ready, now)
	dec := j.dec
	k.mu.Unlock()
	if dec.Replicas != prev {
		k.log.Info("kpa scaling", "job", job, "replicas", dec.Replicas, "from", prev, "reason", dec.Reason)
	}
	return k.act.Scale(ctx, job, dec.Replicas)
}

// Decision is the KPA's last decision for job.
func (k *KPAMode) Decision(job string) KPADecision {
	k.mu.Lock()
	defer k.mu.Unlock()
	if j := k.jobs[job]; j != nil {
		return j.dec
	}
	return KPADecision{}
}

// Ready is the wrapped actuator's.
func (k *KPAMode) Ready(job string) int { return k.act.Ready(job) }

// Endpoints is the wrapped actuator's.
func (k *KPAMode) Endpoints(job string) []string { return k.act.Endpoints(job) }
