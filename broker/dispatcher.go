package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

const (
	defaultMaxDeliver = 20
	// fetchWait is how long one pull waits for a task; it bounds how late
	// the loop notices that the job is finished.
	fetchWait = 500 * time.Millisecond
	// capacityPoll is how often a full dispatcher looks at the capacity again.
	capacityPoll = 50 * time.Millisecond
	// settleTimeout bounds an ack after a successful send.
	settleTimeout = 5 * time.Second
	// fetchErrorPause keeps a failing pull from spinning.
	fetchErrorPause = 250 * time.Millisecond
)

// ReadyReplicas counts a job's function replicas that serve now; the local
// actuator is one.
type ReadyReplicas interface {
	Ready(job string) int
}

// DispatcherOptions tune a Dispatcher.
type DispatcherOptions struct {
	// Replicas gives the capacity: Ready(job) x PerReplica tasks may be in
	// flight. It is polled, may change any time and may be 0, which pauses
	// dispatch. Nil means one task at a time.
	Replicas ReadyReplicas
	// PerReplica is how many tasks one replica takes at once (its
	// concurrency); default 1.
	PerReplica int
	// AckWait is how long the server waits for a delivered task's ack
	// before redelivering it; default 30s. A task in flight is kept alive
	// with a progress ping every AckWait/3, so this bounds how long a task
	// held by a dead dispatcher stays stuck, not how long a shard may take.
	AckWait time.Duration
	// MaxDeliver is how many transiently failed sends a task gets before it
	// is reported as failed; default 20.
	MaxDeliver int
}

// DispatchStats is a snapshot of a dispatcher's progress.
type DispatchStats struct {
	// Total is the job's task count over all epochs.
	Total int
	// Done and Failed count distinct tasks acked or given up on.
	Done, Failed int
	// InFlight is sends in progress; Pending is tasks neither settled nor
	// in flight (queued, or waiting out a retry delay).
	InFlight, Pending int
	// Resumed is tasks settled before this dispatcher started, by an
	// earlier dispatcher of the job (done or failed: the stream does not
	// say which).
	Resumed int
	// Redeliveries is sends of a task beyond its first by this dispatcher.
	Redeliveries int
	// SendErrors is failed sends, transient and permanent.
	SendErrors int
	// Malformed is task messages that could not be decoded, dropped.
	Malformed int
	// FailedShards has one entry per failed task: the shard key, and why.
	FailedShards []wire.FailedSample
	// FirstFailedSample is the first sample a function reported failed,
	// to say why when none could be preprocessed.
	FirstFailedSample *wire.FailedSample
	// Results is tasks done per epoch.
	Results map[int]int
	// Replays counts replay tasks (wire.ReplaySubject) done; ReplayPending
	// those queued or in flight; ReplayFailed those given up on, whose
	// shards are in FailedShards too.
	Replays, ReplayPending, ReplayFailed int
	// Samples, SampleFailures, Chunks and Bytes add up the functions'
	// results over done tasks.
	Samples, SampleFailures, Chunks int
	Bytes                           int64
	// Reads is where done tasks' shard bytes came from, per epoch.
	Reads map[int]ShardReads
}

// Dispatcher pushes one job's tasks to a Target as capacity allows.
type Dispatcher struct {
	job     wire.Job
	target  Target
	opts    DispatcherOptions
	log     *slog.Logger
	m       *Metrics
	cons    jetstream.Consumer
	replay  jetstream.Consumer // replay tasks, taken first
	output  outputGauge
	resumed int

	freed chan struct{} // a send finished: there may be room

	mu           sync.Mutex
	running      bool
	inflight     int
	done         map[string]bool
	failed       map[string]bool
	failedShards []wire.FailedSample
	sends        map[string]int // real sends per task, for redeliveries
	failures     map[string]int // transient failures per task, against MaxDeliver
	epochDone    map[int]int
	stats        DispatchStats // counters only; the rest is derived in Stats
	// Replay tasks are extra work, not among the job's Tasks: counted apart.
	replayInflight int
	replayWaiting  int // queued on the replay consumer, as last read
	replayPolled   time.Time
	replayDone     map[string]bool
	replayFailed   map[string]bool

	reads map[int]ShardReads // per epoch, see reads.go
	// outputSince is the output of tasks done since the output gauge last
	// read the stream (see outputFull).
	outputSince int64
}

