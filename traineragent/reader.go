package traineragent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/demand"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/traineragent/internal/teamproto"
	"github.com/sluice-project/sluice/wire"
)

// Options tune an Agent; zero values take the defaults.
type Options struct {
	// Readers names which of the job's declared readers
	// (wire.JobSpec.Readers) the agent serves: each gets every sample of
	// every epoch and keeps its own position. Default: every declared
	// reader. Every agent of a job must serve the same readers, since they
	// share the job's tasks.
	Readers []string
	// Name names the agent in demand signals, dispatch shares and shard
	// results (default: host name and process id).
	Name string
	// PrefetchSamples bounds the samples held in batches ready for the
	// trainer; the agent stops pulling at this bound, unless the epoch the
	// ranks are in has no step ready. Default: 4 global steps (4 batches
	// per rank), at least 256 samples.
	PrefetchSamples int
	// WorldSize fixes the number of ranks the reader has; 0 takes it
	// from the first request (Next is rank 0 of world 1).
	WorldSize int
	// TeamKey is the job's team key (`sluice job submit` makes it): the
	// agent derives from it its node credential for Name (Node), unless
	// given one. It is never logged.
	TeamKey []byte
	// Node is the agent's node credential (`sluice job node-credential`
	// writes it: wire.ParseNodeCredential): the agent seals its team
	// messages, demand signals and reader records as its node, whose name
	// is the agent's Name. A job whose record has a node key
	// (wire.Job.NodeKey) needs it or TeamKey; a team needs such a job.
	Node *wire.NodeIdentity
	// Ranks are the ranks of WorldSize this agent serves, those of its
	// node (nil: all). The agents serving the other ranks form the
	// reader's team with it (readerstate's team.go): the one serving rank 0 plans. A
	// team serves a job with one reader; its agents share DropLast.
	Ranks []int
	// DropLast drops each epoch's last step when it would be partial
	// (reported in Stats.DroppedSamples) rather than split it over the
	// ranks; false lets the first request decide.
	DropLast bool
	// DemandInterval is how often a demand signal is published. Default 1s.
	DemandInterval time.Duration
	// KeepAliveInterval is how often the position is written when it
	// changed without a batch (shard ends, chunks without rows to hand
	// out), so that their tasks are settled. Default 10s.
	KeepAliveInterval time.Duration
	// GPU reads GPU utilisation; nil reports -1 (no GPU).
	GPU GPUSampler
	// MaxLagBytes is what a reader may hold, its prefetch full, before it
	// lags and keeps no new shard while another reader wants more (assembly's lag.go).
	// 0: half the job's output buffer; < 0: never (the slowest reader
	// then sets every reader's pace once the buffer is full).
	MaxLagBytes int64
	// Dispatch tunes the agent's dispatcher (its Agent name is Name).
	Dispatch dispatch.Options
}

