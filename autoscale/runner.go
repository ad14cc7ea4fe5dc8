package autoscale

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/promreg"
	"github.com/sluice-project/sluice/wire"
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

// Backlog reports a job's shard tasks: queued, being processed, and
// whether the job needs no more work.
type Backlog interface {
	Backlog() (pending, inflight int, done bool)
}

// Job is what the runner needs to know about one job.
type Job struct {
	Backlog Backlog
	// MinReplicas and MaxReplicas bound the job's replicas; MaxReplicas 0
	// means the runner's Config.MaxReplicas.
	MinReplicas, MaxReplicas int
	// InitialReplicas, when > 0, replaces Config.InitialReplicas for this
	// job: a pre-warmed job (a sweep's, sized by the planner) starts with
	// the replicas it will need rather than growing to them on demand.
	InitialReplicas int
	// Weight is the job's share of the capacity when it is short (<= 0: 1).
	Weight float64
	// Readers are the job's declared readers: the most stalled one drives
	// scaling, and the job's demand is done once all of them are (see
	// Aggregate). None: every reader that signals counts.
	Readers []string
}

// ScaleEvent records a change of a job's replica count.
type ScaleEvent struct {
	Time     time.Time
	Job      string
	Replicas int
	Reason   string
}

var errNoNATS = errors.New("autoscale: Run needs a nats connection")

// maxEvents bounds the event log; the oldest go first.
const maxEvents = 10000

// Runner applies the policy to every job on each tick.
type Runner struct {
	nc  *nats.Conn
	act Actuator
	cfg Config
	log *slog.Logger

	desired *prometheus.GaugeVec
	events  *prometheus.CounterVec
	refused *prometheus.CounterVec

	tick   sync.Mutex // serialises Tick
	policy Policy     // sizes the jobs; r.tick guards it

	mu      sync.Mutex
	jobs    map[string]*managed
	demand  map[string]map[string]Signal // job -> reader -> latest
	agents  map[string]map[string]Signal // job -> agent -> latest (wire.Demand.Agent)
	removed map[string]bool
	history []ScaleEvent
}

type managed struct {
	job     Job
	cfg     Config // r.cfg with the job's bounds
	state   State
	reason  string
	started bool // JobLifecycle.StartJob succeeded
	// pending and inflight are the backlog read at the last tick.
	pending, inflight int
	// appetite is the trainer's appetite last read (NextAppetite).
	appetite float64
	// zeroSince is when the job last began to want replicas and be
	// granted none (zero while it is granted some or wants none).
	zeroSince time.Time
}

// NewRunner checks cfg and creates a runner. nc is only needed by Run; reg
// may be nil.
func NewRunner(nc *nats.Conn, act Actuator, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Runner, error) {
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
		nc: nc, act: act, cfg: cfg, log: logger, policy: SluicePolicy{Allocator: cfg.Allocator},
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_autoscale_desired_replicas", Help: "Replicas the autoscaler decided for a job.",
		}, []string{"job"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_autoscale_scale_events_total", Help: "Changes of a job's replica count.",
		}, []string{"job", "direction"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_autoscale_demand_refused_total",
			Help: "Demand signals refused: of a reader the job does not declare, or naming an agent over the bounds.",
		}, []string{"reason"}),
		jobs:    map[string]*managed{},
		demand:  map[string]map[string]Signal{},
		agents:  map[string]map[string]Signal{},
		removed: map[string]bool{},
	}
	r.desired = promreg.Register(reg, r.desired)
	r.events = promreg.Register(reg, r.events)
	r.refused = promreg.Register(reg, r.refused)
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
	delete(r.demand, job)
	delete(r.agents, job)
	r.removed[job] = true
}

// Bounds on what demand signals, which anyone who may publish on a job's
// demand subject can send, make the runner keep per job.
const (
	// MaxAgentsPerJob bounds the agents kept per job: the job's dispatch
	// plan shares its in-flight budget among them, and must stay one
	// NATS message. One more replaces a stale one, or is refused.
	MaxAgentsPerJob = 1024
	// MaxAgentNameBytes bounds an agent's name (a host name and a pid).
	MaxAgentNameBytes = 256
)

// Why Observe refused a signal (the reason label of
// sluice_autoscale_demand_refused_total).
const (
	refusedUndeclaredReader = "undeclared_reader"
	refusedTooManyReaders   = "too_many_readers"
	refusedAgentName        = "agent_name"
	refusedTooManyAgents    = "too_many_agents"
)

// Observe records a demand signal of a reader of d.Job received at at;
// signals older than the one kept for that reader are ignored. A signal
// naming its agent (wire.Demand.Agent) is also kept as that agent's
// latest (Agents). Signals of a job the runner does not manage are
// dropped; so are, with a debug line and a count, those of a reader the
// job does not declare (of more than wire.MaxReaders readers where it
// declares none), and those naming an agent beyond MaxAgentsPerJob or
// MaxAgentNameBytes: they would grow the job's maps without bound.
func (r *Runner) Observe(d wire.Demand, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.jobs[d.Job]
	if !ok {
		return
	}
	reader := readerOf(d)
	byReader := r.demand[d.Job]
	if why := r.refuse(m, byReader, d, reader, at); why != "" {
		r.refused.WithLabelValues(why).Inc()
		r.log.Debug("refusing a demand signal", "job", d.Job, "reader", reader, "agent", d.Agent, "why", why)
		return
	}
	if d.Agent != "" {
		byAgent := r.agents[d.Job]
		if byAgent == nil {
			byAgent = map[string]Signal{}
			r.agents[d.Job] = byAgent
		}
		if o, ok := byAgent[d.Agent]; !ok || !o.At.After(at) {
			byAgent[d.Agent] = Signal{d, at}
		}
	}
	if byReader == nil {
		byReader = map[string]Signal{}
		r.demand[d.Job] = byReader
	}
	if o, ok := byReader[reader]; ok && o.At.After(at) {
		return
	}
	byReader[reader] = Signal{d, at}
}

