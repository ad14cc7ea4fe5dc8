package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

const (
	// fetchWait is how long one pull waits for a task: it bounds how late
	// Run notices its ctx's end, a replay or a smaller share while the
	// queue is empty. Tasks are small, so a pull of one is cheap.
	fetchWait = 250 * time.Millisecond
	// roomPoll is how often the loop asks the sink for room when nothing
	// else woke it: Room changes as the agent hands out samples, unannounced.
	roomPoll = 20 * time.Millisecond
	// queuePoll is how often the consumer's info is read (Stats.Queued,
	// and whether the job is gone).
	queuePoll = time.Second
	// errorPause keeps a failing pull or watch from spinning.
	errorPause = 250 * time.Millisecond
	// infoTimeout bounds one read of the consumer's info.
	infoTimeout = 5 * time.Second
)

// Run watches the job's wire.DispatchPlan (key = job id in wire.DispatchBucket; no plan = send nothing),
// pulls tasks while sink.Room() and fewer than plan.Share(opts.Agent) sends are in flight, sends each
// to a replica, and keeps every task it holds (sending, or received and not yet settled) alive with
// msg.InProgress() pings. It returns when ctx ends: in-flight sends are cancelled and every task held
// and not settled is Nak'ed for immediate redelivery (to this or another agent), then ctx.Err().
// It returns an error wrapping ErrJobGone when the task consumer is deleted (the job was cancelled/deleted).
// A Dispatcher runs once.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.ran {
		d.mu.Unlock()
		return fmt.Errorf("dispatcher of job %s: Run called twice", d.id)
	}
	d.ran = true
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.mu.Unlock()
	d.log.Info("dispatcher running")

	var bg sync.WaitGroup
	bg.Go(func() { d.watchPlan(runCtx) })
	bg.Go(func() { d.keepAlive(runCtx) })
	bg.Go(func() { d.pollQueue(runCtx, cancel) })
	err := d.pull(runCtx)
	cancel(err)
	d.sends.Wait()
	bg.Wait()

	cause := context.Cause(runCtx)
	gone := errors.Is(cause, ErrJobGone)
	d.mu.Lock()
	held := d.st.clear()
	d.stopped = true
	d.gauges()
	d.mu.Unlock()
	returned := 0
	if !gone {
		// Back to the queue at once: another agent (or this one,
		// restarted) sends them again, and its position skips what was
		// handed out.
		for _, e := range held {
			if e.msg == nil {
				continue
			}
			if err := e.msg.Nak(); err != nil {
				d.log.Warn("returning a task to the queue", "task", e.task.ID(), "err", err)
			}
			returned++
		}
	}
	d.log.Info("dispatcher stopped", "returned", returned, "cause", cause)
	switch {
	case err != nil:
		return err
	case gone:
		return cause
	}
	return ctx.Err()
}

// pull is Run's loop: start queued replays, then take a task from the
// queue whenever the share and the sink have room.
func (d *Dispatcher) pull(ctx context.Context) error {
	tick := time.NewTicker(roomPoll)
	defer tick.Stop()
	for ctx.Err() == nil {
		d.mu.Lock()
		d.loops++
		share := d.share()
		for e := d.st.nextReplay(share); e != nil; e = d.st.nextReplay(share) {
			d.startSend(ctx, e)
		}
		take := d.st.canTake(share)
		d.gauges()
		d.mu.Unlock()
		if take && d.sink.Room() {
			if err := d.fetch(ctx); err != nil {
				return err
			}
			continue
		}
		select {
		case <-ctx.Done():
		case <-d.wake:
		case <-tick.C:
		}
	}
	return nil
}

