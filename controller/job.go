package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// stopReason says why a job's run was stopped from outside.
type stopReason int

const (
	stopNone      stopReason = iota
	stopCancelled            // the record turned cancelled
	stopDeleted              // the record disappeared
	stopLost                 // the lease was not renewed in time, or taken
	stopShutdown             // the controller stops and hands its jobs over
	stopAbandon              // the controller stops as if killed (Options.Abandon)
	stopInvalid              // the record turned invalid (broker.CheckRecord)
)

var stopReasonNames = [...]string{"", "cancelled", "deleted", "lease lost", "shutdown", "abandoned", "invalid record"}

func (r stopReason) String() string { return stopReasonNames[r] }

// retryPause spaces attempts at a job step that failed for a reason that
// may pass (NATS unreachable, a replica pool not there yet).
const retryPause = time.Second

// jobRun is one owned job: its goroutine moves it to running, keeps its
// backlog, waits for its readers, finishes it and cleans up.
type jobRun struct {
	id       string
	cancel   context.CancelFunc // ends the run's context (runJob's)
	done     chan struct{}
	log      *slog.Logger
	watchdog *time.Timer
	margin   time.Duration
	stopping stopReason // guarded by Controller.mu

	statusMu sync.Mutex // one status write at a time; final after the last
	planMu   sync.Mutex // one plan write at a time; the delete after the last
	mu       sync.Mutex
	job      wire.Job
	prev     wire.JobStatus
	results  *jobResults // the agents' shard results; nil until running
	// givenUp is the agents' durable record of tasks given up
	// (wire.ShardsFailedKey), read once every reader is through.
	givenUp  wire.ShardsFailed
	backlog  *taskBacklog // nil until running
	final    bool         // the last status is written
	closed   bool         // cleaning up: results are no longer counted
	lastPlan wire.DispatchPlan
	planned  bool // lastPlan was written
}

// leaseRenewed moves the watchdog to the renewed lease's expiry - margin.
func (jr *jobRun) leaseRenewed(l wire.Lease) {
	jr.watchdog.Reset(time.Until(l.Expires.Add(-jr.margin)))
}

// snapshot is what a status is built from; ok is false until the job runs
// here, and once its last status is written.
func (jr *jobRun) snapshot() (job wire.Job, res resultCounts, prev wire.JobStatus, ok bool) {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if jr.results == nil || jr.final {
		return jr.job, resultCounts{}, jr.prev, false
	}
	return jr.job, jr.results.snapshot(), jr.prev, true
}

// running returns the job's record and whether it runs here: it is
// running, and not ending.
func (jr *jobRun) running() (wire.Job, bool) {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	return jr.job, jr.results != nil && !jr.final && !jr.closed
}

// addResult counts one of the agents' shard results and calls counted
// with what it changed, before cleanup can delete the job's series; false
// if the run does not take results (not running yet, or ending).
func (jr *jobRun) addResult(r wire.ShardResult, counted func(kind resultKind, read bool)) bool {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if jr.results == nil || jr.closed {
		return false
	}
	counted(jr.results.add(r))
	return true
}

// startJob starts a run of job id under the lease l just written.
func (c *Controller) startJob(id string, l wire.Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.owned[id] != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	jr := &jobRun{id: id, cancel: cancel, done: make(chan struct{}),
		log: c.log.With("job", id), margin: stopMargin(c.opts.LeaseTTL), job: c.known[id]}
	jr.watchdog = time.AfterFunc(time.Until(l.Expires.Add(-jr.margin)), func() {
		jr.log.Warn("lease not renewed in time; stopping the job", "expires", l.Expires)
		c.m.lost.Inc()
		c.stopJobAsync(id, stopLost)
	})
	c.owned[id] = jr
	c.m.owned.Set(float64(len(c.owned)))
	go c.runJob(ctx, jr)
}

// ending is how a run's work ended.
type ending int

const (
	endStopped  ending = iota // its context ended: stopped from outside
	endGone                   // the job was cancelled or deleted, or is already finished
	endFinished               // this run finished it (job holds the terminal record)
)

func (c *Controller) runJob(ctx context.Context, jr *jobRun) {
	defer close(jr.done)
	end, final := c.work(ctx, jr)
	c.cleanup(jr, end, final)
}

