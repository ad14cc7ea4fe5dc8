package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/wire"
)

// ErrStopped is returned by Next once Run has ended before the job was delivered.
var ErrStopped = errors.New("trainer agent stopped")

// ErrJobEnded means the job was cancelled, failed or deleted while the agent
// read it: its output is gone and nothing more will come.
var ErrJobEnded = errors.New("job ended")

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
	// TeamKey is the job's team key (`sluice job submit` makes it): every
	// message between the agents of a team is signed with it. A team
	// (Ranks set, fewer than WorldSize) needs it; it is never logged.
	TeamKey []byte
	// Ranks are the ranks of WorldSize this agent serves, those of its
	// node (nil: all). The agents serving the other ranks form the
	// reader's team with it (team.go): the one serving rank 0 plans. A
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
	// lags and keeps no new shard while another reader wants more (lag.go).
	// 0: half the job's output buffer; < 0: never (the slowest reader
	// then sets every reader's pace once the buffer is full).
	MaxLagBytes int64
	// Dispatch tunes the agent's dispatcher (its Agent name is Name).
	Dispatch dispatch.Options
}

// Stats describe the agent's progress.
type Stats struct {
	SamplesArrived   int64 // samples received from functions (duplicates excluded)
	SamplesDelivered int64
	BatchesDelivered int64
	// ShedShards counts the shards this reader did not keep while it
	// lagged (lag.go): they were produced again when its ranks got there.
	ShedShards int64
	// DuplicateChunks counts output messages (chunks and shard ends)
	// dropped because the agent had already seen them.
	DuplicateChunks int64
	// FailedSamples are those that functions could not preprocess (from
	// ShardEnd messages), lost in a corrupt chunk, or reported with Fail:
	// the first MaxFailedSamplesListed; FailedSamplesOmitted counts the
	// rest.
	FailedSamples        []wire.FailedSample
	FailedSamplesOmitted int64
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
		ShedShards         int64               `json:"shed_shards"`
		FailedSamples      []wire.FailedSample `json:"failed_samples"`
		FailedOmitted      int64               `json:"failed_samples_omitted,omitempty"`
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
		s.SamplesArrived, s.SamplesDelivered, s.BatchesDelivered, s.DuplicateChunks, s.ShedShards, failed, s.FailedSamplesOmitted,
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
type Reader struct {
	job     wire.Job
	reader  string
	opts    Options
	log     *slog.Logger
	m       jobMetrics
	created time.Time
	// completed is told the shards whose every row the position now
	// records as handed out (after the write): the agent settles their
	// tasks once every reader it serves has them.
	completed func([]shardRef)
	// replay asks the agent to produce shards again for this reader.
	replay func([]wire.ShardTask)
	// changed is told every change notify signals (the agent's sends
	// waiting for room look again); called with mu held.
	changed func()

	// pos keeps the position (its mutex serialises writes); recorded
	// says which shards the written position has complete.
	pos      *positionStore
	recorded recordedShards

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
	blocked      int // callers waiting in Next
	blockStart   time.Time
	window       stallWindow
	steps        stepBook  // the ranks' step reports
	gpu          *gpuMeter // readings of the GPU for the demand window
	stats        Stats
	// failedIn counts, per epoch, the samples functions could not
	// preprocess or that were lost with their shard: an epoch's last
	// step tells the trainer (rankPart.EpochFailed).
	failedIn   map[int]int64
	firstBatch time.Time
	finished   time.Time
	fail       func(error) // stops the agent
	// team is set on the planner of a reader whose ranks several agents
	// serve (team.go); member on the other agents (member.go).
	team   *team
	member *member
	// producer has shards produced again for parts whose rows this agent
	// does not hold (set once the agent dispatches).
	producer *producer
	// shedding is set by the agent while the reader lags (lag.go).
	shedding atomic.Bool
	closing  bool // the agent is stopping: no more batches
	runEnded bool
	runErr   error
}

// newReader prepares reader name of job.
func newReader(job wire.Job, name string, opts Options, logger *slog.Logger, m *Metrics) *Reader {
	auto := opts.PrefetchSamples == 0
	if auto {
		opts.PrefetchSamples = max(4*max(opts.WorldSize, 1)*job.Spec.BatchSize, 256)
	}
	now := time.Now()
	log := logger.With("job", job.Spec.ID, "reader", name)
	a := &Reader{
		job: job, reader: name, opts: opts, log: log,
		m:            m.forJob(job.Spec.ID, name),
		created:      now,
		completed:    func([]shardRef) {},
		replay:       func([]wire.ShardTask) {},
		changed:      func() {},
		fail:         func(error) {},
		wake:         make(chan struct{}),
		asm:          newAssembler(job),
		ready:        map[int][]readyBatch{},
		failedIn:     map[int]int64{},
		prefetchAuto: auto,
		window:       stallWindow{Start: now, Capacity: opts.PrefetchSamples},
		gpu:          newGPUMeter(opts.GPU, opts.DemandInterval, log),
	}
	if opts.WorldSize > 0 {
		a.ranks.setWorld(opts.WorldSize)
	}
	if opts.DropLast {
		a.ranks.dropLast, a.ranks.dropFixed = true, true
	}
	return a
}

// Name is the reader's name (one of the job's declared readers).
func (a *Reader) Name() string { return a.reader }

// Ready reports whether the reader has loaded its position and has not stopped.
func (a *Reader) Ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.loaded && !a.runEnded
}

