package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// startSend runs e's sends in a goroutine of its own, under Run's ctx;
// d.mu held.
func (d *Dispatcher) startSend(ctx context.Context, e *entry) {
	ctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	d.sends.Add(1)
	go func() {
		defer d.sends.Done()
		defer cancel()
		d.send(ctx, e)
	}()
}

// send sends e's task until its shard ends or fails for good, or ctx ends
// (Run stops, or the task was settled): sendUntilDone, with e's books.
func (d *Dispatcher) send(ctx context.Context, e *entry) {
	defer d.poke() // its slot is free
	task := e.task
	end, err := d.sendUntilDone(ctx, task, func(i int, data []byte) error { return d.sink.Chunk(task, i, data) }, sendHooks{
		// The reply is not read while the sink has no room: the output
		// buffer bounds what the agent holds.
		wait: func() error { return d.sink.WaitRoom(ctx, task) },
		begin: func() bool {
			d.mu.Lock()
			ok := d.st.sent(e)
			n := e.sends
			d.mu.Unlock()
			if ok && n > 1 {
				d.m.retries.WithLabelValues(d.id).Inc()
			}
			return ok
		},
		refused: func() {
			d.mu.Lock()
			d.st.refused(e)
			d.mu.Unlock()
		},
	})
	switch {
	case err == nil:
		d.mu.Lock()
		ok := d.st.ended(e, end)
		d.gauges()
		d.mu.Unlock()
		if ok {
			d.sink.End(task, end)
		}
	case ctx.Err() != nil || errors.Is(err, errNotHeld):
	default:
		d.giveUp(ctx, e, err.Error())
	}
}

// heldForgiven is how long the sink must have had no room, once, during a
// send for a transient failure of the send not to count against the
// task: the replica's frame write timeout may have cut it (a var for
// tests).
var heldForgiven = 5 * time.Second

// replica takes a send slot on the replica for the shard key (its home,
// or the next free one in its order, not avoid if another will do),
// waiting for a plan with a replica (no replica is not a task's fault);
// the error is ctx's.
func (d *Dispatcher) replica(ctx context.Context, key, avoid string) (string, func(), error) {
	for {
		planCh := d.planChanged()
		ep, release, err := d.load.acquire(ctx, d.endpoints, key, avoid, d.opts.LocalityWait)
		if !errors.Is(err, errNoReplica) {
			return ep, release, err
		}
		select {
		case <-planCh:
		case <-ctx.Done():
			return "", nil, ctx.Err()
		}
	}
}

// giveUp fails e's task for good, records it (recordFailed) and tells the
// sink, whose readers then settle it.
func (d *Dispatcher) giveUp(ctx context.Context, e *entry, reason string) {
	reason = truncate(reason, maxReason)
	d.mu.Lock()
	ok := d.st.fail(e, reason)
	d.gauges()
	d.mu.Unlock()
	if !ok {
		return
	}
	d.log.Warn("task failed for good", "task", e.task.ID(), "reason", reason)
	if err := d.recordFailed(ctx, e.task, reason); err != nil {
		// Its result still says so, to the owner listening then.
		d.log.Warn("recording a task given up", "task", e.task.ID(), "err", err)
	}
	d.sink.Failed(e.task, reason)
}

// Settle acks the task of (epoch, shard) once the sink has handed out every sample of it and recorded
// that (the agent calls it after writing its position), and publishes its wire.ShardResult on
// wire.ResultSubject(job) (core NATS; the End it got, or Error for a failed one). Settling a task
// not held (already settled, or a replay) only publishes nothing / is a no-op. Safe from any goroutine.
//
// A task settled before its end came (the agent's position already
// covers the shard) has its send cancelled; its result carries only the
// job, epoch and shard. A failed task is acked too (see the package doc).
func (d *Dispatcher) Settle(epoch, shard int) {
	d.mu.Lock()
	e, ok := d.st.settle(taskKey{epoch, shard})
	if ok && e.phase == phaseSending && e.cancel != nil {
		e.cancel()
	}
	d.gauges()
	d.mu.Unlock()
	if !ok {
		return
	}
	d.poke()
	if e.msg != nil {
		// Ack, not DoubleAck: Settle must not block the agent. A lost ack
		// is a redelivery, whose samples the agent's position skips.
		if err := e.msg.Ack(); err != nil {
			d.log.Warn("acking a task", "task", e.task.ID(), "err", err)
		}
	}
	if e.phase == phaseQueued {
		return // a replay never sent: no result
	}
	res := wire.ShardResult{
		Agent: d.opts.Agent, Time: time.Now().UTC(), Key: e.task.Key, Sends: e.sends, Replay: e.msg == nil,
		End: wire.ShardEnd{Job: e.task.Job, Epoch: e.task.Epoch, Shard: e.task.Shard},
	}
	switch e.phase {
	case phaseEnded:
		res.End = e.end
	case phaseFailed:
		res.Error = e.reason
	}
	data, err := json.Marshal(res)
	if err == nil {
		err = d.nc.Publish(wire.ResultSubject(d.id), data)
	}
	if err != nil {
		d.log.Warn("publishing a shard result", "task", e.task.ID(), "err", err)
	}
}

// Replay sends task again outside the queue (a reader resumed from a checkpoint needs a shard whose
// queue task was already acked): counted against the same in-flight share, taken before queued tasks,
// output through the same Sink; nothing to ack; its result is published with Replay: true when settled.
//
// A replay is taken whatever sink.Room says (the resumed reader waits for
// exactly this output), but only within the share. A task of the same
// epoch and shard queued needs no replay; one being sent is sent once more
// when that send ends (a resumed reader may have dropped the chunks that
// had come); one held and ended is sent again. An invalid task is reported
// through sink.Failed.
func (d *Dispatcher) Replay(task wire.ShardTask) {
	if err := d.checkTask(task); err != nil {
		reason := truncate("replay: "+err.Error(), maxReason)
		d.log.Error("refusing a replay", "err", err)
		go d.sink.Failed(task, reason)
		return
	}
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		d.log.Warn("replay after the dispatcher stopped: dropped", "task", task.ID())
		return
	}
	queued := d.st.replay(task)
	d.gauges()
	d.mu.Unlock()
	if queued {
		d.log.Debug("replay queued", "task", task.ID())
		d.poke()
	}
}
