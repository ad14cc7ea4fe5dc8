package traineragent

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/demand"
	"github.com/sluice-project/sluice/wire"
)

// readerState is a reader's bookkeeping: the assembler (the position and
// the chunks held), the ready batches, the rank layer (stepper), the
// team's holders and the plan of the rest of a cut epoch, the trainer's
// stall window and the counters Stats reports. It has no lock and does no
// I/O, like dispatch's state: the Reader, its shell, holds its lock around
// every call and does the NATS, KV and HTTP work. The state says what the
// shell must do through values: changed (waiters must look again; the
// shell wakes them), events (log lines, written once the lock is
// released), and the counters of stats (the shell's metrics follow them:
// Reader.meter). Times come in as arguments.
type readerState struct {
	job wire.Job
	asm *assembly.Assembler
	// ready are the batches ready for a step, per epoch, in order;
	// readySamples their samples.
	ready        map[int][]assembly.ReadyBatch
	readySamples int
	ranks        stepper
	// steps forms the ranks' steps: one agent's (soloSteps) or a team's
	// (teamSteps, which holds the team's holders and members).
	steps stepPolicy
	// rest is the plan of the rest of a cut epoch (a team's: stepplan.StepRest).
	rest *restPlan
	// gens is the book of the generations of ranks: which state the
	// current one resumed from, and which of its ranks resumed.
	gens generations
	// prefetch bounds the ready samples; prefetchAuto scales it with the
	// world size.
	prefetchSamples int
	prefetchAuto    bool
	loaded          bool // the recorded position was loaded
	resuming        bool // a resume is rewinding the position: no step is formed
	closing         bool // the agent is stopping: no more batches
	runEnded        bool
	runErr          error
	blocked         int // callers waiting for a part
	blockStart      time.Time
	window          demand.StallWindow
	book            demand.StepBook // the ranks' step reports
	stats           Stats
	// failedIn counts, per epoch, the samples functions could not
	// preprocess or that were lost with their shard: an epoch's last
	// step tells the trainer (rankPart.EpochFailed).
	failedIn                      map[int]int64
	created, firstBatch, finished time.Time

	changed bool
	events  []stateEvent
}

// stateEvent is a log line the state asks its shell to write.
type stateEvent struct {
	level slog.Level
	msg   string
	args  []any
}

// newReaderState is the state of a reader of job at now, before its
// position is loaded.
func newReaderState(job wire.Job, opts Options, now time.Time) *readerState {
	auto := opts.PrefetchSamples == 0
	if auto {
		opts.PrefetchSamples = max(4*max(opts.WorldSize, 1)*job.Spec.BatchSize, 256)
	}
	s := &readerState{
		job: job, asm: assembly.NewAssembler(job), ready: map[int][]assembly.ReadyBatch{}, failedIn: map[int]int64{},
		steps: soloSteps{}, prefetchSamples: opts.PrefetchSamples, prefetchAuto: auto,
		window: demand.StallWindow{Start: now, Capacity: opts.PrefetchSamples}, created: now,
	}
	if opts.WorldSize > 0 {
		s.ranks.setWorld(opts.WorldSize)
	}
	if opts.DropLast {
		s.ranks.dropLast, s.ranks.dropFixed = true, true
	}
	return s
}

// note queues a log line for the shell.
func (s *readerState) note(level slog.Level, msg string, args ...any) {
	s.events = append(s.events, stateEvent{level, msg, args})
}

// takeEvents returns the log lines queued and forgets them.
func (s *readerState) takeEvents() []stateEvent {
	ev := s.events
	s.events = nil
	return ev
}

// submitted identifies the job's submission in its position.
func (s *readerState) submitted() string {
	if s.job.Submitted.IsZero() {
		return ""
	}
	return s.job.Submitted.UTC().Format(time.RFC3339Nano)
}

// load restores the recorded position p (nil: none) at now.
func (s *readerState) load(p *assembly.Position, now time.Time) error {
	if p != nil {
		if err := s.asm.Restore(*p); err != nil {
			return err
		}
	}
	s.epochsFinished(s.asm.Start(), now)
	s.loaded = true
	s.changed = true
	return nil
}

// end marks the reader stopped (err nil: every rank got every step).
func (s *readerState) end(err error) {
	s.closing = true
	s.runEnded, s.runErr = true, err
	s.changed = true
}

// intake applies a shard's output (apply, which changes the assembler) at
// now, unless the reader lags (shedding) and does not keep the shard.
func (s *readerState) intake(ref wire.ChunkRef, shedding bool, now time.Time, apply func() (assembly.Outcome, error)) (assembly.Outcome, error) {
	if shedding {
		owed := s.asm.Owes(ref.Epoch, ref.Shard)
		if s.asm.Shed(ref) {
			if !owed {
				s.stats.ShedShards++
				s.note(slog.LevelDebug, "lagging: not keeping a shard, owed", "epoch", ref.Epoch, "shard", ref.Shard)
			}
			return assembly.Outcome{}, nil
		}
	}
	out, err := apply()
	if err == nil {
		s.apply(out, now)
	}
	return out, err
}

