package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// ErrTransition means a job is not in a state the asked change may leave.
var ErrTransition = errors.New("job state does not allow this change")

// casRetries bounds how often Transition re-reads a record that changed
// under it.
const casRetries = 16

// Transition moves job id to state to with reason, by compare-and-set on
// the record, if allowed(from) holds for its current state (nil: any);
// otherwise it returns the record as it is and an error wrapping
// ErrTransition that names the state. It returns the record as written.
func (b *Broker) Transition(ctx context.Context, id string, to wire.JobState, reason string, allowed func(from wire.JobState) bool) (wire.Job, error) {
	if err := wire.ValidateJobID(id); err != nil {
		return wire.Job{}, err
	}
	kv, err := b.jobsBucket(ctx)
	if err != nil {
		return wire.Job{}, err
	}
	for range casRetries {
		job, rev, err := readRecord(ctx, kv, id)
		if err != nil {
			return wire.Job{}, err
		}
		if allowed != nil && !allowed(job.State) {
			return job, fmt.Errorf("job %s is %s: %w to %s", id, job.State, ErrTransition, to)
		}
		job.State, job.Reason, job.Updated = to, reason, time.Now().UTC()
		data, err := json.Marshal(job)
		if err != nil {
			return wire.Job{}, fmt.Errorf("encoding job %s record: %w", id, err)
		}
		if _, err := kv.Update(ctx, id, data, rev); err != nil {
			if streams.IsCASConflict(err) {
				continue // changed under us: read again
			}
			return wire.Job{}, fmt.Errorf("updating job %s record: %w", id, err)
		}
		return job, nil
	}
	return wire.Job{}, fmt.Errorf("job %s: record kept changing; gave up after %d tries", id, casRetries)
}

// Release removes what a job no longer needs once it is finished or
// cancelled: its task consumer (its agents then stop taking tasks), its
// remaining tasks and its dispatch plan. The record, with its state, stays
// until Delete. It is idempotent.
func (b *Broker) Release(ctx context.Context, id string) error {
	if err := wire.ValidateJobID(id); err != nil {
		return err
	}
	if _, err := b.buckets(ctx); err != nil { // the task stream exists
		return err
	}
	_, err := b.release(ctx, id)
	return err
}

// release is Release, saying whether the consumer or the plan existed.
func (b *Broker) release(ctx context.Context, id string) (found bool, err error) {
	kvs, err := b.buckets(ctx)
	if err != nil {
		return false, err
	}
	name := wire.DispatchConsumer(id)
	switch err := b.js.DeleteConsumer(ctx, wire.TaskStream, name); {
	case err == nil:
		found = true
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return found, fmt.Errorf("job %s: deleting task consumer %s: %w", id, name, err)
	}
	tasks, err := b.js.Stream(ctx, wire.TaskStream)
	if err != nil {
		return found, fmt.Errorf("job %s: opening stream %s: %w", id, wire.TaskStream, err)
	}
	if err := tasks.Purge(ctx, jetstream.WithPurgeSubject(wire.TaskSubject(id))); err != nil {
		return found, fmt.Errorf("job %s: purging tasks: %w", id, err)
	}
	gone, err := purgeKey(ctx, kvs.dispatch, id)
	if err != nil {
		return found, fmt.Errorf("job %s: deleting dispatch plan: %w", id, err)
	}
	return found || gone, nil
}

// Cancel stops job id for good: its record turns cancelled with reason
// (compare-and-set, from queued or running), then Release removes its
// tasks, its task consumer and its dispatch plan. It needs no controller; one owning the job sees the state and
// lets the job go. A finished job is refused with an error wrapping
// ErrTransition that names its state; one already cancelled is released
// again before that error, so a Cancel whose Release failed can be retried.
func (b *Broker) Cancel(ctx context.Context, id, reason string) (wire.Job, error) {
	if reason == "" {
		reason = "cancelled"
	}
	job, err := b.Transition(ctx, id, wire.JobCancelled, reason, func(from wire.JobState) bool {
		return from == wire.JobQueued || from == wire.JobRunning
	})
	if errors.Is(err, ErrTransition) {
		if job.State == wire.JobCancelled {
			if rerr := b.Release(ctx, id); rerr != nil {
				return job, rerr
			}
		}
		return job, fmt.Errorf("job %s is already %s: only a queued or running job can be cancelled: %w", id, job.State, ErrTransition)
	}
	if err != nil {
		return wire.Job{}, err
	}
	if err := b.Release(ctx, id); err != nil {
		return job, fmt.Errorf("job %s is cancelled, but releasing it failed (cancel again to retry): %w", id, err)
	}
	b.log.Info("job cancelled", "job", id, "reason", reason)
	return job, nil
}