// NewDispatcher creates (or takes over) the job's durable consumer on the
// task stream. Create it after the job's Submit returned: a consumer that
// already exists is a restart, and tasks missing from the stream then count
// as settled by the earlier dispatcher. m nil uses unregistered metrics.
func NewDispatcher(ctx context.Context, js jetstream.JetStream, job wire.Job, target Target, opts DispatcherOptions, logger *slog.Logger, m *Metrics) (*Dispatcher, error) {
	id := job.Spec.ID
	if err := wire.ValidateJobID(id); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	if job.Tasks() == 0 {
		return nil, fmt.Errorf("dispatcher for job %s: job has no tasks (%d shards, %d epochs)", id, len(job.Shards), job.Spec.Epochs)
	}
	if target == nil {
		return nil, fmt.Errorf("dispatcher for job %s: no target", id)
	}
	if opts.PerReplica <= 0 {
		opts.PerReplica = 1
	}
	if opts.AckWait <= 0 {
		opts.AckWait = streams.DispatchAckWait
	}
	if opts.MaxDeliver <= 0 {
		opts.MaxDeliver = defaultMaxDeliver
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	name := wire.DispatchConsumer(id)
	_, err := js.Consumer(ctx, wire.TaskStream, name)
	existed := err == nil
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("job %s: looking up consumer %s: %w", id, name, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, wire.TaskStream, streams.Dispatch(id, opts.AckWait))
	if err != nil {
		return nil, fmt.Errorf("job %s: creating consumer %s: %w", id, name, err)
	}
	replay, err := js.CreateOrUpdateConsumer(ctx, wire.TaskStream, streams.Replay(id, opts.AckWait))
	if err != nil {
		return nil, fmt.Errorf("job %s: creating consumer %s: %w", id, wire.ReplayConsumer(id), err)
	}
	d := &Dispatcher{
		job: job, target: target, opts: opts, log: logger.With("job", id), m: m, cons: cons, replay: replay,
		output:       outputGauge{js: js, stream: wire.OutputStream(id), highWater: job.Spec.OutputBufferBytes * 3 / 4},
		freed:        make(chan struct{}, 1),
		done:         map[string]bool{},
		failed:       map[string]bool{},
		sends:        map[string]int{},
		failures:     map[string]int{},
		epochDone:    map[int]int{},
		replayDone:   map[string]bool{},
		replayFailed: map[string]bool{},
	}
	if existed {
		remaining, err := remainingTasks(ctx, js, id)
		if err != nil {
			return nil, err
		}
		d.resumed = max(0, job.Tasks()-remaining)
		d.log.Info("dispatcher resumed", "settled_before", d.resumed, "remaining", remaining)
	}
	return d, nil
}

// remainingTasks counts the distinct tasks of job still in the work queue
// (queued, or delivered and not yet acked). It reads them rather than
// trusting the consumer's counts, which also count stray messages.
func remainingTasks(ctx context.Context, js jetstream.JetStream, job string) (int, error) {
	s, err := js.Stream(ctx, wire.TaskStream)
	if err != nil {
		return 0, fmt.Errorf("job %s: opening stream %s: %w", job, wire.TaskStream, err)
	}
	ids := map[string]bool{}
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(wire.TaskSubject(job)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return len(ids), nil
		}
		if err != nil {
			return 0, fmt.Errorf("job %s: reading queued tasks: %w", job, err)
		}
		var task wire.ShardTask
		if json.Unmarshal(m.Data, &task) == nil && task.Validate() == nil && task.Job == job {
			ids[task.ID()] = true
		}
		seq = m.Sequence + 1
	}
}