// apply records an outcome of the assembler.
func (s *readerState) apply(out assembly.Outcome, now time.Time) {
	if out.Duplicate {
		s.stats.DuplicateChunks++
	}
	if out.Arrived > 0 {
		s.arrived(out.Arrived)
	}
	if len(out.Failed) > 0 {
		s.recordFailed(out.Failed...)
		for _, f := range out.Failed {
			s.failedIn[f.Epoch]++
		}
		if out.Omitted > 0 {
			s.failedIn[out.Failed[0].Epoch] += int64(out.Omitted) - 1
		}
	}
	for _, b := range out.Batches {
		s.ready[b.Epoch] = append(s.ready[b.Epoch], b)
		s.readySamples += len(b.Keys)
	}
	for _, e := range out.Cut {
		s.note(slog.LevelInfo, "every chunk of the epoch arrived", "epoch", e)
	}
	s.epochsFinished(out.Finished, now)
	s.changed = true
}

// arrived counts samples received (a member's chunks: the planner
// batches them).
func (s *readerState) arrived(n int) {
	s.stats.SamplesArrived += int64(n)
	s.window.Arrived += int64(n)
}

// epochsFinished notes epochs whose every sample was handed out.
func (s *readerState) epochsFinished(epochs []int, now time.Time) {
	for _, e := range epochs {
		s.note(slog.LevelInfo, "epoch delivered", "epoch", e)
	}
	if len(epochs) > 0 && s.asm.AllFinished() && s.finished.IsZero() {
		s.finished = now
	}
}

// buffered are the samples held: ready, in partial batches, and in parts
// the ranks have not taken.
func (s *readerState) buffered() int { return s.readySamples + s.asm.Pending + s.ranks.queued }

// prefetch is the bound on ready samples.
func (s *readerState) prefetch() int {
	if s.prefetchAuto {
		return max(4*max(s.ranks.world, 1)*s.job.Spec.BatchSize, 256)
	}
	return s.prefetchSamples
}

// pull says whether the reader wants more tasks taken, and whether it is
// starved: its ranks' next step cannot be formed from what it holds (a
// team's planner: its own ranks' share). Its steps' policy decides. Past
// the prefetch bound a reader still pulls while the ranks' epoch has no
// step ready: redelivered chunks of it may come after ready batches of
// later epochs.
func (s *readerState) pull() (wants, starved bool) {
	wants, starved = s.steps.pull(s)
	// Nothing is handed out any more: let the send end.
	return wants, starved || s.closing
}

// handedOut reports whether every sample of every epoch was handed out.
func (s *readerState) handedOut() bool { return s.asm.AllFinished() }

// done reports whether every sample of every epoch was handed out and
// every rank was told so.
func (s *readerState) done() bool { return s.asm.AllFinished() && s.ranks.allEnded() }

// ranksEnded reports whether each of ranks got its end.
func (s *readerState) ranksEnded(ranks []int) bool {
	for _, r := range ranks {
		if !s.ranks.counts[r].ended {
			return false
		}
	}
	return true
}

// slowestEpoch is the epoch of the last part the slowest of ranks took
// (-1 before its first).
func (s *readerState) slowestEpoch(ranks []int) int {
	past := s.job.Spec.Epochs
	for _, r := range ranks {
		past = min(past, s.ranks.counts[r].epoch)
	}
	return past
}

// rankEnded notes that rank r got its end; it reports whether it is new.
func (s *readerState) rankEnded(r int) bool {
	c := &s.ranks.counts[r]
	if c.ended {
		return false
	}
	c.ended = true
	s.ranks.nEnded++
	s.changed = true
	return true
}

func (s *readerState) block(now time.Time) {
	s.blocked++
	if s.blocked == 1 {
		s.blockStart = now
		s.window.Block(now)
	}
}

func (s *readerState) unblock(now time.Time) {
	s.blocked--
	if s.blocked == 0 {
		s.stats.StallTime += now.Sub(s.blockStart)
		s.window.Unblock(now)
	}
}

// MaxFailedSamplesListed bounds Stats.FailedSamples: functions, corrupt
// chunks and trainers may report failures without end over a long job.
const MaxFailedSamplesListed = 1000

// recordFailed lists failures within MaxFailedSamplesListed (each one's
// key and reason cut to wire.MaxReasonBytes) and counts the rest.
func (s *readerState) recordFailed(fs ...wire.FailedSample) {
	room := max(MaxFailedSamplesListed-len(s.stats.FailedSamples), 0)
	for _, f := range fs[:min(room, len(fs))] {
		f.Key, f.Reason = cutText(f.Key), cutText(f.Reason)
		s.stats.FailedSamples = append(s.stats.FailedSamples, f)
	}
	s.stats.FailedSamplesOmitted += int64(len(fs) - min(room, len(fs)))
}

