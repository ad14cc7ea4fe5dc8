package readerstate

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/stepplan"
)

// ErrWorldMismatch means a request's world size, rank or drop_last does
// not fit what the agent's ranks were fixed to (by Options, the first
// request or a resume). GET /v1/batch answers 409.
var ErrWorldMismatch = errors.New("world mismatch")

// RankPart is one rank's part of a global step.
type RankPart struct {
	assembly.Batch
	Step  int  // the global step's index within its epoch
	Last  bool // the epoch's last step
	World int  // the world size it was formed for
	// Position is the JSON of the reader's position once the whole step
	// was handed out: what a trainer's checkpoint taken after this step
	// resumes from.
	Position []byte
	// EpochFailed, on an epoch's last step, counts the samples of the
	// epoch that are not in it: functions could not preprocess them, or
	// their shard failed for good (Stats.FailedSamples lists them).
	EpochFailed int64
	// Spans, when set, are the part's rows as chunk rows (Batch has its
	// keys, no tensors yet): rows another agent of the reader holds, or
	// rows of this agent for a rank another agent serves (team.go).
	Spans []assembly.RowSpan
	// Gen is the team's generation of ranks it was formed for (team.go).
	Gen uint64
}

// rankCount is what one rank took.
type rankCount struct {
	batches, samples int64
	epoch, step      int // of the last part taken; -1 before the first
	ended            bool
}

// Stepper is the rank layer's state: which epoch and step the ranks are
// in, and the parts formed that their ranks have not taken yet (part of
// State).
type Stepper struct {
	World     int // 0 until fixed
	dropLast  bool
	DropFixed bool
	epoch     int // the epoch the ranks are in; epochs are served in order
	step      int // its next global step
	queues    [][]RankPart
	queued    int // samples in queues
	counts    []rankCount
	nEnded    int
	formed    bool // a step was formed (a batch handed out) in this agent's life
}

// setWorld fixes the world size; only while no part is queued.
func (s *Stepper) setWorld(w int) {
	s.World = w
	s.queues = make([][]RankPart, w)
	s.counts = make([]rankCount, w)
	for r := range s.counts {
		s.counts[r].epoch, s.counts[r].step = -1, -1
	}
	s.nEnded = 0
}

func (s *Stepper) allEnded() bool { return s.World > 0 && s.nEnded == s.World }

// MaxWorldSize bounds the ranks of one reader: the agent keeps a queue
// and counters per rank, so a world size from a request is memory it
// allocates (2,000,000,000 once took 48 GB). 65,536 ranks is beyond the
// largest data-parallel jobs run today.
const MaxWorldSize = 1 << 16

// RankRequest is a rank's request for its next part. World 0 takes the
// agent's world size (1 if none is fixed yet); a nil dropLast takes the
// agent's setting.
type RankRequest struct {
	Rank, World int
	DropLast    *bool
	// Agent is the member agent asking for its rank (team.go); "" for a
	// rank of this agent.
	Agent string
	// Superseded, if set, says (the reader's lock held) that the request
	// may no longer take a part: a member's request from before a resume
	// or a re-join, whose requester may be gone (traineragent's teamserve.go).
	Superseded func() bool
}

// Join checks req against the ranks' world, fixing what is not fixed yet.
func (st *State) Join(req RankRequest) error {
	s := &st.Ranks
	w := req.World
	if w == 0 {
		w = max(s.World, 1)
	}
	switch {
	case w < 1 || w > MaxWorldSize:
		return fmt.Errorf("%w: world size %d: want 1..%d", ErrWorldMismatch, w, MaxWorldSize)
	case s.World == 0:
		s.setWorld(w)
	case w != s.World:
		return fmt.Errorf("%w: world size %d, but the agent serves %d ranks (resume from a checkpoint to change it)", ErrWorldMismatch, w, s.World)
	}
	if req.Rank < 0 || req.Rank >= w {
		return fmt.Errorf("%w: rank %d: want 0..%d", ErrWorldMismatch, req.Rank, w-1)
	}
	if err := st.Steps.serves(req.Rank, req.Agent); err != nil {
		return err
	}
	switch {
	case req.DropLast == nil:
	case !s.DropFixed:
		s.dropLast = *req.DropLast
	case *req.DropLast != s.dropLast:
		return fmt.Errorf("%w: drop_last %t, but the agent's ranks have %t", ErrWorldMismatch, *req.DropLast, s.dropLast)
	}
	s.DropFixed = true
	return nil
}

// Take pops rank's next part at now, forming the next step if the rank
// has none queued, for a request that joined a world of world ranks
// (superseded: it may no longer take a part). wait says there is none
// yet: the caller waits for a change and asks again.
func (st *State) Take(rank, world int, superseded bool, now time.Time) (p RankPart, wait bool, err error) {
	s := &st.Ranks
	for {
		switch {
		case superseded:
			return RankPart{}, false, ErrSuperseded
		case s.World != world:
			// A resume changed the world size while the rank waited.
			return RankPart{}, false, fmt.Errorf("%w: world size %d, but a resume set %d", ErrWorldMismatch, world, s.World)
		case st.Resuming:
			return RankPart{}, true, nil // the position is being rewound
		case st.Gens.mustResume(rank) != nil:
			return RankPart{}, false, st.Gens.mustResume(rank)
		case len(s.queues[rank]) > 0:
			return st.pop(rank, now), false, nil
		case s.epoch >= st.job.Spec.Epochs:
			st.RankEnded(rank)
			return RankPart{}, false, io.EOF
		case st.RunEnded || st.closing:
			return RankPart{}, false, st.Stopped()
		case st.Steps.form(st, now):
			continue
		}
		return RankPart{}, true, nil
	}
}

