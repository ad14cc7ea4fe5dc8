package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// ConsumerName is the durable consumer the agent reads a job's output stream with.
var ConsumerName = wire.ReaderConsumer(wire.DefaultReader)

// ErrStopped is returned by Next once Run has ended before the job was delivered.
var ErrStopped = errors.New("trainer agent stopped")

// Options tune an Agent; zero values take the defaults.
type Options struct {
	// PrefetchSamples bounds the samples held in batches ready for the
	// trainer; the agent stops pulling at this bound. Default: 4 batches,
	// at least 256 samples.
	PrefetchSamples int
	// DemandInterval is how often a demand signal is published. Default 1s.
	DemandInterval time.Duration
	// GPU reads GPU utilisation; nil reports -1 (no GPU).
	GPU GPUSampler
}

// Stats describe the agent's progress.
type Stats struct {
	SamplesArrived   int64 // samples received from functions (duplicates excluded)
	SamplesDelivered int64
	BatchesDelivered int64
	// DuplicateChunks counts output messages (chunks and shard ends)
	// dropped because the agent had already seen them.
	DuplicateChunks int64
	// FailedSamples are those that functions could not preprocess (from
	// ShardEnd messages), lost in a corrupt chunk, or reported with Fail.
	FailedSamples []wire.FailedSample
	// StallTime is the time the trainer spent waiting in Next, an ongoing
	// wait included; RunTime and TimeToFirstBatch count from New.
	StallTime        time.Duration
	RunTime          time.Duration
	TimeToFirstBatch time.Duration
	// Epochs is the number of epochs whose every batch was handed out.
	Epochs int
	// BufferedSamples are held by the agent: in ready batches and in partial ones.
	BufferedSamples int
}

// MarshalJSON writes durations in seconds, for trainers in any language.
func (s Stats) MarshalJSON() ([]byte, error) {
	failed := s.FailedSamples
	if failed == nil {
		failed = []wire.FailedSample{}
	}
	return json.Marshal(struct {
		SamplesArrived     int64               `json:"samples_arrived"`
		SamplesDelivered   int64               `json:"samples_delivered"`
		BatchesDelivered   int64               `json:"batches_delivered"`
		DuplicateChunks    int64               `json:"duplicate_chunks"`
		FailedSamples      []wire.FailedSample `json:"failed_samples"`
		StallS             float64             `json:"stall_s"`
		RunS               float64             `json:"run_s"`
		TimeToFirstBatchS  float64             `json:"time_to_first_batch_s"`
		Epochs             int                 `json:"epochs"`
		BufferedSamples    int                 `json:"buffered_samples"`
		StallFractionTotal float64             `json:"stall_fraction_total"`
	}{
		s.SamplesArrived, s.SamplesDelivered, s.BatchesDelivered, s.DuplicateChunks, failed,
		s.StallTime.Seconds(), s.RunTime.Seconds(), s.TimeToFirstBatch.Seconds(), s.Epochs, s.BufferedSamples,
		ratio(s.StallTime, s.RunTime),
	})
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return a.Seconds() / b.Seconds()
}

// Agent feeds one job to one trainer.
type Agent struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	job     wire.Job
	opts    Options
	log     *slog.Logger
	m       jobMetrics
	created time.Time
	started atomic.Bool

	mu            sync.Mutex
	wake          chan struct{} // closed and replaced on every change
	asm           *assembler
	ready         []Batch
	readySamples  int
	readyPerEpoch map[int]int
	delivered     int // epochs whose last batch was handed out
	blocked       int // callers waiting in Next
	blockStart    time.Time
	window        stallWindow
	stats         Stats
	firstBatch    time.Time
	finished      time.Time
	runEnded      bool
	runErr        error
}

