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

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/broker"
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
)

var stopReasonNames = [...]string{"", "cancelled", "deleted", "lease lost", "shutdown", "abandoned"}

func (r stopReason) String() string { return stopReasonNames[r] }

// retryPause spaces attempts at a job step that failed for a reason that
// may pass (NATS unreachable, a replica pool not there yet).
const retryPause = time.Second

// jobRun is one owned job: its goroutine moves it to running, dispatches
// its tasks, waits for its readers, finishes it and cleans up.
type jobRun struct {
	id       string
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	log      *slog.Logger
	watchdog *time.Timer
	margin   time.Duration
	stopping stopReason // guarded by Controller.mu

	statusMu sync.Mutex // one status write at a time; final after the last
	mu       sync.Mutex
	job      wire.Job
	disp     *broker.Dispatcher
	prev     wire.JobStatus
	final    bool
}

// leaseRenewed moves the watchdog to the renewed lease's expiry - margin.
func (jr *jobRun) leaseRenewed(l wire.Lease) {
	jr.watchdog.Reset(time.Until(l.Expires.Add(-jr.margin)))
}

func (jr *jobRun) snapshot() (wire.Job, *broker.Dispatcher, wire.JobStatus, bool) {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	return jr.job, jr.disp, jr.prev, jr.disp != nil && !jr.final
}

// startJob starts a run of job id under the lease l just written.
func (c *Controller) startJob(id string, l wire.Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.owned[id] != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	jr := &jobRun{id: id, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		log: c.log.With("job", id), margin: stopMargin(c.opts.LeaseTTL), job: c.known[id]}
	jr.watchdog = time.AfterFunc(time.Until(l.Expires.Add(-jr.margin)), func() {
		jr.log.Warn("lease not renewed in time; stopping the job", "expires", l.Expires)
		c.m.lost.Inc()
		c.stopJobAsync(id, stopLost)
	})
	c.owned[id] = jr
	c.m.owned.Set(float64(len(c.owned)))
	go c.runJob(jr)
}

// ending is how a run's work ended.
type ending int

const (
	endStopped  ending = iota // its context ended: stopped from outside
	endGone                   // the job was cancelled or deleted, or is already finished
	endFinished               // this run finished it (job holds the terminal record)
)

func (c *Controller) runJob(jr *jobRun) {
	defer close(jr.done)
	end, final := c.work(jr)
	c.cleanup(jr, end, final)
}

// work takes the job from queued (or running, after a takeover) to its
// terminal state; final is the terminal record when it finished it.
func (c *Controller) work(jr *jobRun) (ending, wire.Job) {
	ctx, id := jr.ctx, jr.id
	var job wire.Job
	for {
		var err error
		job, err = c.toRunning(ctx, id)
		if err == nil {
			break
		}
		if errors.Is(err, broker.ErrTransition) || errors.Is(err, broker.ErrJobNotFound) {
			jr.log.Info("job is not to run", "reason", err)
			return endGone, wire.Job{}
		}
		if !c.pause(ctx, jr, "moving job to running", err) {
			return endStopped, wire.Job{}
		}
	}
	c.setKnown(job)
	prev, err := c.readStatus(ctx, job)
	if err != nil {
		jr.log.Warn("no earlier status to carry over", "err", err)
	}
	jr.mu.Lock()
	jr.job, jr.prev = job, prev
	jr.mu.Unlock()
	if job.Tasks() == 0 {
		return c.finish(ctx, jr, wire.JobFailed, fmt.Sprintf("no tasks: %d shards x %d epochs", len(job.Shards), job.Spec.Epochs))
	}

	target := broker.NewLocalityTarget(id, c.opts.Actuator, c.opts.HTTPClient,
		broker.Locality{PerReplica: c.opts.ReplicaConcurrency, MaxWait: max(c.opts.LocalityWait, 0)})
	var capacity broker.ReadyReplicas = c.opts.Actuator
	if c.opts.Dispatch != nil {
		capacity = c.opts.Dispatch
	}
	var disp *broker.Dispatcher
	for {
		disp, err = broker.NewDispatcher(ctx, c.opts.JS, job, target, broker.DispatcherOptions{
			Replicas: capacity, PerReplica: c.opts.ReplicaConcurrency, AckWait: c.opts.TaskAckWait,
		}, jr.log.With("component", "dispatcher"), c.dm)
		if err == nil {
			jr.mu.Lock()
			jr.disp = disp
			jr.mu.Unlock()
			c.runner.AddJob(id, autoscale.Job{Backlog: disp,
				MinReplicas: job.Spec.MinReplicas, MaxReplicas: job.Spec.MaxReplicas,
				InitialReplicas: job.Spec.InitialReplicas, Weight: job.Spec.Weight, Readers: job.Spec.Readers})
			if err = disp.Run(ctx); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			return endStopped, wire.Job{}
		}
		// A cancel deletes the consumer: do not create it again.
		if c.jobGone(ctx, id) {
			return endGone, wire.Job{}
		}
		if !c.pause(ctx, jr, "dispatching", err) {
			return endStopped, wire.Job{}
		}
	}

	// Every task is settled: the replicas can go while the readers drain,
	// unless a reader resumed from a checkpoint needs shards again.
	replayCtx, stopReplays := context.WithCancel(ctx)
	replaysDone := make(chan struct{})
	go func() {
		defer close(replaysDone)
		if err := disp.ServeReplays(replayCtx); err != nil && replayCtx.Err() == nil {
			jr.log.Warn("serving replays", "err", err)
		}
	}()
	defer func() {
		stopReplays()
		<-replaysDone
	}()
	for {
		drained, err := c.readersDone(ctx, job)
		if drained {
			break
		}
		if err != nil && c.jobGone(ctx, id) {
			return endGone, wire.Job{}
		}
		if err != nil {
			jr.log.Debug("reading readers' consumers", "err", err)
		}
		select {
		case <-ctx.Done():
			return endStopped, wire.Job{}
		case <-time.After(c.opts.Tick):
		}
	}
	s, _ := c.status(jr, time.Now())
	st := disp.Stats()
	state, reason := Outcome(s, st.Done, st.FirstFailedSample)
	return c.finish(ctx, jr, state, reason)
}