// failedCount is every failure recorded, listed or not.
func (st Stats) failedCount() int64 { return int64(len(st.FailedSamples)) + st.FailedSamplesOmitted }

func cutText(s string) string {
	if len(s) > wire.MaxReasonBytes {
		return s[:wire.MaxReasonBytes] + "..."
	}
	return s
}

// lost reports the samples of a part the trainer will not get (a row
// whose key another agent holds is named by its chunk and row).
func (s *readerState) lost(p rankPart, err error) {
	s.note(slog.LevelWarn, "a part could not be cut; its samples are reported failed", "samples", len(p.Keys), "err", err)
	names := spanKeys(p.Spans)
	for i, k := range p.Keys {
		if k == "" && i < len(names) {
			k = names[i]
		}
		s.recordFailed(wire.FailedSample{Key: k, Reason: "cutting its part: " + err.Error()})
	}
}

// snapshot is Stats at now.
func (s *readerState) snapshot(now time.Time) Stats {
	st := s.stats
	st.FailedSamples = append([]wire.FailedSample(nil), s.stats.FailedSamples...)
	if s.blocked > 0 {
		st.StallTime += now.Sub(s.blockStart)
	}
	end := now
	if !s.finished.IsZero() {
		end = s.finished
	}
	st.RunTime = end.Sub(s.created)
	if !s.firstBatch.IsZero() {
		st.TimeToFirstBatch = s.firstBatch.Sub(s.created)
	}
	st.Epochs = s.asm.FinishedCount()
	st.BufferedSamples = s.buffered()
	st.WorldSize, st.DropLast = s.ranks.world, s.ranks.dropLast
	for r, c := range s.ranks.counts {
		st.Ranks = append(st.Ranks, RankStats{Rank: r, Batches: c.batches, Samples: c.samples, Epoch: c.epoch, Step: c.step, Ended: c.ended})
	}
	st.Steps = s.book.Totals()
	return st
}

// closeWindow ends the demand window at now with the GPU's mean
// utilisation gpu (negative: none read): it returns the window's demand
// and the step reports of the window, split per rank.
func (s *readerState) closeWindow(now time.Time, gpu float64) (wire.Demand, map[int]demand.StepParts) {
	s.window.Buffered = s.buffered()
	c := s.book.CloseWindow(now.Sub(s.window.Start), gpu)
	return s.window.Roll(now, c, gpu), c.PerRank
}

// forWrite is what a write of the position takes: the assembler's
// version, the position's encoding if it changed since version written or
// force (nil if not), the shards it completes and the epochs it has
// finished. The completed shards are the caller's: unrecorded gives them
// back if the write fails.
func (s *readerState) forWrite(written uint64, force bool) (version uint64, data []byte, completed []assembly.ShardRef, finished int, err error) {
	version = s.asm.Version
	if version != written || force {
		p := s.asm.Snapshot()
		p.Submitted = s.submitted()
		data, err = assembly.EncodePosition(p)
	}
	return version, data, s.asm.TakeCompleted(), s.asm.Finished, err
}

// unrecorded gives back shards forWrite took whose write failed: they are
// reported after the next write.
func (s *readerState) unrecorded(completed []assembly.ShardRef) {
	s.asm.Completed = append(completed, s.asm.Completed...)
}

// replaysOwed are the tasks of the shards the position notes as being
// replayed and not complete: an agent that restarts sends them again.
func (s *readerState) replaysOwed() []wire.ShardTask {
	var out []wire.ShardTask
	for e, ep := range s.asm.Open {
		for sh := range s.asm.Shards {
			if ep.Replayed.Has(sh) && !ep.Complete.Has(sh) {
				out = append(out, s.job.Task(e, sh))
			}
		}
	}
	return out
}

// owedDue notes as replayed the owed shards of the ranks' epoch once no
// step of it is ready, and returns them (the shell writes the position,
// then has them produced again).
func (s *readerState) owedDue() []wire.ShardTask {
	e := s.ranks.epoch
	if e >= s.job.Spec.Epochs || s.stepReady() {
		return nil
	}
	due := s.asm.OwedDue(e)
	if len(due) == 0 {
		return nil
	}
	ep := s.asm.Epoch(e)
	tasks := make([]wire.ShardTask, len(due))
	for i, sh := range due {
		ep.Replayed.Add(sh)
		tasks[i] = s.job.Task(e, sh)
	}
	s.asm.Version++
	s.note(slog.LevelInfo, "asking for the owed shards again", "epoch", e, "shards", len(due))
	return tasks
}

// stopped is the error of a reader whose run ended.
func (s *readerState) stopped() error {
	if s.runErr != nil {
		return fmt.Errorf("%w: %w", ErrStopped, s.runErr)
	}
	return ErrStopped
}
