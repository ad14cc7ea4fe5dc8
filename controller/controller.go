package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/internal/ratelog"
	"github.com/sluice-project/sluice/internal/retry"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/planner"
	"github.com/sluice-project/sluice/wire"
)

// cleanupTimeout bounds what a stopping job does after its context ended:
// scaling to zero, deleting its plan, releasing its tasks, writing its
// last status.
const cleanupTimeout = 30 * time.Second

// Controller runs the jobs whose leases it holds; see the package doc.
type Controller struct {
	opts   Options
	log    *slog.Logger
	m      *metrics
	jm     *jobMetrics
	runner *autoscale.Runner

	jobsKV, statusKV, leasesKV, readersKV, dispatchKV jetstream.KeyValue

	kick chan struct{} // wakes the lease keeper
	// tickNow asks the control loop for a round before the next tick: a
	// job just added decides at once, rather than up to a tick later
	// (its cold start waits on that decision).
	tickNow chan struct{}
	synced  atomic.Bool // the job watcher has read every record once
	stops   sync.WaitGroup

	mu      sync.Mutex
	known   map[string]wire.Job // job records as last seen
	owned   map[string]*jobRun
	closing bool
	plans   *planner.Store // learned per-replica rates; set by Run

	learnMu sync.Mutex
	meters  map[string]*rateMeter // per owned job, for plans

	// demandMu guards demand, the agents' signals of the jobs run here:
	// the controller is their one owner, and hands the autoscaler plain
	// inputs made of them each tick.
	demandMu sync.Mutex
	// sealLogs bounds the log lines of signals refused for their seal: a
	// flood of them must not flood the log.
	sealLogs ratelog.Limiter
	demand   *demandBook
	// refusedDone is the revision of each reader's done record refused
	// last ("job/reader"): a record is read every poll, refused once.
	refusedDone sync.Map

	// calloutMu guards calloutSub, the auth callout's subscription
	// (ServeCallout).
	calloutMu  sync.Mutex
	calloutSub *nats.Subscription
}

// New checks opts and builds a controller; logger and reg may be nil.
func New(opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Controller, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("controller", opts.ID)
	runner, err := autoscale.NewRunner(opts.Actuator, opts.Autoscale, logger.With("component", "autoscaler"), reg)
	if err != nil {
		return nil, err
	}
	return &Controller{
		opts: opts, log: logger, m: newMetrics(reg), jm: newJobMetrics(reg), runner: runner,
		kick:    make(chan struct{}, 1),
		tickNow: make(chan struct{}, 1),
		known:   map[string]wire.Job{},
		owned:   map[string]*jobRun{},
		meters:  map[string]*rateMeter{},
		demand:  newDemandBook(),
	}, nil
}

// ID is the controller's name in leases.
func (c *Controller) ID() string { return c.opts.ID }

// Ready reports whether the controller has read the job store once and
// runs its jobs.
func (c *Controller) Ready() bool { return c.synced.Load() }