// notify wakes every waiter; a.mu must be held.
func (a *Reader) notify() {
	close(a.wake)
	a.wake = make(chan struct{})
	a.m.heldBytes.Set(float64(a.asm.heldBytes))
	a.changed()
}

// stop ends the agent's run with err.
func (a *Reader) stop(err error) { a.fail(err) }

// end marks the reader stopped (err nil: every rank got every step).
func (a *Reader) end(err error) {
	a.mu.Lock()
	a.closing = true
	a.runEnded, a.runErr = true, err
	a.notify()
	a.mu.Unlock()
}

// done reports whether every sample of every epoch was handed out and
// every rank was told so (on a member, every rank of this agent).
func (a *Reader) done() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.member != nil {
		return a.memberDone()
	}
	return a.asm.allFinished() && a.ranks.allEnded()
}

// handedOut reports whether every sample of every epoch was handed out
// (on a member, to every rank of this agent); a.mu must be held.
func (a *Reader) handedOut() bool {
	if a.member != nil {
		return a.memberDone()
	}
	return a.asm.allFinished()
}

// addChunk applies chunk index of task's shard (data is kept: the caller
// must not reuse it); an error refuses it (see assembler.add).
func (a *Reader) addChunk(task wire.ShardTask, index int, data []byte) error {
	ref := wire.ChunkRef{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunk: index}
	return a.intake(ref, func() (outcome, error) { return a.asm.add(ref, data) })
}

// addEnd applies task's shard end.
func (a *Reader) addEnd(task wire.ShardTask, end wire.ShardEnd) {
	ref := wire.ChunkRef{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunk: -1}
	_ = a.intake(ref, func() (outcome, error) { return a.asm.end(ref, end, true) }) // logged
}

// addFailed ends task's shard, which failed for good.
func (a *Reader) addFailed(task wire.ShardTask, reason string) {
	ref := wire.ChunkRef{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunk: -1}
	a.log.Warn("shard failed for good; its samples are reported failed", "epoch", task.Epoch, "shard", task.Shard, "key", task.Key, "reason", reason)
	_ = a.intake(ref, func() (outcome, error) { return a.asm.fail(ref, task.Key, reason) }) // logged
}

func (a *Reader) intake(ref wire.ChunkRef, apply func() (outcome, error)) error {
	now := time.Now()
	a.mu.Lock()
	if a.shedding.Load() {
		owed := a.asm.owes(ref.Epoch, ref.Shard)
		if a.asm.shed(ref) {
			if !owed {
				a.stats.ShedShards++
				a.log.Debug("lagging: not keeping a shard, owed", "epoch", ref.Epoch, "shard", ref.Shard)
			}
			a.mu.Unlock()
			return nil
		}
	}
	out, err := apply()
	if err == nil {
		a.apply(out, now)
	}
	a.mu.Unlock()
	if err != nil {
		a.log.Warn("refusing output", "chunk", ref.String(), "err", err)
		return err
	}
	if out.duplicate {
		a.log.Debug("dropping a copy", "chunk", ref.String())
	}
	return nil
}

// shardComplete reports whether every row of shard s of epoch e was handed
// out and recorded.
func (a *Reader) shardComplete(e, s int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.asm.shardComplete(e, s)
}

// producerBytes is the size of the shards its producer keeps.
func (a *Reader) producerBytes() int64 {
	a.mu.Lock()
	p := a.producer
	a.mu.Unlock()
	return p.heldBytes()
}

// heldBytes is the size of the chunks the reader holds.
func (a *Reader) heldBytes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.asm.heldBytes
}

