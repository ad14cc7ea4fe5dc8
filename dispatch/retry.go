package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// retries is one task's failed sends in one send loop, kept apart by what
// they say about the task: the one rule for a task from the queue and for
// a shard produced again (Produce).
type retries struct {
	// busy counts refusals of a busy replica (429, 503): the pool's state,
	// not the task's, never counted against MaxDeliver.
	busy int
	// failures counts the failures that count against MaxDeliver.
	failures int
}

// after counts a failed send of kind and says how long to wait before the
// next send, or that the task fails for good (giveUp): a permanent
// failure, or the maxDeliver-th failure that is the task's. jitter is the
// caller's random draw in [0, 1) (RetryDelay).
func (r *retries) after(kind failKind, maxDeliver int, jitter float64) (delay time.Duration, giveUp bool) {
	switch kind {
	case failPermanent:
		return 0, true
	case failBusy:
		r.busy++
		return RetryDelay(r.busy, jitter), false
	}
	r.failures++
	if r.failures >= maxDeliver {
		return 0, true
	}
	return RetryDelay(r.failures, jitter), false
}

// sendHooks let a caller of sendUntilDone keep its own books; nil hooks
// are skipped.
type sendHooks struct {
	// begin runs before each send, its replica taken: false stops the
	// loop with errNotHeld (the task was settled meanwhile).
	begin func() bool
	// refused runs after a busy replica refused a send.
	refused func()
	// wait runs before each frame of a reply is read (the sink's room).
	wait func() error
}

// errNotHeld ends a send loop whose task the dispatcher no longer holds.
var errNotHeld = errors.New("task no longer held")

// sendUntilDone sends task to the replicas of the job's plan, handing
// each chunk to chunk, until its shard ends (its end returned), it fails
// for good (a permanent failure, or MaxDeliver failed sends that were the
// task's: the error says which), or ctx ends (ctx's error). A busy
// replica (429, 503) is retried with backoff for as long as it takes, as
// a replica missing from the plan is waited for: neither is the task's
// fault. Each retry avoids the replica that failed if another will do.
// It is the one send loop of the dispatcher: its queue's tasks (send)
// and Produce both use it.
func (d *Dispatcher) sendUntilDone(ctx context.Context, task wire.ShardTask, chunk func(int, []byte) error, h sendHooks) (wire.ShardEnd, error) {
	key := shardKey(task.Bucket, task.Key)
	// The sink widens what a function leaves to it (Sink.Chunk): a
	// quarter of the bytes on the wire for a float32 image job.
	sent := task
	sent.Expand = true
	avoid := ""
	var r retries
	for {
		ep, release, err := d.replica(ctx, key, avoid)
		if err != nil {
			return wire.ShardEnd{}, err // ctx ended
		}
		if h.begin != nil && !h.begin() {
			release()
			return wire.ShardEnd{}, errNotHeld
		}
		start := time.Now()
		var wait func() error
		var held time.Duration // the longest the reply was not read for want of room
		if h.wait != nil {
			wait = func() error {
				t := time.Now()
				defer func() { held = max(held, time.Since(t)) }()
				return h.wait()
			}
		}
		end, err := sendShard(ctx, d.hc, d.opts.Token, ep, sent, d.opts.StallTimeout, chunk, wait)
		release()
		if ctx.Err() != nil {
			d.m.sends.WithLabelValues(d.id, "canceled").Inc()
			return wire.ShardEnd{}, ctx.Err()
		}
		d.m.sendSeconds.WithLabelValues(d.id).Observe(time.Since(start).Seconds())
		if err == nil {
			d.m.sends.WithLabelValues(d.id, "ok").Inc()
			return end, nil
		}
		if held >= heldForgiven && kindOf(err) == failTransient {
			// The replica may have given the reply up while the agent
			// held it back (its frame write timeout): not the task's fault.
			err = failed(failBusy, "cut after the agent held the reply back for %v: %w", held.Round(time.Millisecond), err)
		}
		kind := kindOf(err)
		d.m.sends.WithLabelValues(d.id, kind.outcome()).Inc()
		delay, giveUp := r.after(kind, d.opts.MaxDeliver, rand.Float64())
		switch {
		case giveUp && kind == failPermanent:
			return wire.ShardEnd{}, fmt.Errorf("sending task %s: %w", task.ID(), err)
		case giveUp:
			return wire.ShardEnd{}, fmt.Errorf("sending task %s: gave up after %d failed sends, last: %w", task.ID(), r.failures, err)
		case kind == failBusy:
			if h.refused != nil {
				h.refused()
			}
			d.log.Debug("replica busy, sending the task again", "task", task.ID(), "err", err, "delay", delay)
		default:
			d.log.Info("send failed, sending the task again", "task", task.ID(), "failures", r.failures, "err", err, "delay", delay)
		}
		avoid = ep
		if !sleep(ctx, delay) {
			return wire.ShardEnd{}, ctx.Err()
		}
	}
}
