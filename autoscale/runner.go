package autoscale

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/promreg"
)

// Actuator runs a job's replicas.
type Actuator interface {
	// Scale sets the number of replicas of job. It is called on every
	// tick with the current count, so an actuator can replace replicas
	// that died.
	Scale(ctx context.Context, job string, replicas int) error
	// Ready is the number of replicas of job that serve now.
	Ready(job string) int
}

// JobLifecycle is implemented by an actuator that acts once when a job
// starts and once when it ends, not on every tick: Knative's, whose
// Service template (min-scale) it may change only then, since each change
// makes a new Revision. The runner calls StartJob before the job's first
// Scale (again on the next tick if it failed) and EndJob after the last
// Scale of a removed job.
type JobLifecycle interface {
	StartJob(ctx context.Context, job string, b JobBounds) error
	EndJob(ctx context.Context, job string) error
}

// JobBounds are the replica bounds a job decides within (Config.ForJob).
type JobBounds struct {
	MinReplicas, MaxReplicas int
}

// Job is what the runner needs to know about one job; what it decides
// from each tick (its demand and backlog) comes with the tick (Tick).
type Job struct {
	// MinReplicas and MaxReplicas bound the job's replicas; MaxReplicas 0
	// means the runner's Config.MaxReplicas.
	MinReplicas, MaxReplicas int
	// InitialReplicas, when > 0, replaces Config.InitialReplicas for this
	// job: a pre-warmed job (a sweep's, sized by the planner) starts with
	// the replicas it will need rather than growing to them on demand.
	InitialReplicas int
	// Weight is the job's share of the capacity when it is short (<= 0: 1).
	Weight float64
}

// ScaleEvent records a change of a job's replica count.
type ScaleEvent struct {
	Time     time.Time
	Job      string
	Replicas int
	Reason   string
}

// maxEvents bounds the event log; the oldest go first.
const maxEvents = 10000

// Runner applies the policy to every job on each tick, from the inputs
// the tick brings: it keeps the policy's state of each job, not the
// signals the inputs are made of (the controller owns those).
type Runner struct {
	act Actuator
	cfg Config
	log *slog.Logger

	desired *prometheus.GaugeVec
	bounds  *prometheus.GaugeVec // by job and bound (min, max)
	events  *prometheus.CounterVec

	tick   sync.Mutex // serialises Tick
	policy Policy     // sizes the jobs; r.tick guards it

	mu      sync.Mutex
	jobs    map[string]*managed
	removed map[string]bool
	history []ScaleEvent
}

type managed struct {
	job     Job
	cfg     Config // r.cfg with the job's bounds
	state   State
	reason  string
	started bool // JobLifecycle.StartJob succeeded
	// appetite is the trainer's appetite last read (NextAppetite).
	appetite float64
	// zeroSince is when the job last began to want replicas and be
	// granted none (zero while it is granted some or wants none).
	zeroSince time.Time
}

// NewRunner checks cfg and creates a runner; reg may be nil.
func NewRunner(act Actuator, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Runner, error) {
	if act == nil {
		return nil, fmt.Errorf("autoscale: an actuator is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Runner{
		act: act, cfg: cfg, log: logger, policy: SluicePolicy{Allocator: cfg.Allocator},
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_autoscale_desired_replicas", Help: "Replicas the autoscaler decided for a job.",
		}, []string{"job"}),
		// The bounds beside the decision: "pinned at the maximum" is a
		// comparison of the two series.
		bounds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_autoscale_replica_bounds", Help: "The replica bounds a job decides within (bound: min, max), its spec's within the cluster's.",
		}, []string{"job", "bound"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_autoscale_scale_events_total", Help: "Changes of a job's replica count.",
		}, []string{"job", "direction"}),
		jobs:    map[string]*managed{},
		removed: map[string]bool{},
	}
	r.desired = promreg.Register(reg, r.desired)
	r.bounds = promreg.Register(reg, r.bounds)
	r.events = promreg.Register(reg, r.events)
	return r, nil
}