// Reader feeds one job to the ranks of one trainer, as one of the job's
// readers; an Agent runs one per reader it serves and feeds every one of
// them each shard's chunks.
//
// Delivery is exactly once per (epoch, sample) across restarts of the
// agent, provided it is not killed while a step is on its way to the
// ranks: the position is recorded before a part of a step is returned (and
// the tasks of the shards the step completes are settled only after), so a
// step that was handed out counts as delivered even if a rank never read
// its part. A trainer that resumes from its checkpoint (Resume) closes
// that gap.
//
// The Reader is a shell around its state (readerstate.State, which has every
// piece of bookkeeping and no I/O): it holds the lock, does the NATS, KV
// and HTTP work, wakes waiters, writes the state's log lines and keeps
// the metrics in step with the state's counters.
//
// The agent's locks, in the order they may be taken (one is taken only
// while holding locks before it in the list, never after):
//
//  1. positionStore.mu: a write of the position, or a resume's rewind
//     (lockForResume), which must see no write.
//  2. Reader.mu: the state (readerstate.State). Never held across I/O but one:
//     a member's last end settles its tasks (dispatch.Dispatcher.Settle,
//     an ack) before the agent can see it is done.
//  3. The leaves, each held only for a few fields and never while taking
//     another: assembly.RecordedShards.mu (under positionStore.mu: a write's
//     shards), teamproto.Member.mu and Agent.roomMu (under Reader.mu: a member's
//     settle, a change's wake), teamproto.Producer.mu, demand.GPUMeter.mu. The
//     dispatcher's own lock is a leaf too: it calls the sink with it
//     released.
//
// docs/architecture.md says the same.
type Reader struct {
	job     wire.Job
	reader  string
	opts    Options
	log     *slog.Logger
	m       jobMetrics
	metered meterMarks // what the metrics have counted (mu)
	// completed is told the shards whose every row the position now
	// records as handed out (after the write): the agent settles their
	// tasks once every reader it serves has them.
	completed func([]assembly.ShardRef)
	// replay asks the agent to produce shards again for this reader.
	replay func([]wire.ShardTask)
	// changed is told every change notify signals (the agent's sends
	// waiting for room look again); called with mu held.
	changed func()

	// pos keeps the position (its mutex serialises writes); recorded
	// says which shards the written position has complete.
	pos      *positionStore
	recorded assembly.RecordedShards
	// node seals the reader's records, check checks those read (nil both:
	// the job's record has no node key; the records are plain).
	node  *wire.NodeIdentity
	check *wire.NodeVerifier

	mu   sync.Mutex         // lock order: see above
	st   *readerstate.State // guarded by mu
	wake chan struct{}      // closed and replaced on every change (mu)
	gpu  *demand.GPUMeter   // readings of the GPU for the demand window
	fail func(error)        // stops the agent
	// role is the reader's kind: a lone agent, a team's planner or
	// member (role.go).
	role role
	// producer has shards produced again for parts whose rows this agent
	// does not hold (set once the agent dispatches; mu).
	producer *teamproto.Producer
	// shedding is set by the agent while the reader lags (assembly's lag.go).
	shedding atomic.Bool
}

// newReader prepares reader name of job.
func newReader(job wire.Job, name string, opts Options, logger *slog.Logger, m *Metrics) *Reader {
	now := time.Now()
	st := readerstate.NewReaderState(job, opts.stateConfig(), now)
	opts.PrefetchSamples = st.PrefetchSamples
	log := logger.With("job", job.Spec.ID, "reader", name)
	r := &Reader{
		job: job, reader: name, opts: opts, log: log,
		m:         m.forJob(job.Spec.ID, name),
		completed: func([]assembly.ShardRef) {},
		replay:    func([]wire.ShardTask) {},
		changed:   func() {},
		fail:      func(error) {},
		st:        st,
		wake:      make(chan struct{}),
		gpu:       demand.NewGPUMeter(opts.GPU, opts.DemandInterval, log),
	}
	r.role = solo{r}
	return r
}

// planAsTeam makes the reader its team's planner.
func (a *Reader) planAsTeam(t *team) planner {
	p := planner{solo{a}, t}
	a.role, a.st.Steps = p, t.TeamState
	return p
}

// joinTeam makes the reader a member of its team.
func (a *Reader) joinTeam(m *teamproto.Member) {
	a.role = memberRole{a, m}
}

// Name is the reader's name (one of the job's declared readers).
func (a *Reader) Name() string { return a.reader }

// Ready reports whether the reader has loaded its position and has not stopped.
func (a *Reader) Ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Loaded && !a.st.RunEnded
}

// unlock ends a change of the state: waiters are woken if it changed, the
// metrics follow it, and its log lines are written once the lock is
// released.
func (a *Reader) unlock() {
	_ = a.unlockToWait()
}

// unlockToWait is unlock, returning the channel closed at the next change.
func (a *Reader) unlockToWait() <-chan struct{} {
	if a.st.Changed {
		a.notify()
	}
	a.meter()
	wake := a.wake
	events := a.st.TakeEvents()
	a.mu.Unlock()
	for _, e := range events {
		a.log.Log(context.Background(), e.Level, e.Msg, e.Args...)
	}
	return wake
}