// supply is what the ranks' current epoch e has ready.
func (st *State) supply(e int) stepplan.EpochSupply {
	var sup stepplan.EpochSupply
	for _, b := range st.ready[e] {
		sup.Ready = append(sup.Ready, len(b.Keys))
	}
	if e < st.Asm.Finished {
		sup.Cut = true
	} else if ep := st.Asm.Open[e]; ep != nil {
		sup.Pending, sup.Cut = ep.PendingRows(), ep.Cut
	}
	return sup
}

// stepReady reports whether the ranks' current epoch has a step (or its
// end) ready. While it has not, the agent pulls past its prefetch bound:
// later epochs' batches must not starve the current.
func (st *State) stepReady() bool {
	s := &st.Ranks
	if s.epoch >= st.job.Spec.Epochs {
		return true
	}
	return stepplan.Step(st.supply(s.epoch), max(s.World, 1), st.job.Spec.BatchSize, s.dropLast).Action != stepplan.StepWait
}

// StepPolicy forms a reader's global steps from what it holds: one agent
// holds every row (soloSteps: a lone agent), or each agent of a team
// holds some (teamSteps: the team's planner). The two agree on the steps'
// sizes (TestPlanRestOneHolderIsPlanStep) but not on the mechanics: a lone
// agent's world is fixed by its first request and changes with a resume,
// its epoch's tail shares the batches' memory, and it pulls by its
// prefetch alone; a team's holders are fixed, and each holder's share
// of the prefetch decides whether it pulls.
type StepPolicy interface {
	// form forms the ranks' next global step and queues its parts,
	// moving through finished epochs and dropped tails; it reports
	// whether anything changed. The world must be fixed.
	form(s *State, now time.Time) bool
	// Pull says whether this agent should take more tasks (wants), and
	// whether its ranks wait for rows it lacks (starved: buffer.go).
	Pull(s *State) (wants, starved bool)
	// serves checks that agent ("": this one) serves rank r.
	serves(r int, agent string) error
}

// soloSteps is the step policy of a lone agent (stepplan.Step).
type soloSteps struct{}

// Pull: wanted while the prefetch has room, or the ranks' epoch has no
// step ready (then starved too), and not every epoch arrived.
func (soloSteps) Pull(st *State) (wants, starved bool) {
	ready := st.stepReady()
	return !st.Asm.AllCut() && (st.ReadySamples < st.prefetch() || !ready), !ready
}

func (soloSteps) serves(r int, agent string) error {
	if agent != "" {
		return fmt.Errorf("%w: rank %d is served by this agent, not %s", ErrWorldMismatch, r, agentName(agent))
	}
	return nil
}

func (soloSteps) form(st *State, now time.Time) bool {
	s := &st.Ranks
	changed := false
	for s.epoch < st.job.Spec.Epochs {
		e := s.epoch
		plan := stepplan.Step(st.supply(e), s.World, st.job.Spec.BatchSize, s.dropLast)
		switch plan.Action {
		case stepplan.StepWait:
			return changed
		case stepplan.StepEpochDone:
			s.epoch, s.step = e+1, 0
			changed = true
			continue
		case stepplan.StepDrop:
			st.dropTail(e, now)
			changed = true
			continue
		}
		batches := st.takeReady(e, plan.Batches, now)
		var parts []assembly.Batch
		if plan.Action == stepplan.StepFull {
			for _, b := range batches {
				parts = append(parts, b.Batch)
			}
		} else {
			parts = SplitRows(e, batches, plan.Sizes)
		}
		if plan.Last && len(st.ready[e]) > 0 {
			// The rest of a cut epoch after its last step is a dropped tail.
			st.dropTail(e, now)
		}
		rp := make([]RankPart, len(parts))
		for r, b := range parts {
			rp[r].Batch = b
		}
		st.queueStep(rp, plan.Last)
		return true
	}
	return changed
}

// queueStep queues the parts of the ranks' next step, one per rank (each
// carrying the position once the whole step is handed out), and moves the
// ranks on.
func (st *State) queueStep(parts []RankPart, last bool) {
	s := &st.Ranks
	idx, e := s.step, s.epoch
	if last {
		s.epoch, s.step = s.epoch+1, 0
	} else {
		s.step++
	}
	pos := st.Asm.Snapshot()
	pos.Submitted = st.Submitted()
	data, err := assembly.EncodePosition(pos)
	if err != nil {
		data = nil // cannot happen: the position is plain data
	}
	for r, p := range parts {
		p.Step, p.Last, p.World, p.Position = idx, last, s.World, data
		if last {
			p.EpochFailed = st.failedIn[e]
		}
		s.queues[r] = append(s.queues[r], p)
		s.queued += len(p.Keys)
	}
	s.formed = true
	st.Changed = true
}