// New prepares an agent for job; Run starts it. m may be nil.
func New(nc *nats.Conn, js jetstream.JetStream, job wire.Job, opts Options, logger *slog.Logger, m *Metrics) (*Agent, error) {
	if nc == nil || js == nil {
		return nil, errors.New("trainer agent: a nats connection and a jetstream context are required")
	}
	if err := wire.ValidateJobID(job.Spec.ID); err != nil {
		return nil, fmt.Errorf("trainer agent: %w", err)
	}
	switch {
	case job.Spec.BatchSize < 1:
		return nil, fmt.Errorf("trainer agent: job %s: batch size %d: want >= 1", job.Spec.ID, job.Spec.BatchSize)
	case job.Spec.Epochs < 1:
		return nil, fmt.Errorf("trainer agent: job %s: epochs %d: want >= 1", job.Spec.ID, job.Spec.Epochs)
	case opts.PrefetchSamples < 0:
		return nil, fmt.Errorf("trainer agent: prefetch samples %d: want >= 0 (0 for the default)", opts.PrefetchSamples)
	case opts.DemandInterval < 0:
		return nil, fmt.Errorf("trainer agent: demand interval %v: want >= 0 (0 for the default)", opts.DemandInterval)
	}
	if opts.PrefetchSamples == 0 {
		opts.PrefetchSamples = max(4*job.Spec.BatchSize, 256)
	}
	if opts.DemandInterval == 0 {
		opts.DemandInterval = time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	now := time.Now()
	a := &Agent{
		nc: nc, js: js, job: job, opts: opts,
		log:           logger.With("job", job.Spec.ID),
		m:             m.forJob(job.Spec.ID),
		created:       now,
		wake:          make(chan struct{}),
		asm:           newAssembler(job),
		readyPerEpoch: map[int]int{},
		window:        stallWindow{Start: now, Capacity: opts.PrefetchSamples},
	}
	a.complete(a.asm.start(), now)
	return a, nil
}

// notify wakes every waiter; a.mu must be held.
func (a *Agent) notify() {
	close(a.wake)
	a.wake = make(chan struct{})
}

// Run consumes the job's output stream and publishes demand signals until
// the trainer has taken every batch; it then publishes the final demand
// (Done) and returns nil. It returns early with ctx's error or a consuming
// error; Next then fails with ErrStopped.
func (a *Agent) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("trainer agent: Run called twice")
	}
	err := a.run(ctx)
	a.mu.Lock()
	a.runEnded, a.runErr = true, err
	a.notify()
	a.mu.Unlock()
	return err
}

func (a *Agent) run(ctx context.Context) error {
	id := a.job.Spec.ID
	cons, err := a.consumer(ctx)
	if err != nil {
		return err
	}

	demandCtx, stopDemand := context.WithCancel(ctx)
	var demandDone sync.WaitGroup
	demandDone.Add(1)
	go func() {
		defer demandDone.Done()
		a.publishDemands(demandCtx)
	}()
	defer func() {
		stopDemand()
		demandDone.Wait()
	}()

	if err := a.consume(ctx, cons); err != nil {
		return err
	}
	a.log.Info("every epoch arrived; waiting for the trainer to take the last batches")
	if err := a.waitFor(ctx, a.allDelivered); err != nil {
		return err
	}
	stopDemand()
	demandDone.Wait()
	if err := a.publishDemand(time.Now(), true); err != nil {
		return err
	}
	// The final signal tells the autoscaler to scale the job to zero: make
	// sure it left before returning.
	flushCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := a.nc.FlushWithContext(flushCtx); err != nil {
		return fmt.Errorf("flushing the final demand of job %s: %w", id, err)
	}
	a.log.Info("job delivered", "samples", a.Stats().SamplesDelivered)
	return nil
}

// consumer creates (or resumes) the durable consumer, waiting for the
// broker to create the output stream if the agent came first.
func (a *Agent) consumer(ctx context.Context) (jetstream.Consumer, error) {
	stream := wire.OutputStream(a.job.Spec.ID)
	cfg := streams.Reader(a.job.Spec.ID, wire.DefaultReader)
	logged := false
	for {
		cons, err := a.js.CreateOrUpdateConsumer(ctx, stream, cfg)
		if err == nil {
			return cons, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("creating consumer on %s: %w", stream, err)
		}
		if !logged {
			a.log.Info("waiting for the job's output stream", "stream", stream)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// pullMaxBytes sizes the client-side buffer: a pull request asks for about
// half of it, and it must fit the largest message (the server's 8 MiB
// payload limit by default) or the consumer stalls.
func (a *Agent) pullMaxBytes() int {
	chunk := a.job.Spec.ChunkMaxBytes
	if chunk <= 0 {
		chunk = wire.DefaultChunkMaxBytes
	}
	return max(4*chunk, 16<<20) + 1<<20
}

// consume pulls output messages until every epoch is complete.
func (a *Agent) consume(ctx context.Context, cons jetstream.Consumer) error {
	// Messages, not Fetch: Fetch issues one request per batch and crawls
	// with MB-size messages; Messages keeps a byte-bounded request open.
	iter, err := cons.Messages(jetstream.PullMaxBytes(a.pullMaxBytes()))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", wire.OutputStream(a.job.Spec.ID), err)
	}
	defer iter.Stop()
	for {
		a.mu.Lock()
		done := a.asm.allComplete()
		a.mu.Unlock()
		if done {
			return nil
		}
		if err := a.waitFor(ctx, a.hasRoom); err != nil {
			return err
		}
		msg, err := iter.Next(jetstream.NextContext(ctx))
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, jetstream.ErrNoHeartbeat):
			// The iterator resets itself and issues a new pull request.
			a.log.Debug("no heartbeat from the output stream; pulling again")
			continue
		default:
			return fmt.Errorf("consuming %s: %w", wire.OutputStream(a.job.Spec.ID), err)
		}
		a.handle(msg)
	}
}