// AddJob starts managing job, or updates what is known of it; its replicas
// start from zero.
func (r *Runner) AddJob(name string, j Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg := r.cfg.ForJob(j.MinReplicas, j.MaxReplicas)
	if j.InitialReplicas > 0 {
		cfg.InitialReplicas = max(min(j.InitialReplicas, cfg.MaxReplicas), cfg.MinReplicas, 1)
	}
	r.bounds.WithLabelValues(name, "min").Set(float64(cfg.MinReplicas))
	r.bounds.WithLabelValues(name, "max").Set(float64(cfg.MaxReplicas))
	if m, ok := r.jobs[name]; ok {
		m.job, m.cfg = j, cfg
		return
	}
	r.jobs[name] = &managed{job: j, cfg: cfg}
	delete(r.removed, name)
}

// RemoveJob stops managing job; the next Tick scales it to zero and
// deletes its series.
func (r *Runner) RemoveJob(job string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.jobs[job]; !ok {
		return
	}
	delete(r.jobs, job)
	r.removed[job] = true
}

// Replicas is the count last decided for job.
func (r *Runner) Replicas(job string) int {
	n, _ := r.Decision(job)
	return n
}

// PerReplica is one replica's throughput of job (samples/s) as its policy
// learned it (State.PerReplica); 0 until known or for a job the runner
// does not manage.
func (r *Runner) PerReplica(job string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.jobs[job]; ok {
		return m.state.PerReplica
	}
	return 0
}

// Decision is the count last decided for job and why.
func (r *Runner) Decision(job string) (replicas int, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.jobs[job]; ok {
		return m.state.Replicas, m.reason
	}
	return 0, ""
}

// Events returns the scale events so far, oldest first.
func (r *Runner) Events() []ScaleEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ScaleEvent(nil), r.history...)
}

// Tick runs one decision round: the runner's policy (Round: Decide per
// job, then the allocator's grants of the cluster capacity; or a
// baseline's), then Scale every job (changed or not) and record the
// changes. inputs are each managed job's demand and backlog now (by job
// name; a job without is decided with none); Ready is the actuator's.
func (r *Runner) Tick(ctx context.Context, now time.Time, inputs map[string]Inputs) {
	r.tick.Lock()
	defer r.tick.Unlock()
	jobs, removed := r.snapshot(inputs)
	// Outside the lock: the actuator may take its own.
	in := make([]RoundJob, len(jobs))
	for i, tj := range jobs {
		tj.Inputs.Ready = r.act.Ready(tj.Name)
		tj.Current = tj.Inputs.Ready
		in[i] = tj.RoundJob
	}
	res := r.policy.Round(in, r.cfg.Capacity(), now)
	events := r.record(jobs, res, removed, now)
	for _, e := range events {
		r.log.Info("scaling", "job", e.Job, "replicas", e.Replicas, "reason", e.Reason)
	}
	r.scaleRemoved(ctx, removed)
	r.scaleJobs(ctx, jobs, res)
}

// tickJob is a managed job as one Tick reads it.
type tickJob struct {
	RoundJob
	m *managed
}

// snapshot reads every managed job's round inputs, in name order, and the
// jobs removed since the last tick.
func (r *Runner) snapshot(inputs map[string]Inputs) ([]*tickJob, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	jobs := make([]*tickJob, 0, len(r.jobs))
	for name, m := range r.jobs {
		tj := &tickJob{m: m, RoundJob: RoundJob{Name: name, Config: m.cfg, State: m.state, Weight: m.job.Weight,
			Appetite: m.appetite, ZeroSince: m.zeroSince, Inputs: inputs[name]}}
		jobs = append(jobs, tj)
	}
	var removed []string
	for name := range r.removed {
		removed = append(removed, name)
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].Name < jobs[j].Name })
	sort.Strings(removed)
	return jobs, removed
}