// Owned lists the jobs this controller runs now, sorted.
func (c *Controller) Owned() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.owned))
	for id := range c.owned {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Runner is the autoscaler shared by the controller's jobs.
func (c *Controller) Runner() *autoscale.Runner { return c.runner }

// openBuckets ensures the streams and buckets and opens the buckets, but
// the plans', which it returns. A NATS cluster that cannot answer yet (no
// meta leader, too few peers) is waited for: retried with backoff and a
// Warn line each time, until ctx ends.
func (c *Controller) openBuckets(ctx context.Context) (plans jetstream.KeyValue, err error) {
	err = retry.JetStream(ctx, c.log, c.opts.JS.Conn(), "creating streams and buckets", func(ctx context.Context) error {
		if err := streams.Ensure(ctx, c.opts.JS, c.opts.Streams); err != nil {
			return err
		}
		var err error
		open := func(bucket string) jetstream.KeyValue {
			if err != nil {
				return nil
			}
			var kv jetstream.KeyValue
			kv, err = c.opts.JS.KeyValue(ctx, bucket)
			if err != nil {
				err = fmt.Errorf("opening key-value bucket %s: %w", bucket, err)
			}
			return kv
		}
		c.jobsKV, c.statusKV, c.leasesKV = open(wire.JobsBucket), open(wire.StatusBucket), open(wire.LeasesBucket)
		c.readersKV, c.dispatchKV = open(wire.ReadersBucket), open(wire.DispatchBucket)
		plans = open(wire.PlansBucket)
		return err
	})
	return plans, err
}

// Run ensures the streams and buckets, then watches jobs, keeps leases,
// runs owned jobs, takes their agents' demand signals and shard results,
// and ticks the autoscaler until ctx ends. It then stops every job, scales
// their replicas to zero, deletes their dispatch plans (their agents stop
// sending; what they hold goes back to the queue after the ack wait) and
// releases their leases, so a standby takes over at once; with
// Options.Abandon it does none of that. It returns nil after a clean stop.
func (c *Controller) Run(ctx context.Context) error {
	plansKV, err := c.openBuckets(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.plans = planner.NewStore(plansKV)
	c.mu.Unlock()
	if err := c.ServeCallout(); err != nil {
		return err
	}
	defer c.stopCallout()
	stopListen, err := c.listenDemand()
	if err != nil {
		return err
	}
	defer stopListen()
	stopResults, err := c.listenResults()
	if err != nil {
		return err
	}
	defer stopResults()
	c.log.Info("controller running", "lease_ttl", c.opts.LeaseTTL, "tick", c.opts.Tick,
		"max_replicas", c.opts.MaxReplicas, "task_ack_wait", c.opts.TaskAckWait)

	var loops sync.WaitGroup
	loops.Go(func() { c.watchJobs(ctx) })
	loops.Go(func() { c.keepLeases(ctx) })
	loops.Go(func() { c.watchLeases(ctx) })
	loops.Go(func() { c.refreshPlans(ctx) })
	t := time.NewTicker(c.opts.Tick)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case now := <-t.C:
			c.Tick(ctx, now)
		case <-c.tickNow:
			c.Tick(ctx, time.Now())
		}
	}
	t.Stop()
	loops.Wait()
	c.shutdown()
	return nil
}

// Tick is one control round: the autoscaler decides and scales every job
// from its inputs now (autoscaleInputs), then the dispatch plan of every
// owned job is written where it changed, its status written, and the
// per-replica rates due are recorded in the plan store.
func (c *Controller) Tick(ctx context.Context, now time.Time) {
	start := time.Now()
	c.runner.Tick(ctx, now, c.autoscaleInputs(now))
	c.writePlans(ctx, now)
	c.writeStatuses(ctx, now)
	c.learnRates(ctx, now)
	c.m.tick.Observe(time.Since(start).Seconds())
}

// planRefresh is how often the dispatch plans are looked at between ticks:
// a replica that became ready reaches the agents within it, not a tick
// later (a plan is written only when it changed).
const planRefresh = 100 * time.Millisecond

// refreshPlans writes changed dispatch plans every planRefresh until ctx ends.
func (c *Controller) refreshPlans(ctx context.Context) {
	t := time.NewTicker(planRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.writePlans(ctx, now)
		}
	}
}

// runs lists the owned jobs' runs.
func (c *Controller) runs() []*jobRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	runs := make([]*jobRun, 0, len(c.owned))
	for _, jr := range c.owned {
		runs = append(runs, jr)
	}
	return runs
}

// writeStatuses puts the status of every job running here.
func (c *Controller) writeStatuses(ctx context.Context, now time.Time) {
	for _, jr := range c.runs() {
		c.writeStatus(ctx, jr, now)
	}
}

