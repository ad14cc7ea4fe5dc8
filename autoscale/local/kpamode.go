package local

import (
	"log/slog"
	"time"
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

// KPAMode lets Knative's KPA alone (DecideKPA) size each job's replicas
// from the concurrency it would see, instead of Sluice's policy: on one
// machine, the baseline "Knative decides alone" to compare with "Sluice
// decides" on the same work. Sluice's runner still calls Scale on every
// tick; KPAMode takes each call as its own tick and ignores the count
// asked for. A job's min/max replicas are its min-scale and max-scale
// (StartJob); a job that ends (EndJob) goes to zero at once.
type KPAMode struct {
	*emulated
}

// kpaJob is one job's revision as the KPA sees it, and its last decision.
type kpaJob struct {
	cfg KPAConfig
	st  KPAState
	dec KPADecision
}

func (j *kpaJob) bound(lo, hi int) { j.cfg.MinScale, j.cfg.MaxScale = lo, hi }

func (j *kpaJob) decide(conc float64, ready int, now time.Time) (int, string) {
	j.dec, j.st = DecideKPA(j.cfg, j.st, conc, ready, now)
	return j.dec.Replicas, j.dec.Reason
}

// NewKPAMode wraps act; logger may be nil.
func NewKPAMode(act replicaRunner, cfg KPAConfig, conc Concurrency, logger *slog.Logger) (*KPAMode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	newJob := func() emulatedJob { return &kpaJob{cfg: cfg} }
	return &KPAMode{newEmulated(act, "kpa", conc.Concurrency, cfg.MaxScale, newJob, logger)}, nil
}

// Decision is the KPA's last decision for job.
func (k *KPAMode) Decision(job string) KPADecision {
	k.mu.Lock()
	defer k.mu.Unlock()
	if j, ok := k.jobs[job]; ok {
		return j.job.(*kpaJob).dec
	}
	return KPADecision{}
}