// Run dispatches until every task of the job is done or failed (nil), or
// ctx ends (ctx.Err(), once in-flight sends returned; their tasks go back
// to the queue).
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.running {
		d.mu.Unlock()
		return fmt.Errorf("job %s: dispatcher already running", d.job.Spec.ID)
	}
	d.running = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.running = false
		d.mu.Unlock()
	}()

	id := d.job.Spec.ID
	d.m.tasks.WithLabelValues(id).Set(float64(d.job.Tasks()))
	sendCtx, cancelSends := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancelSends()
		wg.Wait()
	}()
	poll := time.NewTicker(capacityPoll)
	defer poll.Stop()

	for {
		if d.settled() {
			st := d.Stats()
			d.log.Info("job dispatched", "done", st.Done, "failed", st.Failed, "resumed", st.Resumed,
				"redeliveries", st.Redeliveries)
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.replayNext(ctx, &wg, sendCtx) {
			continue
		}
		// Nothing to fetch while every unsettled task is in flight: wait
		// for one to finish rather than hold a pull open.
		if !d.hasRoom(ctx) || d.pending() == 0 {
			select {
			case <-ctx.Done():
			case <-d.freed:
			case <-poll.C:
			}
			continue
		}
		if d.replayNext(ctx, &wg, sendCtx) { // one may have come meanwhile
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, fetchWait)
		batch, err := d.cons.Fetch(1, jetstream.FetchContext(fctx))
		if err == nil {
			for msg := range batch.Messages() {
				d.start(&wg, sendCtx, msg, false)
			}
			err = batch.Error()
		}
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) &&
			!errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			if errors.Is(err, nats.ErrConnectionClosed) {
				return fmt.Errorf("job %s: fetching tasks: %w", id, err)
			}
			// A pull on a deleted consumer finds no responder: is it gone?
			if gone := d.consumerGone(ctx); gone != nil {
				return gone
			}
			d.log.Warn("fetching task", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(fetchErrorPause):
			}
		}
	}
}

// consumerGone returns an error if the job's consumer no longer exists
// (the job was deleted).
func (d *Dispatcher) consumerGone(ctx context.Context) error {
	ictx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	_, err := d.cons.Info(ictx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("job %s: consumer %s is gone (job deleted?): %w", d.job.Spec.ID, wire.DispatchConsumer(d.job.Spec.ID), err)
	}
	return nil
}

// hasRoom polls the capacity and the output buffer and says whether another
// send fits.
func (d *Dispatcher) hasRoom(ctx context.Context) bool {
	c := 1
	if d.opts.Replicas != nil {
		c = d.opts.Replicas.Ready(d.job.Spec.ID) * d.opts.PerReplica
	}
	d.m.capacity.WithLabelValues(d.job.Spec.ID).Set(float64(c))
	if now := time.Now(); d.output.due(now) {
		// Reset first: output recorded between here and the read is
		// counted twice until the next read, never missed.
		d.mu.Lock()
		d.outputSince = 0
		d.mu.Unlock()
		d.output.read(ctx, now)
	}
	d.m.outputBacklog.WithLabelValues(d.job.Spec.ID).Set(float64(d.output.bytes))
	d.mu.Lock()
	defer d.mu.Unlock()
	perTask := int64(0)
	if n := len(d.done); n > 0 {
		perTask = d.stats.Bytes / int64(n)
	}
	if outputFull(d.output.bytes, d.outputSince, perTask, d.inflight, d.output.highWater) {
		return false
	}
	return d.inflight < c
}

// pending is how many tasks are neither settled nor in flight.
func (d *Dispatcher) pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pendingLocked()
}

func (d *Dispatcher) pendingLocked() int {
	return max(0, d.job.Tasks()-d.resumed-len(d.done)-len(d.failed)-(d.inflight-d.replayInflight))
}

// settled says whether every task of the job (replays aside) is done or failed.
func (d *Dispatcher) settled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settledLocked()
}

func (d *Dispatcher) settledLocked() bool {
	return d.resumed+len(d.done)+len(d.failed) >= d.job.Tasks()
}