func (c *Controller) writeStatus(ctx context.Context, jr *jobRun, now time.Time) {
	jr.statusMu.Lock()
	defer jr.statusMu.Unlock()
	s, ok := c.status(jr, now)
	if !ok {
		return
	}
	// Under jr.mu, and only while the run is open: cleanup closes it
	// before deleting the job's series, which must not come back.
	jr.mu.Lock()
	if !jr.closed {
		c.jm.observe(s)
	}
	jr.mu.Unlock()
	if err := c.putStatus(ctx, s); err != nil && ctx.Err() == nil {
		c.m.statusErr.Inc()
		c.log.Warn("writing job status", "job", jr.id, "err", err)
	}
}

// status builds jr's status now; false while the job is not running here
// yet or its last status is written.
func (c *Controller) status(jr *jobRun, now time.Time) (wire.JobStatus, bool) {
	job, res, prev, ok := jr.snapshot()
	if !ok {
		return wire.JobStatus{}, false
	}
	jr.mu.Lock()
	backlog, givenUp := jr.backlog, jr.givenUp
	jr.mu.Unlock()
	replicas, reason := c.runner.Decision(jr.id)
	return buildStatus(statusInputs{
		job: job, owner: c.opts.ID, results: res, backlog: c.backlogCounts(jr.id, backlog, now), prev: prev, givenUp: givenUp,
		signals:  c.readerSignals(jr.id, now),
		replicas: replicas, ready: c.opts.Actuator.Ready(jr.id), reason: reason,
		stale: c.opts.Autoscale.DemandStale,
	}, now), true
}

// listenResults subscribes to every job's shard results
// (wire.ResultSubjects) and counts those of the jobs running here, until
// stop is called.
func (c *Controller) listenResults() (stop func(), err error) {
	prefix := strings.TrimSuffix(wire.ResultSubjects, "*")
	sub, err := c.opts.NC.Subscribe(wire.ResultSubjects, func(m *nats.Msg) {
		c.onResult(strings.TrimPrefix(m.Subject, prefix), m.Data)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", wire.ResultSubjects, err)
	}
	if err := c.opts.NC.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribing to %s: %w", wire.ResultSubjects, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// onResult counts one shard result of job (named by its subject: a
// result cannot speak for another job).
func (c *Controller) onResult(job string, data []byte) {
	c.mu.Lock()
	jr := c.owned[job]
	c.mu.Unlock()
	if jr == nil {
		c.m.results.WithLabelValues("ignored").Inc()
		return
	}
	var r wire.ShardResult
	if err := json.Unmarshal(data, &r); err != nil {
		c.m.results.WithLabelValues("malformed").Inc()
		jr.log.Warn("ignoring a malformed shard result", "err", err)
		return
	}
	if !jr.addResult(r, func(kind resultKind, read bool) { c.countResult(jr, r, kind, read) }) {
		c.m.results.WithLabelValues("ignored").Inc()
	}
}

// countResult updates the metrics for a result of jr's job, and logs
// shards given up on.
func (c *Controller) countResult(jr *jobRun, r wire.ShardResult, kind resultKind, read bool) {
	switch kind {
	case resultIgnored:
		c.m.results.WithLabelValues("ignored").Inc()
	case resultMalformed:
		c.m.results.WithLabelValues("malformed").Inc()
		jr.log.Warn("ignoring a shard result naming no task of the job or with a count out of bounds",
			"epoch", r.End.Epoch, "shard", r.End.Shard, "agent", r.Agent, "err", r.CheckCounts())
	default:
		c.m.results.WithLabelValues("counted").Inc()
	}
	switch kind {
	case resultDone:
		c.jm.done.WithLabelValues(jr.id).Inc()
	case resultFailed:
		c.jm.failed.WithLabelValues(jr.id).Inc()
		jr.log.Warn("shard given up on", "epoch", r.End.Epoch, "shard", r.End.Shard, "key", r.Key, "agent", r.Agent, "err", r.Error)
	case resultReplay:
		c.jm.replays.WithLabelValues(jr.id).Inc()
		if r.Error != "" {
			// The reader waits for these samples: say loudly that they will not come.
			jr.log.Error("replay failed: a resumed reader will miss this shard's samples",
				"epoch", r.End.Epoch, "shard", r.End.Shard, "key", r.Key, "agent", r.Agent, "err", r.Error)
		}
	}
	if read {
		c.jm.shardReads.WithLabelValues(jr.id, r.End.Cache).Inc()
		c.jm.readBytes.WithLabelValues(jr.id, "s3").Add(float64(r.End.S3Bytes))
		c.jm.readBytes.WithLabelValues(jr.id, "cache").Add(float64(r.End.CacheBytes))
	}
}

func (c *Controller) putStatus(ctx context.Context, s wire.JobStatus) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encoding status of job %s: %w", s.Job, err)
	}
	if _, err := c.statusKV.Put(ctx, s.Job, data); err != nil {
		return fmt.Errorf("writing status of job %s: %w", s.Job, err)
	}
	return nil
}