// handle applies one output message and acks it once its samples are buffered.
func (a *Agent) handle(msg jetstream.Msg) {
	ref, err := wire.ParseChunkRef(a.job.Spec.ID, msg.Headers())
	if err != nil {
		a.log.Warn("dropping an output message", "subject", msg.Subject(), "error", err)
		a.term(msg)
		return
	}
	now := time.Now()
	a.mu.Lock()
	out, err := a.asm.add(ref, msg.Data())
	if err == nil {
		a.apply(out, now)
	}
	a.mu.Unlock()
	if err != nil {
		a.log.Warn("dropping an output message", "error", err)
		a.term(msg)
		return
	}
	if out.duplicate {
		a.log.Debug("dropping a duplicate output message", "msg_id", ref.MsgID())
	}
	if err := msg.Ack(); err != nil {
		a.log.Debug("acking an output message", "msg_id", ref.MsgID(), "error", err)
	}
}

func (a *Agent) term(msg jetstream.Msg) {
	if err := msg.Term(); err != nil {
		a.log.Debug("terminating an output message", "error", err)
	}
}

// apply records an outcome; a.mu must be held.
func (a *Agent) apply(out outcome, now time.Time) {
	if out.duplicate {
		a.stats.DuplicateChunks++
		a.m.duplicateChunks.Inc()
	}
	if out.arrived > 0 {
		a.stats.SamplesArrived += int64(out.arrived)
		a.window.Arrived += int64(out.arrived)
		a.m.samplesArrived.Add(float64(out.arrived))
	}
	if len(out.failed) > 0 {
		a.stats.FailedSamples = append(a.stats.FailedSamples, out.failed...)
		a.m.failedSamples.Add(float64(len(out.failed)))
	}
	for _, b := range out.batches {
		a.ready = append(a.ready, b)
		a.readySamples += len(b.Keys)
		a.readyPerEpoch[b.Epoch]++
	}
	a.complete(out.completed, now)
	a.m.bufferedSamples.Set(float64(a.buffered()))
	a.notify()
}

// complete notes epochs whose every shard arrived; a.mu must be held.
func (a *Agent) complete(epochs []int, now time.Time) {
	for _, e := range epochs {
		a.log.Info("epoch complete", "epoch", e)
		if a.readyPerEpoch[e] == 0 {
			a.epochDelivered(e, now)
		}
	}
}

func (a *Agent) epochDelivered(e int, now time.Time) {
	delete(a.readyPerEpoch, e)
	a.delivered++
	if a.delivered == a.job.Spec.Epochs {
		a.finished = now
	}
}

func (a *Agent) buffered() int { return a.readySamples + a.asm.pending }

func (a *Agent) hasRoom() bool { return a.readySamples < a.opts.PrefetchSamples }

func (a *Agent) allDelivered() bool { return a.delivered == a.job.Spec.Epochs }

// waitFor blocks until cond (called with a.mu held) holds.
func (a *Agent) waitFor(ctx context.Context, cond func() bool) error {
	a.mu.Lock()
	for !cond() {
		wake := a.wake
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
		a.mu.Lock()
	}
	a.mu.Unlock()
	return nil
}