// finish sets the job's terminal state.
func (c *Controller) finish(ctx context.Context, jr *jobRun, state wire.JobState, reason string) (ending, wire.Job) {
	for {
		rec, err := c.opts.Broker.Transition(ctx, jr.id, state, reason, func(from wire.JobState) bool {
			return from == wire.JobQueued || from == wire.JobRunning
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

// toRunning moves job id from queued to running; a job already running
// (taken over) is left as it is.
func (c *Controller) toRunning(ctx context.Context, id string) (wire.Job, error) {
	job, err := c.opts.Broker.Job(ctx, id)
	if err != nil {
		return wire.Job{}, err
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
// (wire.ReaderDoneKey), which it does once its consumer took and acked
// every chunk. Until the trainer has its last batch it may crash and
// resume from a checkpoint, and needs the job (its replays) alive. The
// consumer is not asked: another reader's replays may land on it after
// its agent finished, and nobody will ack those.
func (c *Controller) readersDone(ctx context.Context, job wire.Job) (bool, error) {
	for _, r := range job.Spec.Readers {
		e, err := c.readersKV.Get(ctx, wire.ReaderDoneKey(job.Spec.ID, r))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("job %s reader %s: reading %s: %w", job.Spec.ID, r, wire.ReaderDoneKey(job.Spec.ID, r), err)
		}
		var done wire.ReaderDone
		if err := json.Unmarshal(e.Value(), &done); err != nil {
			return false, fmt.Errorf("job %s reader %s: decoding %s: %w", job.Spec.ID, r, wire.ReaderDoneKey(job.Spec.ID, r), err)
		}
		if !done.Submitted.Equal(job.Submitted) {
			return false, nil // an earlier job's under this id
		}
	}
	return true, nil
}

// cleanup ends a run: replicas to zero, series deleted, a finished job's
// streams released and its last status written, the lease released, and
// the run forgotten. A run abandoned (simulated crash) only stops.
func (c *Controller) cleanup(jr *jobRun, end ending, final wire.Job) {
	jr.watchdog.Stop()
	jr.cancel()
	c.mu.Lock()
	why := jr.stopping
	c.mu.Unlock()
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
	switch {
	case end == endFinished:
		c.writeFinalStatus(ctx, jr, final)
		c.m.finished.WithLabelValues(string(final.State)).Inc()
	case why == stopCancelled || end == endGone:
		if rec, err := c.opts.Broker.Job(ctx, jr.id); err == nil && rec.State.Terminal() {
			c.writeFinalStatus(ctx, jr, rec)
		}
	}
	c.runner.RemoveJob(jr.id)
	if err := c.opts.Actuator.Scale(ctx, jr.id, 0); err != nil {
		jr.log.Warn("scaling replicas to zero", "err", err)
	}
	c.dm.DeleteJob(jr.id)
	if end == endFinished {
		if err := c.opts.Broker.Release(ctx, jr.id); err != nil {
			jr.log.Warn("releasing the job's streams", "err", err)
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
	if !ok { // no dispatcher ever ran
		if job.Spec.ID == "" {
			job = rec
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