// readStatus returns the status stored for job, zero if none.
func (c *Controller) readStatus(ctx context.Context, job wire.Job) (wire.JobStatus, error) {
	id := job.Spec.ID
	e, err := c.statusKV.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.JobStatus{}, nil
	}
	if err != nil {
		return wire.JobStatus{}, fmt.Errorf("reading status of job %s: %w", id, err)
	}
	var s wire.JobStatus
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return wire.JobStatus{}, fmt.Errorf("decoding status of job %s: %w", id, err)
	}
	// A status older than the submission is an earlier job's under this id
	// (deleted while its controller was down): nothing to carry over.
	if s.Job != id || s.Updated.Before(job.Submitted) {
		return wire.JobStatus{}, nil
	}
	return s, nil
}

// wants says whether this controller should own job id: its record exists
// and is not terminal, and the controller is not stopping.
func (c *Controller) wants(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.known[id]
	return ok && !j.State.Terminal() && !c.closing
}

// setKnown records the latest record of a job this controller changed.
func (c *Controller) setKnown(job wire.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.known[job.Spec.ID]; ok {
		c.known[job.Spec.ID] = job
	}
}

// wake asks the lease keeper for a round now.
func (c *Controller) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// tickSoon asks the control loop for a round now.
func (c *Controller) tickSoon() {
	select {
	case c.tickNow <- struct{}{}:
	default:
	}
}

// stopJob stops the run of job id, if this controller has one, for why;
// it returns once the run has cleaned up.
func (c *Controller) stopJob(id string, why stopReason) {
	c.mu.Lock()
	jr := c.owned[id]
	if jr == nil || jr.stopping != stopNone {
		c.mu.Unlock()
		return
	}
	jr.stopping = why
	c.mu.Unlock()
	c.log.Info("stopping job", "job", id, "why", why)
	jr.cancel()
	<-jr.done
}

// stopJobAsync stops a job from a loop or timer that must not wait for
// it. Once the controller is closing, shutdown stops every job itself.
func (c *Controller) stopJobAsync(id string, why stopReason) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.stops.Add(1)
	go func() {
		defer c.stops.Done()
		c.stopJob(id, why)
	}()
}

// shutdown stops every owned job, then releases their leases (unless
// abandoning them).
func (c *Controller) shutdown() {
	c.mu.Lock()
	c.closing = true
	why := stopShutdown
	if c.opts.Abandon {
		why = stopAbandon
	}
	ids := make([]string, 0, len(c.owned))
	for id := range c.owned {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() { c.stopJob(id, why) })
	}
	wg.Wait()
	c.stops.Wait()
	if c.opts.Abandon {
		c.log.Info("controller abandoned its jobs", "jobs", len(ids))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for _, id := range ids {
		c.releaseLease(ctx, id)
	}
	c.log.Info("controller stopped", "jobs_released", len(ids))
}