// taskConsumer opens job id's task consumer, which its Submit created,
// with this controller's ack wait. One missing while the job is not
// finished (submitted by a broker that left it to the controller) is
// created.
func (c *Controller) taskConsumer(ctx context.Context, id string) (jetstream.Consumer, error) {
	cfg := streams.Dispatch(id, c.opts.TaskAckWait)
	cons, err := c.opts.JS.Consumer(ctx, wire.TaskStream, cfg.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		if c.jobGone(ctx, id) {
			return nil, fmt.Errorf("job %s: task consumer %s: %w", id, cfg.Durable, err)
		}
		cons, err = c.opts.JS.CreateConsumer(ctx, wire.TaskStream, cfg)
		if err != nil {
			return nil, fmt.Errorf("job %s: creating task consumer %s: %w", id, cfg.Durable, err)
		}
		return cons, nil
	case err != nil:
		return nil, fmt.Errorf("job %s: opening task consumer %s: %w", id, cfg.Durable, err)
	}
	if cons.CachedInfo().Config.AckWait == cfg.AckWait {
		return cons, nil
	}
	// UpdateConsumer, not CreateOrUpdate: a consumer a cancel deleted
	// meanwhile stays deleted.
	if cons, err = c.opts.JS.UpdateConsumer(ctx, wire.TaskStream, cfg); err != nil {
		return nil, fmt.Errorf("job %s: setting the ack wait of task consumer %s: %w", id, cfg.Durable, err)
	}
	return cons, nil
}

// pollBacklog reads the task consumer's counts into backlog.
func (c *Controller) pollBacklog(ctx context.Context, cons jetstream.Consumer, backlog *taskBacklog) error {
	ictx, cancel := context.WithTimeout(ctx, backlogPoll)
	defer cancel()
	info, err := cons.Info(ictx)
	if err != nil {
		return err
	}
	if backlog.set(int(info.NumPending) + info.NumAckPending) {
		c.tickSoon() // a job's first tasks decide at once (a submit queues them after the record)
	}
	return nil
}

// finish sets the job's terminal state (from queued or running, or from
// any state not terminal of an invalid record).
func (c *Controller) finish(ctx context.Context, jr *jobRun, state wire.JobState, reason string) (ending, wire.Job) {
	for {
		rec, err := c.opts.Broker.Transition(ctx, jr.id, state, reason, func(from wire.JobState) bool {
			return !from.Terminal()
		})
		if err == nil {
			c.setKnown(rec)
			jr.log.Info("job finished", "state", state, "reason", reason)
			return endFinished, rec
		}
		if errors.Is(err, broker.ErrTransition) || errors.Is(err, broker.ErrJobNotFound) {
			return endGone, wire.Job{}
		}
		if !c.pause(ctx, jr, "finishing job", err) {
			return endStopped, wire.Job{}
		}
	}
}

// errInvalidRecord is wrapped by toRunning's error for a record that
// fails broker.CheckRecord.
var errInvalidRecord = errors.New("invalid job record")

// toRunning moves job id from queued to running; a job already running
// (taken over) is left as it is. A record that is not valid is not acted
// on: errInvalidRecord says why.
func (c *Controller) toRunning(ctx context.Context, id string) (wire.Job, error) {
	job, err := c.opts.Broker.Job(ctx, id)
	if err != nil {
		return wire.Job{}, err
	}
	if err := broker.CheckRecord(id, job); err != nil {
		return wire.Job{}, fmt.Errorf("%w: %w", errInvalidRecord, err)
	}
	if job.State == wire.JobRunning {
		return job, nil
	}
	return c.opts.Broker.Transition(ctx, id, wire.JobRunning, "", func(from wire.JobState) bool {
		return from == wire.JobQueued || from == wire.JobRunning
	})
}

// pause logs a failed step and waits retryPause; false if ctx ended.
func (c *Controller) pause(ctx context.Context, jr *jobRun, what string, err error) bool {
	jr.log.Warn(what+"; retrying", "err", err)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(retryPause):
		return true
	}
}

// jobGone reports whether job id's record is missing or terminal.
func (c *Controller) jobGone(ctx context.Context, id string) bool {
	job, err := c.opts.Broker.Job(ctx, id)
	if errors.Is(err, broker.ErrJobNotFound) {
		return true
	}
	return err == nil && job.State.Terminal()
}

// readersDone reports whether every declared reader is through: its agent
// wrote that every rank reached the end of the last epoch
// (wire.ReaderDoneKey), which it does once every sample of every epoch
// was handed out. Until the trainer has its last batch it may crash and
// resume from a checkpoint, and needs the job (shards produced again)
// alive.
func (c *Controller) readersDone(ctx context.Context, job wire.Job) (bool, error) {
	for _, r := range job.Spec.Readers {
		e, err := c.readersKV.Get(ctx, wire.ReaderDoneKey(job.Spec.ID, r))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("job %s reader %s: reading %s: %w", job.Spec.ID, r, wire.ReaderDoneKey(job.Spec.ID, r), err)
		}
		done, _, err := wire.ReadReaderDone(job, e.Key(), e.Value())
		if errors.Is(err, wire.ErrNodeSeal) {
			// Not its reader's agent's: the job goes on.
			if prev, seen := c.refusedDone.Swap(job.Spec.ID+"/"+r, e.Revision()); !seen || prev != e.Revision() {
				c.m.sealRefused.WithLabelValues("done_record").Inc()
				if ok, left := c.sealLogs.Allow("done_record", time.Now()); ok {
					c.log.Warn("refused a reader's done record", "job", job.Spec.ID, "reader", r, "revision", e.Revision(), "unlogged_since", left, "err", err)
				}
			}
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("job %s reader %s: %w", job.Spec.ID, r, err)
		}
		if !done.Submitted.Equal(job.Submitted) {
			return false, nil // an earlier job's under this id
		}
	}
	for _, r := range job.Spec.Readers {
		c.refusedDone.Delete(job.Spec.ID + "/" + r)
	}
	return true, nil
}