// notify wakes every waiter; a.mu must be held.
func (a *Reader) notify() {
	a.st.Changed = false
	close(a.wake)
	a.wake = make(chan struct{})
	a.changed()
}

// meterMarks are the state's counters as the metrics last counted them.
type meterMarks struct {
	arrived, delivered, batches, duplicates, dropped, failed int64
	stall                                                    time.Duration
}

// marksOf are the counters of s.
func marksOf(s *Stats) meterMarks {
	return meterMarks{s.SamplesArrived, s.SamplesDelivered, s.BatchesDelivered, s.DuplicateChunks, s.DroppedSamples, s.FailedCount(), s.StallTime}
}

// meter brings the metrics in step with the state's counters, which only
// grow; a.mu must be held.
func (a *Reader) meter() {
	now, was := marksOf(&a.st.Stats), a.metered
	if now != was {
		add := func(c prometheus.Counter, now, was int64) {
			if now > was {
				c.Add(float64(now - was))
			}
		}
		add(a.m.samplesArrived, now.arrived, was.arrived)
		add(a.m.samplesDelivered, now.delivered, was.delivered)
		add(a.m.batchesDelivered, now.batches, was.batches)
		add(a.m.duplicateChunks, now.duplicates, was.duplicates)
		add(a.m.droppedSamples, now.dropped, was.dropped)
		add(a.m.failedSamples, now.failed, was.failed)
		if now.stall > was.stall {
			a.m.stallSeconds.Add((now.stall - was.stall).Seconds())
		}
		a.metered = now
	}
	a.m.bufferedSamples.Set(float64(a.st.Buffered()))
	a.m.heldBytes.Set(float64(a.st.Asm.HeldBytes))
}

// stop ends the agent's run with err.
func (a *Reader) stop(err error) { a.fail(err) }

// end marks the reader stopped (err nil: every rank got every step).
func (a *Reader) end(err error) {
	a.mu.Lock()
	a.st.End(err)
	a.unlock()
}

// done reports whether every sample of every epoch was handed out and
// every rank was told so (on a member, every rank of this agent).
func (a *Reader) done() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.role.done(a.st)
}

// handedOut reports whether every sample of every epoch was handed out
// (on a member, to every rank of this agent).
func (a *Reader) handedOut() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.role.handedOut(a.st)
}

// addChunk applies chunk index of task's shard (data is kept: the caller
// must not reuse it); an error refuses it (see assembler.add).
func (a *Reader) addChunk(task wire.ShardTask, index int, data []byte) error {
	ref := wire.ChunkRef{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunk: index}
	_, err := a.intake(ref, func(st *readerstate.State) (assembly.Outcome, error) { return st.Asm.Add(ref, data) })
	return err
}

// addEnd applies task's shard end.
func (a *Reader) addEnd(task wire.ShardTask, end wire.ShardEnd) {
	ref := wire.ChunkRef{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunk: -1}
	_, _ = a.intake(ref, func(st *readerstate.State) (assembly.Outcome, error) { return st.Asm.End(ref, end, true) }) // logged
}

// addFailed ends task's shard, which failed for good.
func (a *Reader) addFailed(task wire.ShardTask, reason string) {
	ref := wire.ChunkRef{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunk: -1}
	a.log.Warn("shard failed for good; its samples are reported failed", "epoch", task.Epoch, "shard", task.Shard, "key", task.Key, "reason", reason)
	_, _ = a.intake(ref, func(st *readerstate.State) (assembly.Outcome, error) { return st.Asm.Fail(ref, task.Key, reason) }) // logged
}

