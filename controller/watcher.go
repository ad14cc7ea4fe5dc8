package controller

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/wire"
)

// rewatchPause keeps a failing watch from spinning.
const rewatchPause = time.Second

// watchJobs follows the job records until ctx ends, watching again when
// a watch breaks.
func (c *Controller) watchJobs(ctx context.Context) {
	for ctx.Err() == nil {
		if err := c.watchOnce(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("watching jobs; watching again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(rewatchPause):
		}
	}
}

// watchOnce reads every job record, then each change, until the watch
// ends. A rewatch replays every record, so what was missed is caught up.
func (c *Controller) watchOnce(ctx context.Context) error {
	w, err := c.jobsKV.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errWatchClosed
			}
			if e == nil { // every record read once
				c.synced.Store(true)
				c.wake()
				continue
			}
			c.observe(e)
		}
	}
}

var errWatchClosed = errors.New("job watch closed")

// observe applies one change of a job record.
func (c *Controller) observe(e jetstream.KeyValueEntry) {
	id := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		c.mu.Lock()
		delete(c.known, id)
		c.mu.Unlock()
		c.stopJobAsync(id, stopDeleted)
		return
	}
	var job wire.Job
	if err := json.Unmarshal(e.Value(), &job); err != nil {
		// Nothing to run and nothing to mark failed: as if deleted.
		c.m.invalidRecords.Inc()
		c.log.Warn("ignoring an undecodable job record", "job", id, "err", err)
		c.mu.Lock()
		delete(c.known, id)
		c.mu.Unlock()
		c.stopJobAsync(id, stopInvalid)
		return
	}
	invalid := broker.CheckRecord(id, job)
	if invalid != nil {
		// Kept as its id and state only, for the lease keeper: the owner's
		// run marks it failed with the reason (toRunning) rather than
		// running it; a run under way stops first.
		c.m.invalidRecords.Inc()
		c.log.Warn("job record is not valid; it is not run", "job", id, "state", job.State, "err", cut(invalid.Error()))
		job = wire.Job{Spec: wire.JobSpec{ID: id}, State: job.State}
	}
	c.mu.Lock()
	_, had := c.known[id]
	c.known[id] = job
	c.mu.Unlock()
	switch {
	case job.State == wire.JobCancelled:
		c.stopJobAsync(id, stopCancelled)
	case invalid != nil && !job.State.Terminal():
		c.stopJobAsync(id, stopInvalid)
		c.wake()
	case !job.State.Terminal() && !had:
		c.wake() // a new job: compete for it now
	}
}

// watchLeases wakes the lease keeper whenever a lease is released, so a
// standby takes a job handed over by a controller that stopped cleanly at
// once rather than on its next round.
func (c *Controller) watchLeases(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := c.leasesKV.WatchAll(ctx, jetstream.UpdatesOnly())
		if err == nil {
			c.followLeases(ctx, w)
		} else if ctx.Err() == nil {
			c.log.Warn("watching leases; watching again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(rewatchPause):
		}
	}
}

func (c *Controller) followLeases(ctx context.Context, w jetstream.KeyWatcher) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil && e.Operation() != jetstream.KeyValuePut {
				c.wake()
			}
		}
	}
}
