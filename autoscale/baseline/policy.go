package baseline

import (
	"sync"
	"time"

	"github.com/sluice-project/sluice/autoscale"
)

// Metric is what a baseline's scaler observes of a job in a round.
type Metric func(j autoscale.RoundJob) float64

// BacklogConcurrency is the concurrency a push dispatcher with a fixed
// parallelism would keep outstanding, as eventing's dispatchers do: the
// job's pending and in-flight tasks, at most parallelism. Knative holds
// the requests beyond the pods' containerConcurrency in its queue-proxies
// and activator, and counts them; local replicas refuse them, so they are
// counted from the backlog instead.
func BacklogConcurrency(parallelism int) Metric {
	return func(j autoscale.RoundJob) float64 {
		return float64(min(j.Inputs.Pending+j.Inputs.InFlight, parallelism))
	}
}

// BacklogLag is a job's tasks pending and in flight: the messages of its
// dispatch consumer that are not acked yet, what KEDA's NATS JetStream
// scaler reads.
func BacklogLag(j autoscale.RoundJob) float64 {
	return float64(j.Inputs.Pending + j.Inputs.InFlight)
}

// scaler is one job's baseline autoscaler and what it remembers.
type scaler interface {
	// decide is one step from what was observed of j at now: the
	// replicas it wants, within j's bounds, and why.
	decide(metric float64, j autoscale.RoundJob, now time.Time) (replicas int, reason string)
}

// policy is an autoscale.Policy that sizes each job alone with its own
// scaler, as the platform's autoscaler would: no capacity is shared
// (each job is bounded by its own max replicas), and Sluice's state is
// left as it was but for its replica count.
type policy struct {
	metric Metric
	newJob func() scaler

	mu   sync.Mutex
	jobs map[string]scaler
}

var _ autoscale.Policy = (*policy)(nil)

func newPolicy(metric Metric, newJob func() scaler) *policy {
	return &policy{metric: metric, newJob: newJob, jobs: map[string]scaler{}}
}

// Round implements autoscale.Policy.
func (p *policy) Round(jobs []autoscale.RoundJob, _ int, now time.Time) []autoscale.RoundResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]autoscale.RoundResult, len(jobs))
	for i, j := range jobs {
		s := p.jobs[j.Name]
		if s == nil {
			s = p.newJob()
			p.jobs[j.Name] = s
		}
		n, reason := s.decide(p.metric(j), j, now)
		next := j.State
		next.Replicas = n
		out[i] = autoscale.RoundResult{Name: j.Name, Decision: autoscale.Decision{Replicas: n, Reason: reason},
			Next: next, Bid: autoscale.Bid{Claim: autoscale.Claim{Want: n}}, Granted: n, Decided: true}
	}
	return out
}

// Forget implements autoscale.Policy: a job's scaling object goes with it.
func (p *policy) Forget(job string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.jobs, job)
}

// NewKPA is Knative's KPA (its own decider, knative.dev/serving's
// pkg/autoscaler/scaling, with Knative's defaults) sizing every job from
// the concurrency conc observes of it. A job's min/max replicas are its
// min-scale and max-scale.
func NewKPA(cfg KPAConfig, conc Metric) (autoscale.Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newPolicy(conc, func() scaler { return &kpaJob{cfg: cfg} }), nil
}

// kpaJob is one job's revision, made on its first round.
type kpaJob struct {
	cfg KPAConfig
	rev *kpaRevision
}

func (k *kpaJob) decide(conc float64, j autoscale.RoundJob, now time.Time) (int, string) {
	if k.rev == nil {
		rev, err := newKPARevision(kpaName(j.Name), k.cfg)
		if err != nil {
			return j.State.Replicas, err.Error()
		}
		k.rev = rev
	}
	k.rev.cfg.MinScale, k.rev.cfg.MaxScale = j.Config.MinReplicas, j.Config.MaxReplicas
	return k.rev.decide(conc, j.Inputs.Ready, now)
}

// NewKEDA is a KEDA ScaledObject on each job's queue lag (DecideKEDA),
// lag observing it. A job's min/max replicas are its minReplicaCount and
// maxReplicaCount. A cfg without a Phase is aligned to now.
func NewKEDA(cfg KEDAConfig, lag Metric) (autoscale.Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Phase.IsZero() {
		cfg.Phase = time.Now()
	}
	return newPolicy(lag, func() scaler { return &kedaJob{cfg: cfg} }), nil
}

// kedaJob is one job's ScaledObject and what KEDA and the HPA remember.
type kedaJob struct {
	cfg KEDAConfig
	st  KEDAState
}

func (k *kedaJob) decide(lag float64, j autoscale.RoundJob, now time.Time) (int, string) {
	k.cfg.MinReplicaCount, k.cfg.MaxReplicaCount = j.Config.MinReplicas, j.Config.MaxReplicas
	var d KEDADecision
	d, k.st = DecideKEDA(k.cfg, k.st, lag, now)
	return d.Replicas, d.Reason
}