// record keeps each job's round result (unless it was removed or re-added
// meanwhile), counts and returns the changes, removed jobs' included.
func (r *Runner) record(jobs []*tickJob, res []RoundResult, removed []string, now time.Time) []ScaleEvent {
	var events []ScaleEvent
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, tj := range jobs {
		rs := res[i]
		if r.jobs[tj.Name] != tj.m {
			continue // removed (or re-added) during the round
		}
		tj.m.zeroSince = rs.ZeroSince
		tj.m.state, tj.m.reason = rs.Next, rs.Decision.Reason
		tj.m.appetite = rs.Bid.Appetite
		r.desired.WithLabelValues(tj.Name).Set(float64(rs.Decision.Replicas))
		if rs.Decision.Replicas != tj.State.Replicas {
			events = append(events, ScaleEvent{now, tj.Name, rs.Decision.Replicas, rs.Decision.Reason})
			dir := "up"
			if rs.Decision.Replicas < tj.State.Replicas {
				dir = "down"
			}
			r.events.WithLabelValues(tj.Name, dir).Inc()
		}
	}
	for _, name := range removed {
		delete(r.removed, name)
		events = append(events, ScaleEvent{now, name, 0, "job removed"})
	}
	r.history = append(r.history, events...)
	if over := len(r.history) - maxEvents; over > 0 {
		r.history = append([]ScaleEvent(nil), r.history[over:]...)
	}
	return events
}

// scaleRemoved scales the removed jobs to zero, ends them in a
// JobLifecycle actuator and in the policy, and deletes their series.
// They go first, so that the replicas over all jobs never exceed the
// capacity between two Scale calls: a replica moves from one job to
// another by a stop, then a start.
func (r *Runner) scaleRemoved(ctx context.Context, removed []string) {
	lc, _ := r.act.(JobLifecycle)
	for _, name := range removed {
		if err := r.act.Scale(ctx, name, 0); err != nil {
			r.log.Warn("scaling a removed job to zero", "job", name, "err", err)
		}
		if lc != nil {
			if err := lc.EndJob(ctx, name); err != nil {
				r.log.Warn("ending a removed job in the actuator", "job", name, "err", err)
			}
		}
		r.mu.Lock()
		if _, back := r.jobs[name]; !back {
			r.policy.Forget(name)
			r.desired.DeleteLabelValues(name)
			r.bounds.DeletePartialMatch(prometheus.Labels{"job": name})
			r.events.DeletePartialMatch(prometheus.Labels{"job": name})
		}
		r.mu.Unlock()
	}
}

// scaleJobs calls Scale for every job, those that shrink first (see
// scaleRemoved), starting a job in a JobLifecycle actuator first.
func (r *Runner) scaleJobs(ctx context.Context, jobs []*tickJob, res []RoundResult) {
	lc, _ := r.act.(JobLifecycle)
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	grows := func(i int) int { return b2i(res[i].Decision.Replicas >= jobs[i].State.Replicas) }
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(grows(a), grows(b)) })
	for _, i := range order {
		tj, n := jobs[i], res[i].Decision.Replicas
		if lc != nil && !tj.m.started {
			b := JobBounds{MinReplicas: tj.Config.MinReplicas, MaxReplicas: tj.Config.MaxReplicas}
			if err := lc.StartJob(ctx, tj.Name, b); err != nil {
				r.log.Warn("starting a job in the actuator failed; retrying on the next tick", "job", tj.Name, "err", err)
			} else {
				r.mu.Lock()
				tj.m.started = true
				r.mu.Unlock()
			}
		}
		if err := r.act.Scale(ctx, tj.Name, n); err != nil {
			r.log.Warn("scaling failed; retrying on the next tick", "job", tj.Name, "replicas", n, "err", err)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// UsePolicy makes p size the jobs from the next Tick on, in place of
// Sluice's (SluicePolicy with the config's allocator): a baseline to
// compare it with (package autoscale/baseline).
func (r *Runner) UsePolicy(p Policy) {
	r.tick.Lock()
	defer r.tick.Unlock()
	r.policy = p
}