// wantsMore says whether the reader wants more tasks taken: its prefetch
// has room (or its ranks' epoch has no step ready) and not every epoch
// arrived.
func (a *Reader) wantsMore() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.team != nil {
		return a.teamWants("")
	}
	return !a.asm.allCut() && a.hasRoom()
}

// arrived counts samples received (a member's chunks: the planner
// batches them).
func (a *Reader) arrived(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.SamplesArrived += int64(n)
	a.window.Arrived += int64(n)
	a.m.samplesArrived.Add(float64(n))
}

// apply records an outcome; a.mu must be held.
func (a *Reader) apply(out outcome, now time.Time) {
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
		a.recordFailed(out.failed...)
		for _, f := range out.failed {
			a.failedIn[f.Epoch]++
		}
		if out.omitted > 0 {
			a.failedIn[out.failed[0].Epoch] += int64(out.omitted) - 1
		}
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
func (a *Reader) epochsFinished(epochs []int, now time.Time) {
	for _, e := range epochs {
		a.log.Info("epoch delivered", "epoch", e)
	}
	if len(epochs) > 0 && a.asm.allFinished() && a.finished.IsZero() {
		a.finished = now
	}
}

func (a *Reader) buffered() int { return a.readySamples + a.asm.pending + a.ranks.queued }

// hasRoom says whether to pull; a.mu must be held. Past the prefetch
// bound the agent still pulls while the ranks' epoch has no step ready:
// redelivered chunks of it may come after ready batches of later epochs.
func (a *Reader) hasRoom() bool { return a.readySamples < a.prefetch() || !a.stepReady() }

// prefetch is the bound on ready samples; a.mu must be held.
func (a *Reader) prefetch() int {
	if a.prefetchAuto {
		return max(4*max(a.ranks.world, 1)*a.job.Spec.BatchSize, 256)
	}
	return a.opts.PrefetchSamples
}

// waitFor blocks until cond (called with a.mu held) holds.
func (a *Reader) waitFor(ctx context.Context, cond func() bool) error {
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
func (a *Reader) Next(ctx context.Context) (Batch, error) {
	p, err := a.nextPart(ctx, rankRequest{rank: 0, world: 1})
	p.Batch.materialize()
	return p.Batch, err
}

func (a *Reader) block(now time.Time) {
	a.blocked++
	if a.blocked == 1 {
		a.blockStart = now
		a.window.block(now)
	}
}

func (a *Reader) unblock(now time.Time) {
	a.blocked--
	if a.blocked == 0 {
		d := now.Sub(a.blockStart)
		a.stats.StallTime += d
		a.m.stallSeconds.Add(d.Seconds())
		a.window.unblock(now)
	}
}

// Fail reports a sample the trainer could not use; it shows in Stats.
func (a *Reader) Fail(key, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recordFailed(wire.FailedSample{Key: key, Reason: reason})
}

// MaxFailedSamplesListed bounds Stats.FailedSamples: functions, corrupt
// chunks and trainers may report failures without end over a long job.
const MaxFailedSamplesListed = 1000

// recordFailed lists failures within MaxFailedSamplesListed (each one's
// key and reason cut to wire.MaxReasonBytes) and counts the rest; a.mu
// must be held.
func (a *Reader) recordFailed(fs ...wire.FailedSample) {
	a.m.failedSamples.Add(float64(len(fs)))
	room := max(MaxFailedSamplesListed-len(a.stats.FailedSamples), 0)
	for _, f := range fs[:min(room, len(fs))] {
		f.Key, f.Reason = cutText(f.Key), cutText(f.Reason)
		a.stats.FailedSamples = append(a.stats.FailedSamples, f)
	}
	a.stats.FailedSamplesOmitted += int64(len(fs) - min(room, len(fs)))
}

func cutText(s string) string {
	if len(s) > wire.MaxReasonBytes {
		return s[:wire.MaxReasonBytes] + "..."
	}
	return s
}

// Stats returns a snapshot of the agent's progress.
func (a *Reader) Stats() Stats {
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

// demand closes the reader's demand window at now: the signal the agent
// publishes for it.
func (a *Reader) demand(now time.Time, done bool) wire.Demand {
	gpu := a.gpu.take()
	a.mu.Lock()
	a.window.Buffered = a.buffered()
	d := a.closeWindow(now, gpu)
	a.mu.Unlock()
	d.Job = a.job.Spec.ID
	d.Reader = a.reader
	d.Done = done
	a.m.stallFraction.Set(d.StallFraction)
	return d
}