// takeReady removes the first n ready batches of epoch e and records them
// as handed out.
func (st *State) takeReady(e, n int, now time.Time) []assembly.ReadyBatch {
	batches := st.ready[e][:n:n]
	st.ready[e] = st.ready[e][n:]
	if len(st.ready[e]) == 0 {
		delete(st.ready, e)
	}
	for _, b := range batches {
		st.ReadySamples -= len(b.Keys)
		st.epochsFinished(st.Asm.HandOut(b), now)
	}
	return batches
}

// dropTail hands out the rest of a cut epoch e to no rank (drop_last) and
// counts its samples as dropped.
func (st *State) dropTail(e int, now time.Time) {
	n := 0
	for _, b := range st.takeReady(e, len(st.ready[e]), now) {
		n += len(b.Keys)
	}
	st.Stats.DroppedSamples += int64(n)
	st.note(slog.LevelInfo, "dropping the epoch's last, partial step (drop_last)", "epoch", e, "samples", n)
}

// SplitRows stacks the rows of batches (all of epoch e) into one part per
// entry of sizes, in order. A part is runs of rows in the chunks they came
// in, as a whole batch is: nothing is copied (copying a step of
// ImageNet-size rows was the agent's largest cost while serving, page
// faults included).
func SplitRows(e int, batches []assembly.ReadyBatch, sizes []int) []assembly.Batch {
	var keys []string
	var sources []int
	for _, b := range batches {
		keys = append(keys, b.Keys...)
		sources = append(sources, b.Sources...)
	}
	// Each tensor's data as one list of runs over all the batches, and the
	// size of one of its rows (all batches share the job's schema).
	var tensors []safetensors.Tensor
	var runs [][]assembly.Run
	var rowBytes []int
	for i, b := range batches {
		for j, t := range b.Tensors {
			if i == 0 {
				tensors = append(tensors, safetensors.Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape[1:]})
				runs = append(runs, nil)
				rowBytes = append(rowBytes, 0)
			}
			if rowBytes[j] == 0 && len(b.Keys) > 0 {
				rowBytes[j] = b.DataLen(j) / len(b.Keys)
			}
			runs[j] = append(runs[j], b.Data(j)...)
		}
	}
	parts := make([]assembly.Batch, len(sizes))
	lo := 0
	for r, n := range sizes {
		p := assembly.Batch{Epoch: e, Keys: keys[lo : lo+n : lo+n], Runs: make([][]assembly.Run, len(tensors))}
		if len(sources) == len(keys) {
			p.Sources = sources[lo : lo+n : lo+n]
		}
		for j, t := range tensors {
			p.Tensors = append(p.Tensors, safetensors.Tensor{
				Name: t.Name, DType: t.DType, Shape: append([]int{n}, t.Shape...)})
			p.Runs[j] = CutRuns(runs[j], lo*rowBytes[j], (lo+n)*rowBytes[j])
		}
		parts[r] = p
		lo += n
	}
	return parts
}

// CutRuns is bytes [from, to) of the concatenation of runs as the trainer
// gets them, as runs aliasing them. The cuts fall between rows, so an
// expanded run is cut where its own bytes' rows end.
func CutRuns(runs []assembly.Run, from, to int) []assembly.Run {
	var out []assembly.Run
	off := 0
	for _, r := range runs {
		n := r.Len()
		lo, hi := max(from-off, 0), min(to-off, n)
		if lo < hi {
			f := 1
			if r.Expand != nil {
				f = r.Expand.Size()
			}
			out = append(out, assembly.Run{Data: r.Data[lo/f : hi/f : hi/f], Expand: r.Expand})
		}
		off += n
		if off >= to {
			break
		}
	}
	return out
}

// pop hands rank r its oldest queued part.
func (st *State) pop(r int, now time.Time) RankPart {
	s := &st.Ranks
	p := s.queues[r][0]
	s.queues[r][0] = RankPart{}
	s.queues[r] = s.queues[r][1:]
	s.queued -= len(p.Keys)
	p.Gen = st.Gens.N
	st.Delivered(r, p, now)
	return p
}

// Delivered counts part p as handed to rank r.
func (st *State) Delivered(r int, p RankPart, now time.Time) {
	s := &st.Ranks
	n := len(p.Keys)
	c := &s.counts[r]
	c.batches++
	c.samples += int64(n)
	c.epoch, c.step = p.Epoch, p.Step
	st.Stats.SamplesDelivered += int64(n)
	st.Stats.BatchesDelivered++
	st.window.Consumed += int64(n)
	st.window.Done = st.Stats.SamplesDelivered
	if st.firstBatch.IsZero() {
		st.firstBatch = now
	}
	st.Changed = true
}

// ErrSuperseded is a member's part request from before a resume or a
// re-join: it may take no part.
var ErrSuperseded = errors.New("a part request of an earlier generation of ranks or session")
