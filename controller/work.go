package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/wire"
)

// work takes the job from queued (or running, after a takeover) to its
// terminal state; final is the terminal record when it finished it.
func (c *Controller) work(ctx context.Context, jr *jobRun) (ending, wire.Job) {
	job, stop := c.toRunningJob(ctx, jr)
	if stop != nil {
		return stop.end, stop.final
	}
	cons, stop := c.openTasks(ctx, jr)
	if stop != nil {
		return stop.end, stop.final
	}
	backlog := c.addToRunner(jr, job, cons)
	if stop := c.awaitReaders(ctx, jr, job, cons, backlog); stop != nil {
		return stop.end, stop.final
	}
	s, _ := c.status(jr, time.Now())
	_, res, _, _ := jr.snapshot()
	state, reason := Outcome(s, res.Done, res.FirstFailedSample)
	return c.finish(ctx, jr, state, reason)
}

// workEnd is how work ends before the readers are through: what it returns.
type workEnd struct {
	end   ending
	final wire.Job
}

func stopWith(end ending, final wire.Job) *workEnd { return &workEnd{end, final} }

// toRunningJob moves the job to running, retrying while that fails for a
// reason that may pass, and carries its earlier status over.
func (c *Controller) toRunningJob(ctx context.Context, jr *jobRun) (wire.Job, *workEnd) {
	id := jr.id
	var job wire.Job
	for {
		var err error
		job, err = c.toRunning(ctx, id)
		if err == nil {
			break
		}
		if errors.Is(err, errInvalidRecord) {
			return job, stopWith(c.finish(ctx, jr, wire.JobFailed, cut(err.Error())))
		}
		if errors.Is(err, broker.ErrTransition) || errors.Is(err, broker.ErrJobNotFound) {
			jr.log.Info("job is not to run", "reason", err)
			return job, stopWith(endGone, wire.Job{})
		}
		if !c.pause(ctx, jr, "moving job to running", err) {
			return job, stopWith(endStopped, wire.Job{})
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
		return job, stopWith(c.finish(ctx, jr, wire.JobFailed, fmt.Sprintf("no tasks: %d shards x %d epochs", len(job.Shards), job.Spec.Epochs)))
	}
	return job, nil
}

// openTasks opens the job's task consumer, retrying while that fails for
// a reason that may pass.
func (c *Controller) openTasks(ctx context.Context, jr *jobRun) (jetstream.Consumer, *workEnd) {
	id := jr.id
	for {
		cons, err := c.taskConsumer(ctx, id)
		if err == nil {
			return cons, nil
		}
		if ctx.Err() != nil {
			return nil, stopWith(endStopped, wire.Job{})
		}
		// A cancel deletes the consumer: do not create it again.
		if c.jobGone(ctx, id) {
			return nil, stopWith(endGone, wire.Job{})
		}
		if !c.pause(ctx, jr, "opening the task consumer", err) {
			return nil, stopWith(endStopped, wire.Job{})
		}
	}
}

// addToRunner gives the job to the autoscaler, and starts keeping its
// agents' signals and its backlog.
func (c *Controller) addToRunner(jr *jobRun, job wire.Job, cons jetstream.Consumer) *taskBacklog {
	id := jr.id
	var check *wire.NodeVerifier
	if job.NodeKey != "" {
		// CheckRecord checked the key: this cannot fail.
		check, _ = wire.NewNodeVerifier(id, job.NodeKey)
	}
	c.demandMu.Lock()
	c.demand.addJob(id, job.Spec.Readers)
	c.demand.sealedBy(id, check)
	c.demandMu.Unlock()
	backlog := &taskBacklog{}
	info := cons.CachedInfo()
	arrived := backlog.set(int(info.NumPending) + info.NumAckPending)
	jr.mu.Lock()
	jr.results, jr.backlog = newJobResults(job), backlog
	jr.mu.Unlock()
	c.runner.AddJob(id, autoscale.Job{
		MinReplicas: job.Spec.MinReplicas, MaxReplicas: job.Spec.MaxReplicas,
		InitialReplicas: job.Spec.InitialReplicas, Weight: job.Spec.Weight})
	if arrived {
		c.tickSoon() // a job at zero with tasks decides now, not a tick later
	}
	return backlog
}

// awaitReaders keeps the backlog while the agents do the work, and waits
// for every reader to be through; then notes the tasks given up.
func (c *Controller) awaitReaders(ctx context.Context, jr *jobRun, job wire.Job, cons jetstream.Consumer, backlog *taskBacklog) *workEnd {
	id := jr.id
	start := time.Now()
	polled := start
	for {
		every := pollEvery(backlog.seenTasks(), time.Since(start))
		if now := time.Now(); now.Sub(polled) >= every {
			polled = now
			if err := c.pollBacklog(ctx, cons, backlog); err != nil {
				if ctx.Err() != nil {
					return stopWith(endStopped, wire.Job{})
				}
				if c.jobGone(ctx, id) {
					return stopWith(endGone, wire.Job{})
				}
				jr.log.Warn("reading the task consumer", "err", err)
			}
		}
		drained, err := c.readersDone(ctx, job)
		if drained {
			rec, err := c.shardsFailed(ctx, job)
			if err != nil && ctx.Err() == nil {
				jr.log.Warn("reading the tasks the agents gave up; counting their results alone", "err", err)
			}
			jr.mu.Lock()
			jr.givenUp = rec
			jr.mu.Unlock()
			return nil
		}
		if err != nil && c.jobGone(ctx, id) {
			return stopWith(endGone, wire.Job{})
		}
		if err != nil {
			jr.log.Debug("reading readers' progress", "err", err)
		}
		select {
		case <-ctx.Done():
			return stopWith(endStopped, wire.Job{})
		case <-time.After(min(c.opts.Tick, every)):
		}
	}
}
