package readerstate

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/demand"
	"github.com/sluice-project/sluice/wire"
)

// State is a reader's bookkeeping: the assembler (the position and
// the chunks held), the ready batches, the rank layer (stepper), the
// team's holders and the plan of the rest of a cut epoch, the trainer's
// stall window and the counters Stats reports. It has no lock and does no
// I/O, like dispatch's state: the Reader, its shell, holds its lock around
// every call and does the NATS, KV and HTTP work. The state says what the
// shell must do through values: changed (waiters must look again; the
// shell wakes them), events (log lines, written once the lock is
// released), and the counters of stats (the shell's metrics follow them:
// Reader.meter). Times come in as arguments.
type State struct {
	job wire.Job
	Asm *assembly.Assembler
	// ready are the batches ready for a step, per epoch, in order;
	// readySamples their samples.
	ready        map[int][]assembly.ReadyBatch
	ReadySamples int
	Ranks        Stepper
	// Steps forms the ranks' steps: one agent's (soloSteps) or a team's
	// (teamSteps, which holds the team's holders and members).
	Steps StepPolicy
	// rest is the plan of the rest of a cut epoch (a team's: stepplan.StepRest).
	rest *restPlan
	// Gens is the book of the generations of ranks: which state the
	// current one resumed from, and which of its ranks resumed.
	Gens Generations
	// prefetch bounds the ready samples; prefetchAuto scales it with the
	// world size.
	PrefetchSamples int
	prefetchAuto    bool
	Loaded          bool // the recorded position was loaded
	Resuming        bool // a resume is rewinding the position: no step is formed
	closing         bool // the agent is stopping: no more batches
	RunEnded        bool
	runErr          error
	Blocked         int // callers waiting for a part
	blockStart      time.Time
	window          demand.StallWindow
	Book            demand.StepBook // the ranks' step reports
	Stats           Stats
	// failedIn counts, per epoch, the samples functions could not
	// preprocess or that were lost with their shard: an epoch's last
	// step tells the trainer (RankPart.EpochFailed).
	failedIn                      map[int]int64
	created, firstBatch, finished time.Time

	Changed bool
	events  []Event
}

// Event is a log line the state asks its shell to write.
type Event struct {
	Level slog.Level
	Msg   string
	Args  []any
}

// Config is what a reader's options (Options) fix of its state: the
// bound on ready samples (0: scaled with the world size), and the world
// size and drop_last when the agent fixes them before the first request.
type Config struct {
	PrefetchSamples, WorldSize int
	DropLast                   bool
}

// NewReaderState is the state of a reader of job at now, before its
// position is loaded.
func NewReaderState(job wire.Job, c Config, now time.Time) *State {
	auto := c.PrefetchSamples == 0
	if auto {
		c.PrefetchSamples = max(4*max(c.WorldSize, 1)*job.Spec.BatchSize, 256)
	}
	s := &State{
		job: job, Asm: assembly.NewAssembler(job), ready: map[int][]assembly.ReadyBatch{}, failedIn: map[int]int64{},
		Steps: soloSteps{}, PrefetchSamples: c.PrefetchSamples, prefetchAuto: auto,
		window: demand.StallWindow{Start: now, Capacity: c.PrefetchSamples}, created: now,
	}
	if c.WorldSize > 0 {
		s.Ranks.setWorld(c.WorldSize)
	}
	if c.DropLast {
		s.Ranks.dropLast, s.Ranks.DropFixed = true, true
	}
	return s
}

// note queues a log line for the shell.
func (s *State) note(level slog.Level, msg string, args ...any) {
	s.events = append(s.events, Event{level, msg, args})
}

// TakeEvents returns the log lines queued and forgets them.
func (s *State) TakeEvents() []Event {
	ev := s.events
	s.events = nil
	return ev
}

// Submitted identifies the job's submission in its position.
func (s *State) Submitted() string {
	if s.job.Submitted.IsZero() {
		return ""
	}
	return s.job.Submitted.UTC().Format(time.RFC3339Nano)
}

// Load restores the recorded position p (nil: none) at now.
func (s *State) Load(p *assembly.Position, now time.Time) error {
	if p != nil {
		if err := s.Asm.Restore(*p); err != nil {
			return err
		}
	}
	s.epochsFinished(s.Asm.Start(), now)
	s.Loaded = true
	s.Changed = true
	return nil
}

// End marks the reader stopped (err nil: every rank got every step).
func (s *State) End(err error) {
	s.closing = true
	s.RunEnded, s.runErr = true, err
	s.Changed = true
}