// handle sends one delivered task and settles the delivery.
func (d *Dispatcher) handle(ctx context.Context, msg jetstream.Msg, replay bool) {
	id := d.job.Spec.ID
	defer func() {
		d.mu.Lock()
		d.inflight--
		if replay {
			d.replayInflight--
		}
		d.m.inflight.WithLabelValues(id).Set(float64(d.inflight))
		d.mu.Unlock()
		select {
		case d.freed <- struct{}{}:
		default:
		}
	}()

	var task wire.ShardTask
	err := json.Unmarshal(msg.Data(), &task)
	if err == nil {
		err = task.Validate()
	}
	if err == nil && task.Job != id {
		err = fmt.Errorf("task of job %q on job %s's subject", task.Job, id)
	}
	if err == nil && replay != (task.Replay != "") {
		err = fmt.Errorf("task %s with replay %q on the subject %s", task.ID(), task.Replay, msg.Subject())
	}
	if err != nil {
		d.log.Error("dropping malformed task", "subject", msg.Subject(), "err", err)
		d.mu.Lock()
		d.stats.Malformed++
		d.mu.Unlock()
		d.term(msg, "malformed task")
		return
	}
	tid := task.ID()
	if replay {
		tid += "@" + task.Replay
	}

	d.mu.Lock()
	done, failed := d.done[tid], d.failed[tid]
	if replay {
		done, failed = d.replayDone[tid], d.replayFailed[tid]
	}
	d.mu.Unlock()
	switch {
	case done:
		// The ack of an earlier delivery was lost; its output is published.
		d.ack(ctx, msg, tid)
		return
	case failed:
		d.term(msg, "task already failed")
		return
	case ctx.Err() != nil:
		d.nak(msg, tid, 0)
		return
	}

	stop := d.keepAlive(msg)
	start := time.Now()
	res, err := d.target.Send(ctx, task)
	stop()

	if !errors.Is(err, ErrNoReplica) {
		d.m.sendSeconds.WithLabelValues(id).Observe(time.Since(start).Seconds())
		d.mu.Lock()
		if d.sends[tid]++; d.sends[tid] > 1 {
			d.stats.Redeliveries++
			d.m.redeliveries.WithLabelValues(id).Inc()
		}
		d.mu.Unlock()
	}
	switch {
	case err == nil:
		d.ack(ctx, msg, tid)
		d.succeed(task, res)
	case ctx.Err() != nil:
		// Shutting down: hand the task back for the next dispatcher.
		d.nak(msg, tid, 0)
	case errors.Is(err, ErrNoReplica):
		// Not the task's fault: retry soon, without using up its deliveries.
		d.log.Debug("no replica for task, requeueing", "task", tid)
		d.nak(msg, tid, RetryDelay(1))
	case IsPermanent(err):
		d.sendError("permanent")
		d.log.Warn("task failed permanently", "task", tid, "err", err)
		d.term(msg, "permanent error")
		d.fail(task, err.Error())
	default:
		d.sendError("transient")
		d.mu.Lock()
		d.failures[tid]++
		n := d.failures[tid]
		d.mu.Unlock()
		if n >= d.opts.MaxDeliver {
			d.log.Warn("task failed too often", "task", tid, "failures", n, "err", err)
			d.term(msg, "max deliveries")
			d.fail(task, fmt.Sprintf("gave up after %d failed deliveries, last: %v", n, err))
			return
		}
		d.log.Debug("task failed, retrying", "task", tid, "failures", n, "err", err)
		d.nak(msg, tid, RetryDelay(n))
	}
}

// keepAlive tells the server every AckWait/3 that msg is still being
// worked on; the returned stop waits for the pinger to exit, so no progress
// ping follows the ack.
func (d *Dispatcher) keepAlive(msg jetstream.Msg) (stop func()) {
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(max(d.opts.AckWait/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					d.log.Warn("extending task ack deadline", "err", err)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-exited
	}
}

// ack confirms the task with the server. The function's output is durable
// whatever happens here, so a failed ack only means a redelivery, which is
// acked without sending.
func (d *Dispatcher) ack(ctx context.Context, msg jetstream.Msg, tid string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		d.log.Warn("acking task", "task", tid, "err", err)
	}
}