// shardsFailed reads the agents' record of the job's tasks given up; none
// is an empty record, as is one of an earlier submission under the id.
func (c *Controller) shardsFailed(ctx context.Context, job wire.Job) (wire.ShardsFailed, error) {
	key := wire.ShardsFailedKey(job.Spec.ID)
	e, err := c.readersKV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.ShardsFailed{}, nil
	}
	if err != nil {
		return wire.ShardsFailed{}, fmt.Errorf("reading %s: %w", key, err)
	}
	var rec wire.ShardsFailed
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return wire.ShardsFailed{}, fmt.Errorf("decoding %s: %w", key, err)
	}
	if !rec.Submitted.Equal(job.Submitted) {
		return wire.ShardsFailed{}, nil
	}
	return rec, nil
}

// cleanup ends a run: replicas to zero, series deleted, the dispatch plan
// deleted, a finished or cancelled job's tasks released and its last
// status written, the lease released, and the run forgotten. A run
// abandoned (simulated crash) only stops; one whose lease was lost leaves
// the plan to the job's new owner.
func (c *Controller) cleanup(jr *jobRun, end ending, final wire.Job) {
	jr.watchdog.Stop()
	jr.cancel()
	c.mu.Lock()
	why := jr.stopping
	c.mu.Unlock()
	jr.mu.Lock()
	jr.closed = true
	jr.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.owned, jr.id)
		c.m.owned.Set(float64(len(c.owned)))
		c.mu.Unlock()
	}
	if why == stopAbandon {
		forget()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	// The last status first, while the readers' signals are still kept.
	cancelled := false
	switch {
	case end == endFinished:
		c.writeFinalStatus(ctx, jr, final)
		c.m.finished.WithLabelValues(string(final.State)).Inc()
	case why == stopCancelled || end == endGone:
		if rec, err := c.opts.Broker.Job(ctx, jr.id); err == nil && rec.State.Terminal() {
			c.writeFinalStatus(ctx, jr, rec)
			cancelled = rec.State == wire.JobCancelled
		}
	}
	c.runner.RemoveJob(jr.id)
	c.demandMu.Lock()
	c.demand.removeJob(jr.id)
	c.demandMu.Unlock()
	if err := c.opts.Actuator.Scale(ctx, jr.id, 0); err != nil {
		jr.log.Warn("scaling replicas to zero", "err", err)
	}
	c.jm.DeleteJob(jr.id)
	if why != stopLost {
		// After any plan write under way: none follows, the run is closed.
		jr.planMu.Lock()
		if err := c.deletePlan(ctx, jr.id); err != nil {
			jr.log.Warn("deleting the dispatch plan", "err", err)
		}
		jr.planMu.Unlock()
	}
	// A cancel released the job already; again, in case the run made
	// the task consumer anew meanwhile.
	if end == endFinished || cancelled {
		if err := c.opts.Broker.Release(ctx, jr.id); err != nil {
			jr.log.Warn("releasing the job's tasks", "err", err)
		}
	}
	forget()
	switch why {
	case stopLost, stopShutdown: // not ours any more; shutdown releases after every job stopped
	default:
		c.releaseLease(ctx, jr.id)
	}
	c.wake()
}

// writeFinalStatus writes the job's status with its terminal record; no
// tick writes after it.
func (c *Controller) writeFinalStatus(ctx context.Context, jr *jobRun, rec wire.Job) {
	jr.statusMu.Lock()
	defer jr.statusMu.Unlock()
	s, ok := c.status(jr, time.Now())
	jr.mu.Lock()
	jr.final = true
	job, prev := jr.job, jr.prev
	jr.mu.Unlock()
	if !ok { // the job never ran here
		if job.Spec.ID == "" {
			job = wire.Job{Spec: wire.JobSpec{ID: rec.Spec.ID}}
			if broker.CheckRecord(rec.Spec.ID, rec) == nil { // sized by, only when valid
				job = rec
			}
		}
		s = buildStatus(statusInputs{job: job, owner: c.opts.ID, prev: prev}, time.Now())
	}
	s.State, s.Reason = rec.State, rec.Reason
	// Written as the job ends: cleanup scales it to zero right after.
	s.Replicas, s.ReadyReplicas, s.ScaleReason = 0, 0, "job "+string(rec.State)+": released"
	if err := c.putStatus(ctx, s); err != nil {
		jr.log.Warn("writing the final status", "err", err)
	}
}