// Next returns the next batch, blocking until one is ready; the time spent
// blocked is the trainer's stall time. It returns io.EOF after the last
// batch of the last epoch, and an error wrapping ErrStopped if Run ended
// before that.
func (a *Agent) Next(ctx context.Context) (Batch, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	waiting := false
	stopWaiting := func() {
		if waiting {
			a.unblock(time.Now())
		}
	}
	for {
		if len(a.ready) > 0 {
			stopWaiting()
			return a.pop(time.Now()), nil
		}
		if a.allDelivered() {
			stopWaiting()
			return Batch{}, io.EOF
		}
		if a.runEnded {
			stopWaiting()
			if a.runErr != nil {
				return Batch{}, fmt.Errorf("%w: %w", ErrStopped, a.runErr)
			}
			return Batch{}, ErrStopped
		}
		if !waiting {
			waiting = true
			a.block(time.Now())
		}
		wake := a.wake
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			a.mu.Lock()
			stopWaiting()
			return Batch{}, ctx.Err()
		case <-wake:
		}
		a.mu.Lock()
	}
}

func (a *Agent) block(now time.Time) {
	a.blocked++
	if a.blocked == 1 {
		a.blockStart = now
		a.window.block(now)
	}
}

func (a *Agent) unblock(now time.Time) {
	a.blocked--
	if a.blocked == 0 {
		d := now.Sub(a.blockStart)
		a.stats.StallTime += d
		a.m.stallSeconds.Add(d.Seconds())
		a.window.unblock(now)
	}
}

// pop hands out the oldest ready batch; a.mu must be held.
func (a *Agent) pop(now time.Time) Batch {
	b := a.ready[0]
	a.ready[0] = Batch{}
	a.ready = a.ready[1:]
	n := len(b.Keys)
	a.readySamples -= n
	a.stats.SamplesDelivered += int64(n)
	a.stats.BatchesDelivered++
	a.window.Consumed += int64(n)
	a.window.Done = a.stats.SamplesDelivered
	a.m.samplesDelivered.Add(float64(n))
	a.m.batchesDelivered.Inc()
	a.m.bufferedSamples.Set(float64(a.buffered()))
	if a.firstBatch.IsZero() {
		a.firstBatch = now
	}
	a.readyPerEpoch[b.Epoch]--
	if a.readyPerEpoch[b.Epoch] == 0 && a.asm.done[b.Epoch] {
		a.epochDelivered(b.Epoch, now)
	}
	a.notify()
	return b
}

// Fail reports a sample the trainer could not use; it shows in Stats.
func (a *Agent) Fail(key, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.FailedSamples = append(a.stats.FailedSamples, wire.FailedSample{Key: key, Reason: reason})
	a.m.failedSamples.Inc()
}

// Stats returns a snapshot of the agent's progress.
func (a *Agent) Stats() Stats {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.FailedSamples = append([]wire.FailedSample(nil), a.stats.FailedSamples...)
	if a.blocked > 0 {
		s.StallTime += now.Sub(a.blockStart)
	}
	end := now
	if !a.finished.IsZero() {
		end = a.finished
	}
	s.RunTime = end.Sub(a.created)
	if !a.firstBatch.IsZero() {
		s.TimeToFirstBatch = a.firstBatch.Sub(a.created)
	}
	s.Epochs = a.delivered
	s.BufferedSamples = a.buffered()
	return s
}

// publishDemands publishes a demand signal every DemandInterval until ctx ends.
func (a *Agent) publishDemands(ctx context.Context) {
	t := time.NewTicker(a.opts.DemandInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if err := a.publishDemand(now, false); err != nil {
				a.log.Warn("publishing demand", "error", err)
			}
		}
	}
}

func (a *Agent) publishDemand(now time.Time, done bool) error {
	gpu := -1.0
	if a.opts.GPU != nil {
		if u, err := a.opts.GPU.Utilization(); err == nil {
			gpu = u
		} else {
			a.log.Debug("reading gpu utilisation", "error", err)
		}
	}
	a.mu.Lock()
	a.window.Buffered = a.buffered()
	d := a.window.roll(now)
	a.mu.Unlock()
	d.Job = a.job.Spec.ID
	d.GPUUtilization = gpu
	d.Done = done
	a.m.stallFraction.Set(d.StallFraction)
	data, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encoding demand: %w", err)
	}
	if err := a.nc.Publish(wire.DemandSubject(a.job.Spec.ID), data); err != nil {
		return fmt.Errorf("publishing demand of job %s: %w", a.job.Spec.ID, err)
	}
	return nil
}