// Intake applies a shard's output (apply, which changes the assembler) at
// now, unless the reader lags (shedding) and does not keep the shard.
func (s *State) Intake(ref wire.ChunkRef, shedding bool, now time.Time, apply func() (assembly.Outcome, error)) (assembly.Outcome, error) {
	if shedding {
		owed := s.Asm.Owes(ref.Epoch, ref.Shard)
		if s.Asm.Shed(ref) {
			if !owed {
				s.Stats.ShedShards++
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
func (s *State) apply(out assembly.Outcome, now time.Time) {
	if out.Duplicate {
		s.Stats.DuplicateChunks++
	}
	if out.Arrived > 0 {
		s.Arrived(out.Arrived)
	}
	if len(out.Failed) > 0 {
		s.RecordFailed(out.Failed...)
		for _, f := range out.Failed {
			s.failedIn[f.Epoch]++
		}
		if out.Omitted > 0 {
			s.failedIn[out.Failed[0].Epoch] += int64(out.Omitted) - 1
		}
	}
	for _, b := range out.Batches {
		s.ready[b.Epoch] = append(s.ready[b.Epoch], b)
		s.ReadySamples += len(b.Keys)
	}
	for _, e := range out.Cut {
		s.note(slog.LevelInfo, "every chunk of the epoch arrived", "epoch", e)
	}
	s.epochsFinished(out.Finished, now)
	s.Changed = true
}

// Arrived counts samples received (a member's chunks: the planner
// batches them).
func (s *State) Arrived(n int) {
	s.Stats.SamplesArrived += int64(n)
	s.window.Arrived += int64(n)
}

// epochsFinished notes epochs whose every sample was handed out.
func (s *State) epochsFinished(epochs []int, now time.Time) {
	for _, e := range epochs {
		s.note(slog.LevelInfo, "epoch delivered", "epoch", e)
	}
	if len(epochs) > 0 && s.Asm.AllFinished() && s.finished.IsZero() {
		s.finished = now
	}
}

// Buffered are the samples held: ready, in partial batches, and in parts
// the ranks have not taken.
func (s *State) Buffered() int { return s.ReadySamples + s.Asm.Pending + s.Ranks.queued }

// prefetch is the bound on ready samples.
func (s *State) prefetch() int {
	if s.prefetchAuto {
		return max(4*max(s.Ranks.World, 1)*s.job.Spec.BatchSize, 256)
	}
	return s.PrefetchSamples
}

// Pull says whether the reader wants more tasks taken, and whether it is
// starved: its ranks' next step cannot be formed from what it holds (a
// team's planner: its own ranks' share). Its steps' policy decides. Past
// the prefetch bound a reader still pulls while the ranks' epoch has no
// step ready: redelivered chunks of it may come after ready batches of
// later epochs.
func (s *State) Pull() (wants, starved bool) {
	wants, starved = s.Steps.Pull(s)
	// Nothing is handed out any more: let the send end.
	return wants, starved || s.closing
}

// HandedOut reports whether every sample of every epoch was handed out.
func (s *State) HandedOut() bool { return s.Asm.AllFinished() }

// Done reports whether every sample of every epoch was handed out and
// every rank was told so.
func (s *State) Done() bool { return s.Asm.AllFinished() && s.Ranks.allEnded() }

// RanksEnded reports whether each of ranks got its end.
func (s *State) RanksEnded(ranks []int) bool {
	for _, r := range ranks {
		if !s.Ranks.counts[r].ended {
			return false
		}
	}
	return true
}

// SlowestEpoch is the epoch of the last part the slowest of ranks took
// (-1 before its first).
func (s *State) SlowestEpoch(ranks []int) int {
	past := s.job.Spec.Epochs
	for _, r := range ranks {
		past = min(past, s.Ranks.counts[r].epoch)
	}
	return past
}

// RankEnded notes that rank r got its end; it reports whether it is new.
func (s *State) RankEnded(r int) bool {
	c := &s.Ranks.counts[r]
	if c.ended {
		return false
	}
	c.ended = true
	s.Ranks.nEnded++
	s.Changed = true
	return true
}

// Block notes a caller waiting for a part at now: the stall clock runs
// while any waits.
func (s *State) Block(now time.Time) {
	s.Blocked++
	if s.Blocked == 1 {
		s.blockStart = now
		s.window.Block(now)
	}
}

// Unblock notes a caller that waited done at now.
func (s *State) Unblock(now time.Time) {
	s.Blocked--
	if s.Blocked == 0 {
		s.Stats.StallTime += now.Sub(s.blockStart)
		s.window.Unblock(now)
	}
}

// MaxFailedSamplesListed bounds Stats.FailedSamples: functions, corrupt
// chunks and trainers may report failures without end over a long job.
const MaxFailedSamplesListed = 1000

// RecordFailed lists failures within MaxFailedSamplesListed (each one's
// key and reason cut to wire.MaxReasonBytes) and counts the rest.
func (s *State) RecordFailed(fs ...wire.FailedSample) {
	room := max(MaxFailedSamplesListed-len(s.Stats.FailedSamples), 0)
	for _, f := range fs[:min(room, len(fs))] {
		f.Key, f.Reason = CutText(f.Key), CutText(f.Reason)
		s.Stats.FailedSamples = append(s.Stats.FailedSamples, f)
	}
	s.Stats.FailedSamplesOmitted += int64(len(fs) - min(room, len(fs)))
}

// FailedCount is every failure recorded, listed or not.
func (st Stats) FailedCount() int64 { return int64(len(st.FailedSamples)) + st.FailedSamplesOmitted }

// CutText cuts s to wire.MaxReasonBytes: a key or reason from outside
// is bounded before it is kept or sent.
func CutText(s string) string {
	if len(s) > wire.MaxReasonBytes {
		return s[:wire.MaxReasonBytes] + "..."
	}
	return s
}

// Lost reports the samples of a part the trainer will not get (a row
// whose key another agent holds is named by its chunk and row).
func (s *State) Lost(p RankPart, err error) {
	s.note(slog.LevelWarn, "a part could not be cut; its samples are reported failed", "samples", len(p.Keys), "err", err)
	names := spanKeys(p.Spans)
	for i, k := range p.Keys {
		if k == "" && i < len(names) {
			k = names[i]
		}
		s.RecordFailed(wire.FailedSample{Key: k, Reason: "cutting its part: " + err.Error()})
	}
}

// Snapshot is Stats at now.
func (s *State) Snapshot(now time.Time) Stats {
	st := s.Stats
	st.FailedSamples = append([]wire.FailedSample(nil), s.Stats.FailedSamples...)
	if s.Blocked > 0 {
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
	st.Epochs = s.Asm.FinishedCount()
	st.BufferedSamples = s.Buffered()
	st.WorldSize, st.DropLast = s.Ranks.World, s.Ranks.dropLast
	for r, c := range s.Ranks.counts {
		st.Ranks = append(st.Ranks, RankStats{Rank: r, Batches: c.batches, Samples: c.samples, Epoch: c.epoch, Step: c.step, Ended: c.ended})
	}
	st.Steps = s.Book.Totals()
	return st
}

// CloseWindow ends the demand window at now with the GPU's mean
// utilisation gpu (negative: none read): it returns the window's demand
// and the step reports of the window, split per rank.
func (s *State) CloseWindow(now time.Time, gpu float64) (wire.Demand, map[int]demand.StepParts) {
	s.window.Buffered = s.Buffered()
	c := s.Book.CloseWindow(now.Sub(s.window.Start), gpu)
	return s.window.Roll(now, c, gpu), c.PerRank
}

// ForWrite is what a write of the position takes: the assembler's
// version, the position's encoding if it changed since version written or
// force (nil if not), the shards it completes and the epochs it has
// finished. The completed shards are the caller's: unrecorded gives them
// back if the write fails.
func (s *State) ForWrite(written uint64, force bool) (version uint64, data []byte, completed []assembly.ShardRef, finished int, err error) {
	version = s.Asm.Version
	if version != written || force {
		p := s.Asm.Snapshot()
		p.Submitted = s.Submitted()
		data, err = assembly.EncodePosition(p)
	}
	return version, data, s.Asm.TakeCompleted(), s.Asm.Finished, err
}

// Unrecorded gives back shards forWrite took whose write failed: they are
// reported after the next write.
func (s *State) Unrecorded(completed []assembly.ShardRef) {
	s.Asm.Completed = append(completed, s.Asm.Completed...)
}

// ReplaysOwed are the tasks of the shards the position notes as being
// replayed and not complete: an agent that restarts sends them again.
func (s *State) ReplaysOwed() []wire.ShardTask {
	var out []wire.ShardTask
	for e, ep := range s.Asm.Open {
		for sh := range s.Asm.Shards {
			if ep.Replayed.Has(sh) && !ep.Complete.Has(sh) {
				out = append(out, s.job.Task(e, sh))
			}
		}
	}
	return out
}

// OwedDue notes as replayed the owed shards of the ranks' epoch once no
// step of it is ready, and returns them (the shell writes the position,
// then has them produced again).
func (s *State) OwedDue() []wire.ShardTask {
	e := s.Ranks.epoch
	if e >= s.job.Spec.Epochs || s.stepReady() {
		return nil
	}
	due := s.Asm.OwedDue(e)
	if len(due) == 0 {
		return nil
	}
	ep := s.Asm.Epoch(e)
	tasks := make([]wire.ShardTask, len(due))
	for i, sh := range due {
		ep.Replayed.Add(sh)
		tasks[i] = s.job.Task(e, sh)
	}
	s.Asm.Version++
	s.note(slog.LevelInfo, "asking for the owed shards again", "epoch", e, "shards", len(due))
	return tasks
}

// Stopped is the error of a reader whose run ended.
func (s *State) Stopped() error {
	if s.runErr != nil {
		return fmt.Errorf("%w: %w", ErrStopped, s.runErr)
	}
	return ErrStopped
}

// spanKeys names the rows of spans whose keys are not known here.
func spanKeys(spans []assembly.RowSpan) []string {
	var keys []string
	for _, sp := range spans {
		for i := range sp.N {
			keys = append(keys, fmt.Sprintf("%s row %d", sp.Ref, sp.Lo+i))
		}
	}
	return keys
}
