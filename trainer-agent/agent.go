package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// ErrStopped is returned by Next once Run has ended before the job was delivered.
var ErrStopped = errors.New("trainer agent stopped")

// ErrJobEnded means the job was cancelled, failed or deleted while the agent
// read it: its output is gone and nothing more will come.
var ErrJobEnded = errors.New("job ended")

// Options tune an Agent; zero values take the defaults.
type Options struct {
	// Reader names which of the job's declared readers (wire.JobSpec.Readers)
	// this agent is: each reader gets every sample of every epoch through
	// its own durable consumer and keeps its own position. Default
	// wire.DefaultReader.
	Reader string
	// PrefetchSamples bounds the samples held in batches ready for the
	// trainer; the agent stops pulling at this bound, unless the epoch the
	// ranks are in has no step ready. Default: 4 global steps (4 batches
	// per rank), at least 256 samples.
	PrefetchSamples int
	// WorldSize fixes the number of ranks the agent serves; 0 takes it
	// from the first request (Next is rank 0 of world 1).
	WorldSize int
	// DropLast drops each epoch's last step when it would be partial
	// (reported in Stats.DroppedSamples) rather than split it over the
	// ranks; false lets the first request decide.
	DropLast bool
	// DemandInterval is how often a demand signal is published. Default 1s.
	DemandInterval time.Duration
	// KeepAliveInterval is how often the chunks held unacked get a progress
	// ping (and acks waiting for a position write are flushed). Default a
	// third of streams.ReaderAckWait.
	KeepAliveInterval time.Duration
	// GPU reads GPU utilisation; nil reports -1 (no GPU).
	GPU GPUSampler
	// MaxLagBytes is the output stream's fill past which this reader, when
	// it holds the stream's oldest message, sheds what it cannot keep and
	// asks for it again later (see lag.go), so that a lagging trial does
	// not hold back the others. 0: half the job's output buffer when the
	// job has more than one reader, never otherwise; < 0: never.
	MaxLagBytes int64
}

// Stats describe the agent's progress.
type Stats struct {
	SamplesArrived   int64 // samples received from functions (duplicates excluded)
	SamplesDelivered int64
	BatchesDelivered int64
	// DuplicateChunks counts output messages (chunks and shard ends)
	// dropped because the agent had already seen them.
	DuplicateChunks int64
	// ShedMessages counts output messages a lagging reader took off the
	// stream unkept, their shards owed and asked for again.
	ShedMessages int64
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
	// BufferedSamples are held by the agent: in ready batches, in partial
	// ones and in ranks' parts not taken yet.
	BufferedSamples int
	// WorldSize is the number of ranks served (0 until fixed), DropLast
	// their drop_last setting, DroppedSamples the samples of epochs'
	// partial last steps that drop_last left out.
	WorldSize      int
	DropLast       bool
	DroppedSamples int64
	// Ranks has what each rank took.
	Ranks []RankStats
	// Steps are the step times each rank's client reported, by rank.
	Steps []RankSteps
}

// RankStats is what one rank took: parts (batches) and samples, the epoch
// and step of its last part (-1 before the first), and whether it was told
// that every step was delivered.
type RankStats struct {
	Rank    int   `json:"rank"`
	Batches int64 `json:"batches"`
	Samples int64 `json:"samples"`
	Epoch   int   `json:"epoch"`
	Step    int   `json:"step"`
	Ended   bool  `json:"ended"`
}

// MarshalJSON writes durations in seconds, for trainers in any language.
func (s Stats) MarshalJSON() ([]byte, error) {
	failed := s.FailedSamples
	if failed == nil {
		failed = []wire.FailedSample{}
	}
	ranks := s.Ranks
	if ranks == nil {
		ranks = []RankStats{}
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
		WorldSize          int                 `json:"world_size"`
		DropLast           bool                `json:"drop_last"`
		DroppedSamples     int64               `json:"dropped_samples"`
		Ranks              []RankStats         `json:"ranks"`
		Steps              []RankSteps         `json:"steps"`
	}{
		s.SamplesArrived, s.SamplesDelivered, s.BatchesDelivered, s.DuplicateChunks, failed,
		s.StallTime.Seconds(), s.RunTime.Seconds(), s.TimeToFirstBatch.Seconds(), s.Epochs, s.BufferedSamples,
		ratio(s.StallTime, s.RunTime), s.WorldSize, s.DropLast, s.DroppedSamples, ranks, s.Steps,
	})
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return a.Seconds() / b.Seconds()
}

