package local

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-project/sluice/autoscale"
)

// replicaRunner is what an emulated scaler scales; the Actuator is one.
type replicaRunner interface {
	Scale(ctx context.Context, job string, n int) error
	Ready(job string) int
	Endpoints(job string) []string
}

// emulatedJob is one job under an emulated scaler: its policy's config
// and state. It is all that KEDAMode and KPAMode do differently.
type emulatedJob interface {
	// bound makes lo and hi the job's min and max replicas.
	bound(lo, hi int)
	// decide is one pure policy step from what was observed at now: the
	// replicas the scaler wants and why.
	decide(metric float64, ready int, now time.Time) (replicas int, reason string)
}

// emulated lets an emulated scaler (KEDA-like, Knative KPA-like) size
// each job's local replicas instead of Sluice's policy. Sluice's runner
// still calls Scale on every tick; each call is the scaler's own tick and
// the count asked for is ignored, so both arms of a comparison run the
// same loop and differ only in who decides.
type emulated struct {
	act  replicaRunner
	log  *slog.Logger
	name string // the scaler's, in its log lines
	// metric is what the scaler observes of a job each tick.
	metric func(job string) float64
	// maxReplicas caps every job's max (0: none); newJob is a job's
	// state before its first tick.
	maxReplicas int
	newJob      func() emulatedJob
	// Now is the clock (time.Now when nil); tests script it.
	Now func() time.Time

	mu   sync.Mutex
	jobs map[string]*emulatedEntry
}

// KEDAMode and KPAMode are actuators through the emulated they embed.
var (
	_ autoscale.Actuator     = (*emulated)(nil)
	_ autoscale.JobLifecycle = (*emulated)(nil)
)

type emulatedEntry struct {
	job  emulatedJob
	last int // the replicas last decided, to log changes only
}

// newEmulated wraps act; logger may be nil.
func newEmulated(act replicaRunner, name string, metric func(string) float64, maxReplicas int, newJob func() emulatedJob, logger *slog.Logger) *emulated {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &emulated{act: act, log: logger, name: name, metric: metric, maxReplicas: maxReplicas, newJob: newJob,
		jobs: map[string]*emulatedEntry{}}
}

func (e *emulated) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// jobBounds is a job's min and max replicas: its own, with the max capped
// by maxReplicas (0: none) and the min by the max.
func jobBounds(b autoscale.JobBounds, maxReplicas int) (lo, hi int) {
	lo, hi = b.MinReplicas, b.MaxReplicas
	if hi > 0 && maxReplicas > 0 {
		hi = min(hi, maxReplicas)
	}
	if hi > 0 {
		lo = min(lo, hi)
	}
	return lo, hi
}

// StartJob takes the job's bounds as its replica counts' bounds.
func (e *emulated) StartJob(_ context.Context, job string, b autoscale.JobBounds) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(job).job.bound(jobBounds(b, e.maxReplicas))
	return nil
}

// EndJob stops the job's replicas and forgets it: in a cluster its
// scaling object goes with it.
func (e *emulated) EndJob(ctx context.Context, job string) error {
	e.mu.Lock()
	delete(e.jobs, job)
	e.mu.Unlock()
	return e.act.Scale(ctx, job, 0)
}

// entry returns job's state, creating it; e.mu is held.
func (e *emulated) entry(job string) *emulatedEntry {
	j := e.jobs[job]
	if j == nil {
		j = &emulatedEntry{job: e.newJob()}
		e.jobs[job] = j
	}
	return j
}

// Scale runs one decision of the scaler for job and scales to it; the
// count Sluice asked for is ignored.
func (e *emulated) Scale(ctx context.Context, job string, _ int) error {
	// Observed before the lock: both may take other locks.
	m := e.metric(job)
	ready := e.act.Ready(job)
	now := e.now()
	e.mu.Lock()
	j := e.entry(job)
	prev := j.last
	n, reason := j.job.decide(m, ready, now)
	j.last = n
	e.mu.Unlock()
	if n != prev {
		e.log.Info(e.name+" scaling", "job", job, "replicas", n, "from", prev, "reason", reason)
	}
	return e.act.Scale(ctx, job, n)
}

// Ready is the wrapped actuator's.
func (e *emulated) Ready(job string) int { return e.act.Ready(job) }

// Endpoints is the wrapped actuator's.
func (e *emulated) Endpoints(job string) []string { return e.act.Endpoints(job) }