func (d *Dispatcher) nak(msg jetstream.Msg, tid string, delay time.Duration) {
	var err error
	if delay > 0 {
		err = msg.NakWithDelay(delay)
	} else {
		err = msg.Nak()
	}
	if err != nil {
		d.log.Warn("returning task to queue", "task", tid, "err", err)
	}
}

func (d *Dispatcher) term(msg jetstream.Msg, reason string) {
	if err := msg.TermWithReason(reason); err != nil {
		d.log.Warn("terminating task", "subject", msg.Subject(), "err", err)
	}
}

func (d *Dispatcher) sendError(kind string) {
	d.mu.Lock()
	d.stats.SendErrors++
	d.mu.Unlock()
	d.m.sendErrors.WithLabelValues(d.job.Spec.ID, kind).Inc()
}

// succeed records a done task, once per task id.
func (d *Dispatcher) succeed(task wire.ShardTask, res wire.ShardResult) {
	d.mu.Lock()
	// A duplicate delivery's chunks, dropped by the stream, count until
	// the next read: the safe side.
	d.outputSince += res.Bytes
	d.mu.Unlock()
	if task.Replay != "" {
		d.mu.Lock()
		defer d.mu.Unlock()
		if key := task.ID() + "@" + task.Replay; !d.replayDone[key] {
			d.replayDone[key] = true
			d.stats.Replays++
			d.recordReads(task, res) // a replay reads its shard again
		}
		return
	}
	tid := task.ID()
	if res.Task != "" && res.Task != tid {
		d.log.Warn("result names another task", "task", tid, "result_task", res.Task)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done[tid] {
		return
	}
	if d.failed[tid] {
		// A duplicate delivery succeeded after another failed: it is done.
		delete(d.failed, tid)
		d.failedShards = slices.DeleteFunc(d.failedShards, func(f wire.FailedSample) bool {
			return f.Key == task.Key && strings.HasPrefix(f.Reason, failReasonPrefix(task))
		})
	}
	d.done[tid] = true
	d.epochDone[task.Epoch]++
	d.stats.Samples += res.Samples
	d.stats.SampleFailures += len(res.Failed)
	if d.stats.FirstFailedSample == nil && len(res.Failed) > 0 {
		f := res.Failed[0]
		d.stats.FirstFailedSample = &f
	}
	d.stats.Chunks += res.Chunks
	d.stats.Bytes += res.Bytes
	d.recordReads(task, res)
	id := d.job.Spec.ID
	d.m.done.WithLabelValues(id).Inc()
	d.m.epochDone.WithLabelValues(id, epochLabel(task.Epoch)).Set(float64(d.epochDone[task.Epoch]))
}

// fail records a task given up on, once per task id; its samples are
// reported under the shard's key.
func (d *Dispatcher) fail(task wire.ShardTask, reason string) {
	tid := task.ID()
	d.mu.Lock()
	defer d.mu.Unlock()
	if task.Replay != "" {
		// The reader waits for these samples: say loudly that they will not come.
		if key := tid + "@" + task.Replay; !d.replayFailed[key] {
			d.replayFailed[key] = true
			d.stats.ReplayFailed++
			d.failedShards = append(d.failedShards, wire.FailedSample{Key: task.Key, Reason: "replay of " + failReasonPrefix(task) + reason})
			d.log.Error("replay task failed: a resumed reader will miss this shard's samples", "task", tid, "reason", reason)
		}
		return
	}
	if d.done[tid] || d.failed[tid] {
		return
	}
	d.failed[tid] = true
	d.failedShards = append(d.failedShards, wire.FailedSample{Key: task.Key, Reason: failReasonPrefix(task) + reason})
	d.m.failed.WithLabelValues(d.job.Spec.ID).Inc()
}

func failReasonPrefix(task wire.ShardTask) string {
	return fmt.Sprintf("epoch %d shard %d: ", task.Epoch, task.Shard)
}

// Backlog is the part of Stats an autoscaler reads every tick, without
// Stats' copies: tasks pending and in flight, and whether every task is
// settled. A Dispatcher is an autoscale.Backlog.
func (d *Dispatcher) Backlog() (pending, inflight int, done bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pending = d.pendingLocked() + d.replayWaiting
	return pending, d.inflight, d.settledLocked() && pending == 0 && d.inflight == 0
}

// Stats is a snapshot of the dispatcher's progress.
func (d *Dispatcher) Stats() DispatchStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Total = d.job.Tasks()
	s.Resumed = d.resumed
	s.Done = len(d.done)
	s.Failed = len(d.failed)
	s.InFlight = d.inflight
	s.Pending = d.pendingLocked()
	s.FailedShards = slices.Clone(d.failedShards)
	s.Results = maps.Clone(d.epochDone)
	s.Reads = d.readsSnapshot()
	s.ReplayPending = d.replayWaiting + d.replayInflight
	return s
}