// intake applies output to the state (apply changes it, a.mu held).
func (a *Reader) intake(ref wire.ChunkRef, apply func(*readerstate.State) (assembly.Outcome, error)) (assembly.Outcome, error) {
	now := time.Now()
	shedding := a.shedding.Load()
	a.mu.Lock()
	out, err := a.st.Intake(ref, shedding, now, func() (assembly.Outcome, error) { return apply(a.st) })
	a.unlock()
	if err != nil {
		a.log.Warn("refusing output", "chunk", ref.String(), "err", err)
		return out, err
	}
	if out.Duplicate {
		a.log.Debug("dropping a copy", "chunk", ref.String())
	}
	return out, nil
}

// shardComplete reports whether every row of shard s of epoch e was handed
// out and recorded.
func (a *Reader) shardComplete(e, s int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Asm.ShardComplete(e, s)
}

// arrived counts samples received (a member's chunks: the planner
// batches them).
func (a *Reader) arrived(n int) {
	a.mu.Lock()
	a.st.Arrived(n)
	a.unlock()
}

// waitFor blocks until cond (called with a.mu held) holds.
func (a *Reader) waitFor(ctx context.Context, cond func() bool) error {
	a.mu.Lock()
	for !cond() {
		wake := a.unlockToWait()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
		a.mu.Lock()
	}
	a.unlock()
	return nil
}

// Next returns the next batch, as rank 0 of a world of 1 (an agent whose
// ranks were fixed to another world size refuses it with
// ErrWorldMismatch), blocking until one is ready; the time spent blocked
// is the trainer's stall time. It
// returns io.EOF after the last batch of the last epoch, and an error
// wrapping ErrStopped if Run ended before that (wrapping readerstate.ErrJobEnded too if
// that is why).
//
// The batch counts as delivered once Next returns it: the reader's
// position is written first, so a restarted agent will not hand out its
// samples again.
func (a *Reader) Next(ctx context.Context) (Batch, error) {
	p, err := a.nextPart(ctx, readerstate.RankRequest{Rank: 0, World: 1})
	p.Batch.Materialize()
	return p.Batch, err
}

// nextPart returns rank req.rank's next part, blocking until one is
// ready; the time spent blocked is the trainer's stall time. It returns
// io.EOF once the rank got every step of every epoch, an error wrapping
// ErrWorldMismatch for a request that does not fit the ranks, and one
// wrapping ErrStopped if Run ended before.
//
// The part counts as delivered once nextPart returns it: the reader's
// position, covering the part's whole step, is written first.
func (a *Reader) nextPart(ctx context.Context, req readerstate.RankRequest) (readerstate.RankPart, error) {
	return a.role.nextPart(ctx, req)
}

// takeAndRecord pops rank req.rank's next part once the position that
// covers its step is written.
func (a *Reader) takeAndRecord(ctx context.Context, req readerstate.RankRequest) (readerstate.RankPart, error) {
	p, err := a.takePart(ctx, req)
	if err != nil {
		return readerstate.RankPart{}, err
	}
	// Not cancelled with Run: a step taken is recorded and returned even
	// while the agent stops (else a later write could record it unreturned).
	// Every rank's call writes or waits for the write covering its step.
	if err := a.sync(context.WithoutCancel(ctx), true); err != nil {
		err = fmt.Errorf("recording the position of reader %s: %w", a.reader, err)
		a.stop(err)
		return readerstate.RankPart{}, fmt.Errorf("%w: %w", readerstate.ErrStopped, err)
	}
	return p, nil
}

// takePart pops rank req.rank's next part, forming the next step if the
// rank has none queued, waiting for a change of the state while there is
// none.
func (a *Reader) takePart(ctx context.Context, req readerstate.RankRequest) (readerstate.RankPart, error) {
	a.mu.Lock()
	defer a.unlock()
	if err := a.st.Join(req); err != nil {
		return readerstate.RankPart{}, err
	}
	world := a.st.Ranks.World
	// A member's rank waits at its own agent, which counts that wait.
	remote := req.Agent != ""
	waiting := false
	for {
		superseded := req.Superseded != nil && req.Superseded()
		p, wait, err := a.st.Take(req.Rank, world, superseded, time.Now())
		if !wait {
			if waiting {
				a.st.Unblock(time.Now())
			}
			return p, err
		}
		if !waiting && !remote {
			waiting = true
			a.st.Block(time.Now())
		}
		wake := a.unlockToWait()
		select {
		case <-ctx.Done():
			a.mu.Lock()
			if waiting {
				a.st.Unblock(time.Now())
			}
			return readerstate.RankPart{}, ctx.Err()
		case <-wake:
		}
		a.mu.Lock()
	}
}

