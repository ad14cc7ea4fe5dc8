package local

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-project/sluice/autoscale"
)

// Lag reports a job's queue lag now: what KEDA's NATS JetStream scaler
// reads from the consumer (messages not yet acked).
type Lag interface {
	Lag(job string) float64
}

// BacklogLag is a job's tasks pending and in flight: the messages of its
// dispatch consumer that are not acked yet.
type BacklogLag struct {
	// Backlog gives a job's tasks; ok false for a job it does not know.
	Backlog func(job string) (pending, inflight int, ok bool)
}

// Lag implements Lag.
func (b BacklogLag) Lag(job string) float64 {
	p, f, ok := b.Backlog(job)
	if !ok {
		return 0
	}
	return float64(p + f)
}

// KEDAMode lets a KEDA ScaledObject on queue lag (DecideKEDA) size each
// job's replicas instead of Sluice's policy: on one machine, the baseline
// that platform teams run for queue consumers, to compare with "Sluice
// decides" on the same work. As KPAMode, it takes each of the runner's
// Scale calls as its own tick and ignores the count asked for. A job's
// min/max replicas are its minReplicaCount and maxReplicaCount.
type KEDAMode struct {
	act replicaRunner
	cfg KEDAConfig
	lag Lag
	log *slog.Logger
	// Now is the clock (time.Now when nil); tests script it.
	Now func() time.Time

	mu   sync.Mutex
	jobs map[string]*kedaJob
}

type kedaJob struct {
	cfg KEDAConfig
	st  KEDAState
}

var (
	_ autoscale.Actuator     = (*KEDAMode)(nil)
	_ autoscale.JobLifecycle = (*KEDAMode)(nil)
)

// NewKEDAMode wraps act; logger may be nil. A cfg without a Phase is
// aligned to now.
func NewKEDAMode(act replicaRunner, cfg KEDAConfig, lag Lag, logger *slog.Logger) (*KEDAMode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Phase.IsZero() {
		cfg.Phase = time.Now()
	}
	return &KEDAMode{act: act, cfg: cfg, lag: lag, log: logger, jobs: map[string]*kedaJob{}}, nil
}

func (k *KEDAMode) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// StartJob takes the job's bounds as its replica counts' bounds.
func (k *KEDAMode) StartJob(_ context.Context, job string, b autoscale.JobBounds) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	cfg := k.cfg
	cfg.MinReplicaCount, cfg.MaxReplicaCount = b.MinReplicas, b.MaxReplicas
	if cfg.MaxReplicaCount > 0 && k.cfg.MaxReplicaCount > 0 {
		cfg.MaxReplicaCount = min(cfg.MaxReplicaCount, k.cfg.MaxReplicaCount)
	}
	if cfg.MaxReplicaCount > 0 {
		cfg.MinReplicaCount = min(cfg.MinReplicaCount, cfg.MaxReplicaCount)
	}
	k.job(job).cfg = cfg
	return nil
}

// EndJob stops the job's replicas and forgets it: its ScaledObject is
// deleted with the job.
func (k *KEDAMode) EndJob(ctx context.Context, job string) error {
	k.mu.Lock()
	delete(k.jobs, job)
	k.mu.Unlock()
	return k.act.Scale(ctx, job, 0)
}

// job returns job's state, creating it; k.mu is held.
func (k *KEDAMode) job(name string) *kedaJob {
	j := k.jobs[name]
	if j == nil {
		j = &kedaJob{cfg: k.cfg}
		k.jobs[name] = j
	}
	return j
}

// Scale runs one KEDA decision for job and scales to it; the count Sluice
// asked for is ignored.
func (k *KEDAMode) Scale(ctx context.Context, job string, _ int) error {
	lag := k.lag.Lag(job)
	now := k.now()
	k.mu.Lock()
	j := k.job(job)
	prev := j.st.Replicas
	var dec KEDADecision
	dec, j.st = DecideKEDA(j.cfg, j.st, lag, now)
	k.mu.Unlock()
	if dec.Replicas != prev {
		k.log.Info("keda scaling", "job", job, "replicas", dec.Replicas, "from", prev, "reason", dec.Reason)
	}
	return k.act.Scale(ctx, job, dec.Replicas)
}

// Ready is the wrapped actuator's.
func (k *KEDAMode) Ready(job string) int { return k.act.Ready(job) }

// Endpoints is the wrapped actuator's.
func (k *KEDAMode) Endpoints(job string) []string { return k.act.Endpoints(job) }