// start sends msg in its own goroutine, counted in flight.
func (d *Dispatcher) start(wg *sync.WaitGroup, ctx context.Context, msg jetstream.Msg, replay bool) {
	d.mu.Lock()
	d.inflight++
	if replay {
		d.replayInflight++
		d.replayWaiting = max(0, d.replayWaiting-1)
	}
	d.m.inflight.WithLabelValues(d.job.Spec.ID).Set(float64(d.inflight))
	d.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.handle(ctx, msg, replay)
	}()
}

// replayPoll is how often the replay backlog is read from the server for
// the autoscaler; a replay taken in between is counted at once.
const replayPoll = time.Second

// replayNext takes one replay task if one is queued and a replica is free,
// and says whether it did. Replays skip the output buffer's high water:
// the quarter of the buffer kept free of queued epochs is theirs, so a
// resumed reader gets its samples even while later epochs fill the rest.
func (d *Dispatcher) replayNext(ctx context.Context, wg *sync.WaitGroup, sendCtx context.Context) bool {
	d.pollReplays(ctx, false)
	d.mu.Lock()
	c := 1
	if d.opts.Replicas != nil {
		c = d.opts.Replicas.Ready(d.job.Spec.ID) * d.opts.PerReplica
	}
	room := d.inflight < c && d.replayWaiting > 0
	d.mu.Unlock()
	if !room {
		return false
	}
	batch, err := d.replay.FetchNoWait(1)
	if err != nil {
		d.log.Debug("fetching a replay task", "err", err)
		return false
	}
	took := false
	for msg := range batch.Messages() {
		d.start(wg, sendCtx, msg, true)
		took = true
	}
	if !took {
		d.pollReplays(ctx, true) // the count was stale
	}
	return took
}

// pollReplays refreshes the replay backlog from the consumer's info, at
// most every replayPoll unless forced.
func (d *Dispatcher) pollReplays(ctx context.Context, force bool) {
	d.mu.Lock()
	due := force || time.Since(d.replayPolled) >= replayPoll
	if due {
		d.replayPolled = time.Now()
	}
	d.mu.Unlock()
	if !due {
		return
	}
	ictx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	info, err := d.replay.Info(ictx)
	if err != nil {
		d.log.Debug("reading the replay backlog", "err", err)
		return
	}
	d.mu.Lock()
	// Ack-pending counts replays in flight here and those waiting out a
	// retry delay, which are still to do.
	d.replayWaiting = max(0, int(info.NumPending)+info.NumAckPending-d.replayInflight)
	d.mu.Unlock()
}

// ServeReplays sends replay tasks (see Replay) until ctx ends, and then
// returns ctx's error once the sends in flight returned. The owner of a
// job runs it once Run has settled every task, while the job's readers
// finish: a trainer resumed from a checkpoint near the end still needs
// shards produced again.
func (d *Dispatcher) ServeReplays(ctx context.Context) error {
	sendCtx, cancelSends := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancelSends()
		wg.Wait()
	}()
	poll := time.NewTicker(capacityPoll)
	defer poll.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.replayNext(ctx, &wg, sendCtx) {
			continue
		}
		select {
		case <-ctx.Done():
		case <-d.freed:
		case <-poll.C:
		}
	}
}