// Fail reports a sample the trainer could not use; it shows in Stats.
func (a *Reader) Fail(key, reason string) {
	a.mu.Lock()
	defer a.unlock()
	a.st.RecordFailed(wire.FailedSample{Key: key, Reason: reason})
}

// Stats returns a snapshot of the agent's progress.
func (a *Reader) Stats() Stats {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Snapshot(now)
}

// demand closes the reader's demand window at now: the signal the agent
// publishes for it.
func (a *Reader) demand(now time.Time, done bool) wire.Demand {
	gpu := a.gpu.Take()
	a.mu.Lock()
	d, perRank := a.st.CloseWindow(now, gpu)
	a.unlock()
	a.m.countSteps(perRank)
	a.m.gpuUtilization.Set(d.GPUUtilization)
	a.m.stallFraction.Set(d.StallFraction)
	d.Job = a.job.Spec.ID
	d.Reader = a.reader
	d.Done = done
	return d
}

// reportStep takes a rank's report (the query of GET /v1/batch). An
// invalid one (negative or not finite) is dropped.
func (a *Reader) reportStep(r demand.StepReport) {
	if !r.Valid() {
		a.log.Debug("dropping an invalid step report", "rank", r.Rank, "steps", r.Steps, "wait_s", r.WaitS, "compute_s", r.ComputeS)
		return
	}
	a.mu.Lock()
	defer a.unlock()
	a.st.Book.Report(r)
}

// askOwed asks for the owed shards of the ranks' epoch once no step of it
// is ready: they are noted replayed (and so never shed), the position is
// written, and the agent produces them again.
func (r *Reader) askOwed(ctx context.Context) {
	r.mu.Lock()
	tasks := r.st.OwedDue()
	r.unlock()
	if len(tasks) == 0 {
		return
	}
	if err := r.sync(ctx, false); err != nil {
		r.stop(err)
		return
	}
	r.replay(tasks)
}

// readerstate.Config is what opts fix of a reader's state.
func (o Options) stateConfig() readerstate.Config {
	return readerstate.Config{PrefetchSamples: o.PrefetchSamples, WorldSize: o.WorldSize, DropLast: o.DropLast}
}

// cutPart cuts a part of this (planner) agent's rank given as spans:
// from the chunks it holds, or produced again. A part that cannot be cut
// is lost to the trainer (it counts as handed out): its samples are
// reported failed.
func (a *Reader) cutPart(ctx context.Context, p readerstate.RankPart) (readerstate.RankPart, error) {
	a.mu.Lock()
	sc, prod := a.st.Asm.Schema, a.producer
	a.mu.Unlock()
	b, err := teamproto.CutRows(ctx, p.Epoch, p.Keys, p.Spans, sc, func(ctx context.Context, sp assembly.RowSpan) ([]assembly.Sample, *assembly.Schema, error) {
		if sp.Data != nil {
			return teamproto.SpanRows(sp, sp.Data)
		}
		return prod.Rows(ctx, sp)
	})
	if err != nil {
		a.mu.Lock()
		a.st.Lost(p, err)
		a.unlock()
		return readerstate.RankPart{}, fmt.Errorf("%w: cutting a part of step %d: %w", readerstate.ErrStopped, p.Step, err)
	}
	b.Sources = assembly.SpanSources(a.job, p.Spans)
	p.Batch, p.Spans = b, nil
	return p, nil
}