// fetch takes at most one task from the queue. It never cancels a pull
// early: a task the server sent to a pull given up on would stay stuck
// until its AckWait.
func (d *Dispatcher) fetch(ctx context.Context) error {
	batch, err := d.cons.Fetch(1, jetstream.FetchMaxWait(fetchWait))
	if err == nil {
		for msg := range batch.Messages() {
			d.receive(ctx, msg)
		}
		err = batch.Error()
	}
	if err == nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) || ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("job %s: fetching tasks: %w", d.id, err)
	}
	if gone := d.gone(ctx); gone != nil {
		return gone
	}
	d.log.Warn("fetching a task", "err", err)
	sleep(ctx, errorPause)
	return nil
}

// receive holds a delivered task and starts its send.
func (d *Dispatcher) receive(ctx context.Context, msg jetstream.Msg) {
	task, err := d.decode(msg.Data())
	if err != nil {
		d.log.Error("dropping a malformed task", "subject", msg.Subject(), "err", err)
		d.mu.Lock()
		d.st.malformedTask()
		d.mu.Unlock()
		if err := msg.TermWithReason("malformed task"); err != nil {
			d.log.Warn("terminating a malformed task", "err", err)
		}
		return
	}
	if ctx.Err() != nil {
		if err := msg.Nak(); err != nil {
			d.log.Warn("returning a task to the queue", "task", task.ID(), "err", err)
		}
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e, start := d.st.receive(task, msg)
	if start {
		d.startSend(ctx, e)
	} else {
		d.log.Debug("task delivered again while held; keeping the newer delivery", "task", task.ID(), "phase", e.phase)
	}
	d.gauges()
}

// decode reads a task of this job.
func (d *Dispatcher) decode(data []byte) (wire.ShardTask, error) {
	var task wire.ShardTask
	if err := json.Unmarshal(data, &task); err != nil {
		return task, fmt.Errorf("decoding task: %w", err)
	}
	return task, d.checkTask(task)
}

func (d *Dispatcher) checkTask(task wire.ShardTask) error {
	if err := task.Validate(); err != nil {
		return err
	}
	if task.Job != d.id {
		return fmt.Errorf("task %s of job %q, want job %s", task.ID(), task.Job, d.id)
	}
	return nil
}

// keepAlive pings the progress of every task held, every third of the
// consumer's AckWait (as last read: the job's controller may change it),
// so that the server redelivers only the tasks of an agent that died.
func (d *Dispatcher) keepAlive(ctx context.Context) {
	for {
		d.mu.Lock()
		every := d.ping
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		d.mu.Lock()
		msgs := d.st.deliveries()
		d.mu.Unlock()
		for _, m := range msgs {
			if err := m.InProgress(); err != nil {
				d.log.Warn("extending a task's ack deadline", "subject", m.Subject(), "err", err)
			}
		}
	}
}

// pollQueue reads the consumer's info every queuePoll for Stats.Queued,
// and ends Run (cancel with ErrJobGone) once the consumer is gone.
func (d *Dispatcher) pollQueue(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(queuePoll)
	defer t.Stop()
	for {
		ictx, done := context.WithTimeout(ctx, infoTimeout)
		info, err := d.cons.Info(ictx)
		done()
		switch {
		case err == nil:
			d.mu.Lock()
			d.queued = int(info.NumPending)
			if w := info.Config.AckWait; w > 0 {
				d.ping = pingEvery(min(d.opts.AckWait, w))
			}
			d.mu.Unlock()
		case ctx.Err() != nil:
		case isGone(err):
			cancel(d.goneError(err))
			return
		default:
			d.log.Debug("reading the task consumer's info", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// gone returns an error wrapping ErrJobGone if the consumer no longer
// exists.
func (d *Dispatcher) gone(ctx context.Context) error {
	ictx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	if _, err := d.cons.Info(ictx); isGone(err) {
		return d.goneError(err)
	}
	return nil
}

func isGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrStreamNotFound)
}

func (d *Dispatcher) goneError(err error) error {
	return fmt.Errorf("job %s: task consumer %s: %w (%v)", d.id, wire.DispatchConsumer(d.id), ErrJobGone, err)
}