// Agent feeds one job to the ranks of one trainer, as one of the job's
// readers.
//
// Delivery is exactly once per (epoch, sample) across restarts of the
// agent, provided it is not killed while a step is on its way to the
// ranks: the position is recorded before a part of a step is returned (and
// the chunks the step completes are acked only after), so a step that was
// handed out counts as delivered even if a rank never read its part. A
// trainer that resumes from its checkpoint (Resume) closes that gap.
type Agent struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	job     wire.Job
	reader  string
	opts    Options
	log     *slog.Logger
	m       jobMetrics
	created time.Time
	started atomic.Bool
	bound   atomic.Bool // reading the reader's consumer
	warned  atomic.Bool // about an output buffer too small

	// posMu serialises position writes; posRev and written belong to it.
	posMu     sync.Mutex
	posKV     jetstream.KeyValue
	posRev    uint64 // revision of the stored position, 0 if none
	written   uint64 // assembler version last written
	posBroken bool   // a write failed: no more writes
	// recorded is the position last written or loaded (nil: none): every
	// message acked is in it, as acks wait for the write.
	recorded []byte
	// ackMu guards unconfirmed: acks sent and not yet confirmed (confirmAcks).
	ackMu       sync.Mutex
	unconfirmed []sentAck

	mu    sync.Mutex
	wake  chan struct{} // closed and replaced on every change
	asm   *assembler
	ready map[int][]readyBatch // per epoch, in order
	// readySamples are the samples in ready.
	readySamples int
	ranks        stepper
	prefetchAuto bool // PrefetchSamples scales with the world size
	loaded       bool // the recorded position was loaded
	resuming     bool // a resume is rewinding the position: no step is formed
	resumed      *resumeRecord
	replay       replayFunc
	blocked      int // callers waiting in Next
	blockStart   time.Time
	window       stallWindow
	steps        stepBook  // the ranks' step reports
	gpu          *gpuMeter // readings of the GPU for the demand window
	stats        Stats
	firstBatch   time.Time
	finished     time.Time
	runCtx       context.Context
	fail         context.CancelCauseFunc
	closing      bool // Run is returning: no more batches
	runEnded     bool
	runErr       error
}

// New prepares agent opts.Reader for job; Run starts it. m may be nil.
// The reader must be one the job's spec declares (none declared means
// wire.DefaultReader).
func New(nc *nats.Conn, js jetstream.JetStream, job wire.Job, opts Options, logger *slog.Logger, m *Metrics) (*Agent, error) {
	if nc == nil || js == nil {
		return nil, errors.New("trainer agent: a nats connection and a jetstream context are required")
	}
	if err := wire.ValidateJobID(job.Spec.ID); err != nil {
		return nil, fmt.Errorf("trainer agent: %w", err)
	}
	if opts.Reader == "" {
		opts.Reader = wire.DefaultReader
	}
	readers := job.Spec.Readers
	if len(readers) == 0 {
		readers = []string{wire.DefaultReader}
	}
	switch {
	case job.Spec.BatchSize < 1:
		return nil, fmt.Errorf("trainer agent: job %s: batch size %d: want >= 1", job.Spec.ID, job.Spec.BatchSize)
	case job.Spec.Epochs < 1:
		return nil, fmt.Errorf("trainer agent: job %s: epochs %d: want >= 1", job.Spec.ID, job.Spec.Epochs)
	case !slices.Contains(readers, opts.Reader):
		return nil, fmt.Errorf("trainer agent: job %s has no reader %q: its spec declares %s",
			job.Spec.ID, opts.Reader, strings.Join(readers, ", "))
	case opts.WorldSize < 0:
		return nil, fmt.Errorf("trainer agent: world size %d: want >= 0 (0: from the first request)", opts.WorldSize)
	case opts.PrefetchSamples < 0:
		return nil, fmt.Errorf("trainer agent: prefetch samples %d: want >= 0 (0 for the default)", opts.PrefetchSamples)
	case opts.DemandInterval < 0:
		return nil, fmt.Errorf("trainer agent: demand interval %v: want >= 0 (0 for the default)", opts.DemandInterval)
	case opts.KeepAliveInterval < 0 || opts.KeepAliveInterval >= streams.ReaderAckWait:
		return nil, fmt.Errorf("trainer agent: keep-alive interval %v: want 0 (the default) up to %v", opts.KeepAliveInterval, streams.ReaderAckWait)
	}
	auto := opts.PrefetchSamples == 0
	if auto {
		opts.PrefetchSamples = max(4*max(opts.WorldSize, 1)*job.Spec.BatchSize, 256)
	}
	if opts.DemandInterval == 0 {
		opts.DemandInterval = time.Second
	}
	if opts.KeepAliveInterval == 0 {
		opts.KeepAliveInterval = streams.ReaderAckWait / 3
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	now := time.Now()
	a := &Agent{
		nc: nc, js: js, job: job, reader: opts.Reader, opts: opts,
		log:          logger.With("job", job.Spec.ID, "reader", opts.Reader),
		m:            m.forJob(job.Spec.ID, opts.Reader),
		created:      now,
		wake:         make(chan struct{}),
		asm:          newAssembler(job),
		ready:        map[int][]readyBatch{},
		prefetchAuto: auto,
		replay:       broker.Replay,
		window:       stallWindow{Start: now, Capacity: opts.PrefetchSamples},
		gpu:          newGPUMeter(opts.GPU, opts.DemandInterval, logger.With("job", job.Spec.ID, "reader", opts.Reader)),
	}
	if opts.WorldSize > 0 {
		a.ranks.setWorld(opts.WorldSize)
	}
	if opts.DropLast {
		a.ranks.dropLast, a.ranks.dropFixed = true, true
	}
	return a, nil
}

// Job is the job the agent reads.
func (a *Agent) Job() wire.Job { return a.job }

// Reader is the reader the agent is.
func (a *Agent) Reader() string { return a.reader }

// Ready reports whether the agent has loaded its position and is reading
// the job's output (or had nothing left to read), and has not stopped.
func (a *Agent) Ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bound.Load() && !a.runEnded
}