// refuse says why a signal of job m is not kept (empty: it is); a new
// agent over the cap takes the place of a stale one, if there is one.
// r.mu must be held.
func (r *Runner) refuse(m *managed, byReader map[string]Signal, d wire.Demand, reader string, at time.Time) string {
	if len(m.job.Readers) > 0 && !slices.Contains(m.job.Readers, reader) {
		return refusedUndeclaredReader
	}
	if _, known := byReader[reader]; !known && len(byReader) >= wire.MaxReaders {
		return refusedTooManyReaders
	}
	if d.Agent == "" {
		return ""
	}
	if len(d.Agent) > MaxAgentNameBytes {
		return refusedAgentName
	}
	byAgent := r.agents[d.Job]
	if _, known := byAgent[d.Agent]; known || len(byAgent) < MaxAgentsPerJob {
		return ""
	}
	for name, s := range byAgent {
		if at.Sub(s.At) > m.cfg.DemandStale {
			delete(byAgent, name)
			return ""
		}
	}
	return refusedTooManyAgents
}

// Signals returns the latest signal of each reader of job.
func (r *Runner) Signals(job string) map[string]Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.demand[job])
}

// Agents returns the latest signal of each agent of job that names itself
// (wire.Demand.Agent): what the agents dispatch now, for the job's
// dispatch plan and backlog. A job's agents may serve the same readers
// (one per node), so these are not Signals.
func (r *Runner) Agents(job string) map[string]Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.agents[job])
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

// Backlog is job's tasks pending and in flight as the last tick read them
// (before its Scale calls); ok is false for a job the runner does not
// manage.
func (r *Runner) Backlog(job string) (pending, inflight int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.jobs[job]
	if !ok {
		return 0, 0, false
	}
	return m.pending, m.inflight, true
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
// changes.
func (r *Runner) Tick(ctx context.Context, now time.Time) {
	r.tick.Lock()
	defer r.tick.Unlock()
	jobs, removed := r.snapshot(now)
	// Outside the lock: the backlog and the actuator may take their own.
	in := make([]RoundJob, len(jobs))
	for i, tj := range jobs {
		if tj.m.job.Backlog != nil {
			tj.Inputs.Pending, tj.Inputs.InFlight, tj.Inputs.Done = tj.m.job.Backlog.Backlog()
		}
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

// snapshot reads every managed job's round inputs (its demand aggregated
// at now), in name order, and the jobs removed since the last tick.
func (r *Runner) snapshot(now time.Time) ([]*tickJob, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	jobs := make([]*tickJob, 0, len(r.jobs))
	for name, m := range r.jobs {
		tj := &tickJob{m: m, RoundJob: RoundJob{Name: name, Config: m.cfg, State: m.state, Weight: m.job.Weight,
			Appetite: m.appetite, ZeroSince: m.zeroSince}}
		tj.Inputs.Demand, tj.Inputs.DemandAt = Aggregate(r.demand[name], m.job.Readers, now, m.cfg.DemandStale)
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
		tj.m.pending, tj.m.inflight = tj.Inputs.Pending, tj.Inputs.InFlight
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

// Listen subscribes to every job's demand signals (wire.DemandSubjects)
// and keeps the latest of each reader, until stop is called. Run does it
// itself; a caller that ticks the runner itself (the controller) uses it.
func (r *Runner) Listen() (stop func(), err error) {
	if r.nc == nil {
		return nil, errNoNATS
	}
	prefix := strings.TrimSuffix(wire.DemandSubjects, "*")
	sub, err := r.nc.Subscribe(wire.DemandSubjects, func(m *nats.Msg) {
		var d wire.Demand
		if err := json.Unmarshal(m.Data, &d); err != nil {
			r.log.Warn("ignoring a malformed demand signal", "subject", m.Subject, "err", err)
			return
		}
		// The subject names the job; a signal cannot speak for another.
		d.Job = strings.TrimPrefix(m.Subject, prefix)
		r.Observe(d, time.Now())
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", wire.DemandSubjects, err)
	}
	if err := r.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribing to %s: %w", wire.DemandSubjects, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// Run keeps the latest demand signal of every job's readers (Listen) and
// calls Tick on each tick, until ctx ends or tick closes; it then returns
// nil.
func (r *Runner) Run(ctx context.Context, tick <-chan time.Time) error {
	stop, err := r.Listen()
	if err != nil {
		return err
	}
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now, ok := <-tick:
			if !ok {
				return nil
			}
			r.Tick(ctx, now)
		}
	}
}