// notify wakes every waiter; a.mu must be held.
func (a *Agent) notify() {
	close(a.wake)
	a.wake = make(chan struct{})
}

// Run loads the reader's position, consumes the job's output stream and
// publishes demand signals until the trainer has taken every batch; it then
// publishes the final demand (Done) and returns nil. It returns early with
// ctx's error, an error wrapping ErrJobEnded when the job is cancelled or
// deleted, or a consuming error; Next then fails with ErrStopped. On an
// early return the chunks held are released for redelivery, so that a new
// agent of the same reader can resume at once.
func (a *Agent) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("trainer agent: Run called twice")
	}
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	a.mu.Lock()
	a.runCtx, a.fail = ctx, fail
	a.mu.Unlock()

	err := a.run(ctx)
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx) // the reason the agent was stopped
	}
	a.release(err)
	a.mu.Lock()
	a.runEnded, a.runErr = true, err
	a.notify()
	a.mu.Unlock()
	return err
}

// stop ends Run with err.
func (a *Agent) stop(err error) {
	a.mu.Lock()
	fail := a.fail
	a.mu.Unlock()
	if fail != nil {
		fail(err)
	}
}

func (a *Agent) run(ctx context.Context) error {
	id := a.job.Spec.ID
	jobs, err := a.js.KeyValue(ctx, wire.JobsBucket)
	if err != nil {
		return fmt.Errorf("opening the job store (bucket %s): %w", wire.JobsBucket, err)
	}
	if err := a.loadPosition(ctx); err != nil {
		return err
	}

	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(ctx)
	defer func() {
		stopBG()
		bg.Wait()
	}()
	goBG := func(f func(context.Context)) {
		bg.Add(1)
		go func() {
			defer bg.Done()
			f(bgCtx)
		}()
	}
	goBG(func(ctx context.Context) { a.watchJob(ctx, jobs) })
	goBG(a.keepAlive)
	demandCtx, stopDemand := context.WithCancel(bgCtx)
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

	var cons jetstream.Consumer
	for {
		a.mu.Lock()
		allCut := a.asm.allCut()
		a.mu.Unlock()
		if !allCut {
			if cons == nil {
				if cons, err = a.consumer(ctx); err != nil {
					return err
				}
			}
			a.bound.Store(true)
			if err := a.consume(ctx, cons); err != nil {
				if ended := a.checkJob(ctx, jobs); ended != nil {
					return ended // the reason the output went away
				}
				return err
			}
			a.log.Info("every epoch arrived; waiting for the trainer's ranks to take the last steps")
		}
		a.bound.Store(true)
		// The end is every rank told so (a 410, io.EOF from Next); a
		// resume from a checkpoint may rewind the position first.
		if err := a.waitFor(ctx, func() bool {
			return !a.asm.allCut() || a.asm.allFinished() && a.ranks.allEnded()
		}); err != nil {
			return err
		}
		a.mu.Lock()
		allCut = a.asm.allCut()
		a.mu.Unlock()
		if allCut {
			break
		}
	}
	if err := a.sync(ctx, false); err != nil {
		return err
	}
	if err := a.settle(ctx, jobs); err != nil {
		return err
	}
	if err := a.writeDone(ctx); err != nil {
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

// release runs when Run ends: unless the job is gone it records the
// position once more (acking what waited for it) and returns the chunks
// still held to the stream for immediate redelivery.
func (a *Agent) release(err error) {
	a.mu.Lock()
	a.closing = true
	a.mu.Unlock()
	if err == nil || errors.Is(err, ErrJobEnded) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := a.sync(ctx, false); serr != nil {
		a.log.Warn("recording the position on the way out", "error", serr)
	}
	// What the position does not cover goes back to the stream: the chunks
	// held, and the messages whose acks wait for a write that failed.
	a.mu.Lock()
	held := append(a.asm.held(), a.asm.takeAcks()...)
	a.mu.Unlock()
	for _, m := range held {
		if err := m.Nak(); err != nil {
			a.log.Debug("releasing a held chunk", "error", err)
		}
	}
}

// consumer binds to the reader's durable consumer, which the broker created
// with the job's output stream, waiting for both if the agent came first.
func (a *Agent) consumer(ctx context.Context) (jetstream.Consumer, error) {
	stream := wire.OutputStream(a.job.Spec.ID)
	name := wire.ReaderConsumer(a.reader)
	logged := false
	for {
		cons, err := a.js.Consumer(ctx, stream, name)
		if err == nil {
			return cons, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("binding to consumer %s on %s: %w", name, stream, err)
		}
		if !logged {
			a.log.Info("waiting for the job's output stream and the reader's consumer", "stream", stream, "consumer", name)
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

// consume pulls output messages until every epoch has arrived.
func (a *Agent) consume(ctx context.Context, cons jetstream.Consumer) (err error) {
	// Messages, not Fetch: Fetch issues one request per batch and crawls
	// with MB-size messages; Messages keeps a byte-bounded request open.
	iter, err := cons.Messages(jetstream.PullMaxBytes(a.pullMaxBytes()))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", wire.OutputStream(a.job.Spec.ID), err)
	}
	defer func() { a.drain(iter, err == nil) }()
	for {
		a.mu.Lock()
		done := a.asm.allCut()
		a.mu.Unlock()
		if done {
			return nil
		}
		if err := a.askOwed(ctx); err != nil {
			return err
		}
		if err := a.waitForRoom(ctx, cons, iter); err != nil {
			return err
		}
		a.mu.Lock()
		room := a.hasRoom()
		a.mu.Unlock()
		if !room {
			continue // shed for a while; the ranks may need data now
		}
		// A reader that may owe shards looks up from the stream now and
		// then: what it waits for may be a replay it has yet to ask for.
		nctx, cancel := ctx, context.CancelFunc(func() {})
		if a.lagLimit() > 0 {
			nctx, cancel = context.WithTimeout(ctx, lagCheckEvery)
		}
		msg, err := iter.Next(jetstream.NextContext(nctx))
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case nctx.Err() != nil:
			continue
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

// waitForRoom waits until the agent may pull, or, while this reader
// holds the shared output buffer, sheds for a while.
func (a *Agent) waitForRoom(ctx context.Context, cons jetstream.Consumer, iter jetstream.MessagesContext) error {
	for {
		if a.lagLimit() == 0 {
			return a.waitFor(ctx, a.hasRoom)
		}
		wctx, cancel := context.WithTimeout(ctx, lagCheckEvery)
		err := a.waitFor(wctx, a.hasRoom)
		cancel()
		if err == nil || ctx.Err() != nil {
			return ctx.Err()
		}
		lag, err := a.lagging(ctx, cons)
		if err != nil {
			a.log.Debug("checking the reader's lag", "error", err)
			continue
		}
		if lag {
			if err := a.shedFor(ctx, iter, lagCheckEvery); err != nil {
				return err
			}
			if err := a.sync(ctx, false); err != nil {
				return fmt.Errorf("recording the shards owed: %w", err)
			}
			return nil
		}
	}
}

// drain stops pulling and settles the messages already delivered to the
// client: handled (they can only be copies) when every epoch arrived, so
// that nothing stays pending on the reader's consumer, else returned for
// redelivery.
func (a *Agent) drain(iter jetstream.MessagesContext, handle bool) {
	iter.Drain()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		msg, err := iter.Next(jetstream.NextContext(ctx))
		cancel()
		if err != nil {
			return
		}
		if handle {
			a.handle(msg)
		} else if err := msg.Nak(); err != nil {
			a.log.Debug("releasing an output message", "error", err)
		}
	}
}

// handle applies one output message. Its ack waits until its samples were
// handed out and the position recording that was written.
func (a *Agent) handle(msg jetstream.Msg) {
	ref, err := wire.ParseChunkRef(a.job.Spec.ID, msg.Headers())
	if err != nil {
		a.log.Warn("dropping an output message", "subject", msg.Subject(), "error", err)
		a.term(msg)
		return
	}
	now := time.Now()
	a.mu.Lock()
	out, err := a.asm.add(ref, msg.Data(), msg)
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
	a.checkBuffer()
}

// checkBuffer warns once when the chunks held unacked nearly fill the
// job's output buffer: functions cannot publish more, and if those chunks
// do not make up the batches the trainer waits for, the job stalls.
func (a *Agent) checkBuffer() {
	limit := a.job.Spec.OutputBufferBytes
	a.mu.Lock()
	held, ready := a.asm.heldBytes, a.readySamples
	a.mu.Unlock()
	if limit <= 0 || held*10 < limit*9 || ready > 0 || a.warned.Swap(true) {
		return
	}
	a.log.Warn("the chunks this agent holds nearly fill the job's output buffer: raise output_buffer_bytes or lower the batch size or prefetch",
		"held_bytes", held, "output_buffer_bytes", limit, "prefetch_samples", a.opts.PrefetchSamples, "batch_size", a.job.Spec.BatchSize)
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
		a.ready[b.Epoch] = append(a.ready[b.Epoch], b)
		a.readySamples += len(b.Keys)
	}
	for _, e := range out.cut {
		a.log.Info("every chunk of the epoch arrived", "epoch", e)
	}
	a.epochsFinished(out.finished, now)
	a.m.bufferedSamples.Set(float64(a.buffered()))
	a.notify()
}

// epochsFinished notes epochs whose every sample was handed out; a.mu must be held.
func (a *Agent) epochsFinished(epochs []int, now time.Time) {
	for _, e := range epochs {
		a.log.Info("epoch delivered", "epoch", e)
	}
	if len(epochs) > 0 && a.asm.allFinished() && a.finished.IsZero() {
		a.finished = now
	}
}

func (a *Agent) buffered() int { return a.readySamples + a.asm.pending + a.ranks.queued }

// hasRoom says whether to pull; a.mu must be held. Past the prefetch
// bound the agent still pulls while the ranks' epoch has no step ready:
// redelivered chunks of it may come after ready batches of later epochs.
func (a *Agent) hasRoom() bool { return a.readySamples < a.prefetch() || !a.stepReady() }

// prefetch is the bound on ready samples; a.mu must be held.
func (a *Agent) prefetch() int {
	if a.prefetchAuto {
		return max(4*max(a.ranks.world, 1)*a.job.Spec.BatchSize, 256)
	}
	return a.opts.PrefetchSamples
}

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

// Next returns the next batch, as rank 0 of a world of 1 (an agent whose
// ranks were fixed to another world size refuses it with
// ErrWorldMismatch), blocking until one is ready; the time spent blocked
// is the trainer's stall time. It
// returns io.EOF after the last batch of the last epoch, and an error
// wrapping ErrStopped if Run ended before that (wrapping ErrJobEnded too if
// that is why).
//
// The batch counts as delivered once Next returns it: the reader's
// position is written first, so a restarted agent will not hand out its
// samples again.
func (a *Agent) Next(ctx context.Context) (Batch, error) {
	p, err := a.nextPart(ctx, rankRequest{rank: 0, world: 1})
	return p.Batch, err
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
	s.Epochs = a.asm.finishedCount()
	s.BufferedSamples = a.buffered()
	s.WorldSize, s.DropLast = a.ranks.world, a.ranks.dropLast
	for r, c := range a.ranks.counts {
		s.Ranks = append(s.Ranks, RankStats{Rank: r, Batches: c.batches, Samples: c.samples, Epoch: c.epoch, Step: c.step, Ended: c.ended})
	}
	s.Steps = a.steps.totals()
	return s
}

// publishDemands publishes a demand signal every DemandInterval until ctx ends.
func (a *Agent) publishDemands(ctx context.Context) {
	var sampling sync.WaitGroup
	defer sampling.Wait()
	sampling.Go(func() { a.gpu.run(ctx) })
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
	gpu := a.gpu.take()
	a.mu.Lock()
	a.window.Buffered = a.buffered()
	d := a.closeWindow(now, gpu)
	a.mu.Unlock()
	d.Job = a.job.Spec.ID
	d.Reader = a.reader
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
