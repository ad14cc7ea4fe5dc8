package traineragent

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

// rankPart is one rank's part of a global step.
type rankPart struct {
	Batch
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
	// gen is the team's generation of ranks it was formed for (team.go).
	gen uint64
}

// rankCount is what one rank took.
type rankCount struct {
	batches, samples int64
	epoch, step      int // of the last part taken; -1 before the first
	ended            bool
}

// stepper is the rank layer's state: which epoch and step the ranks are
// in, and the parts formed that their ranks have not taken yet (part of
// readerState).
type stepper struct {
	world     int // 0 until fixed
	dropLast  bool
	dropFixed bool
	epoch     int // the epoch the ranks are in; epochs are served in order
	step      int // its next global step
	queues    [][]rankPart
	queued    int // samples in queues
	counts    []rankCount
	nEnded    int
	formed    bool // a step was formed (a batch handed out) in this agent's life
}

// setWorld fixes the world size; only while no part is queued.
func (s *stepper) setWorld(w int) {
	s.world = w
	s.queues = make([][]rankPart, w)
	s.counts = make([]rankCount, w)
	for r := range s.counts {
		s.counts[r].epoch, s.counts[r].step = -1, -1
	}
	s.nEnded = 0
}

func (s *stepper) allEnded() bool { return s.world > 0 && s.nEnded == s.world }

// MaxWorldSize bounds the ranks of one reader: the agent keeps a queue
// and counters per rank, so a world size from a request is memory it
// allocates (2,000,000,000 once took 48 GB). 65,536 ranks is beyond the
// largest data-parallel jobs run today.
const MaxWorldSize = 1 << 16

// rankRequest is a rank's request for its next part. World 0 takes the
// agent's world size (1 if none is fixed yet); a nil dropLast takes the
// agent's setting.
type rankRequest struct {
	rank, world int
	dropLast    *bool
	// agent is the member agent asking for its rank (team.go); "" for a
	// rank of this agent.
	agent string
	// superseded, if set, says (the reader's lock held) that the request
	// may no longer take a part: a member's request from before a resume
	// or a re-join, whose requester may be gone (teamserve.go).
	superseded func() bool
}

// join checks req against the ranks' world, fixing what is not fixed yet.
func (st *readerState) join(req rankRequest) error {
	s := &st.ranks
	w := req.world
	if w == 0 {
		w = max(s.world, 1)
	}
	switch {
	case w < 1 || w > MaxWorldSize:
		return fmt.Errorf("%w: world size %d: want 1..%d", ErrWorldMismatch, w, MaxWorldSize)
	case s.world == 0:
		s.setWorld(w)
	case w != s.world:
		return fmt.Errorf("%w: world size %d, but the agent serves %d ranks (resume from a checkpoint to change it)", ErrWorldMismatch, w, s.world)
	}
	if req.rank < 0 || req.rank >= w {
		return fmt.Errorf("%w: rank %d: want 0..%d", ErrWorldMismatch, req.rank, w-1)
	}
	if err := st.steps.serves(req.rank, req.agent); err != nil {
		return err
	}
	switch {
	case req.dropLast == nil:
	case !s.dropFixed:
		s.dropLast = *req.dropLast
	case *req.dropLast != s.dropLast:
		return fmt.Errorf("%w: drop_last %t, but the agent's ranks have %t", ErrWorldMismatch, *req.dropLast, s.dropLast)
	}
	s.dropFixed = true
	return nil
}

// take pops rank's next part at now, forming the next step if the rank
// has none queued, for a request that joined a world of world ranks
// (superseded: it may no longer take a part). wait says there is none
// yet: the caller waits for a change and asks again.
func (st *readerState) take(rank, world int, superseded bool, now time.Time) (p rankPart, wait bool, err error) {
	s := &st.ranks
	for {
		switch {
		case superseded:
			return rankPart{}, false, errSuperseded
		case s.world != world:
			// A resume changed the world size while the rank waited.
			return rankPart{}, false, fmt.Errorf("%w: world size %d, but a resume set %d", ErrWorldMismatch, world, s.world)
		case st.resuming:
			return rankPart{}, true, nil // the position is being rewound
		case st.gens.mustResume(rank) != nil:
			return rankPart{}, false, st.gens.mustResume(rank)
		case len(s.queues[rank]) > 0:
			return st.pop(rank, now), false, nil
		case s.epoch >= st.job.Spec.Epochs:
			st.rankEnded(rank)
			return rankPart{}, false, io.EOF
		case st.runEnded || st.closing:
			return rankPart{}, false, st.stopped()
		case st.steps.form(st, now):
			continue
		}
		return rankPart{}, true, nil
	}
}

// supply is what the ranks' current epoch e has ready.
func (st *readerState) supply(e int) stepplan.EpochSupply {
	var sup stepplan.EpochSupply
	for _, b := range st.ready[e] {
		sup.Ready = append(sup.Ready, len(b.Keys))
	}
	if e < st.asm.Finished {
		sup.Cut = true
	} else if ep := st.asm.Open[e]; ep != nil {
		sup.Pending, sup.Cut = ep.PendingRows(), ep.Cut
	}
	return sup
}

// stepReady reports whether the ranks' current epoch has a step (or its
// end) ready. While it has not, the agent pulls past its prefetch bound:
// later epochs' batches must not starve the current.
func (st *readerState) stepReady() bool {
	s := &st.ranks
	if s.epoch >= st.job.Spec.Epochs {
		return true
	}
	return stepplan.Step(st.supply(s.epoch), max(s.world, 1), st.job.Spec.BatchSize, s.dropLast).Action != stepplan.StepWait
}

// stepPolicy forms a reader's global steps from what it holds: one agent
// holds every row (soloSteps: a lone agent), or each agent of a team
// holds some (teamSteps: the team's planner). The two agree on the steps'
// sizes (TestPlanRestOneHolderIsPlanStep) but not on the mechanics: a lone
// agent's world is fixed by its first request and changes with a resume,
// its epoch's tail shares the batches' memory, and it pulls by its
// prefetch alone; a team's holders are fixed, and each holder's share
// of the prefetch decides whether it pulls.
type stepPolicy interface {
	// form forms the ranks' next global step and queues its parts,
	// moving through finished epochs and dropped tails; it reports
	// whether anything changed. The world must be fixed.
	form(s *readerState, now time.Time) bool
	// pull says whether this agent should take more tasks (wants), and
	// whether its ranks wait for rows it lacks (starved: buffer.go).
	pull(s *readerState) (wants, starved bool)
	// serves checks that agent ("": this one) serves rank r.
	serves(r int, agent string) error
}

// soloSteps is the step policy of a lone agent (stepplan.Step).
type soloSteps struct{}

// pull: wanted while the prefetch has room, or the ranks' epoch has no
// step ready (then starved too), and not every epoch arrived.
func (soloSteps) pull(st *readerState) (wants, starved bool) {
	ready := st.stepReady()
	return !st.asm.AllCut() && (st.readySamples < st.prefetch() || !ready), !ready
}

func (soloSteps) serves(r int, agent string) error {
	if agent != "" {
		return fmt.Errorf("%w: rank %d is served by this agent, not %s", ErrWorldMismatch, r, agentName(agent))
	}
	return nil
}

func (soloSteps) form(st *readerState, now time.Time) bool {
	s := &st.ranks
	changed := false
	for s.epoch < st.job.Spec.Epochs {
		e := s.epoch
		plan := stepplan.Step(st.supply(e), s.world, st.job.Spec.BatchSize, s.dropLast)
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
		var parts []Batch
		if plan.Action == stepplan.StepFull {
			for _, b := range batches {
				parts = append(parts, b.Batch)
			}
		} else {
			parts = splitRows(e, batches, plan.Sizes)
		}
		if plan.Last && len(st.ready[e]) > 0 {
			// The rest of a cut epoch after its last step is a dropped tail.
			st.dropTail(e, now)
		}
		rp := make([]rankPart, len(parts))
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
func (st *readerState) queueStep(parts []rankPart, last bool) {
	s := &st.ranks
	idx, e := s.step, s.epoch
	if last {
		s.epoch, s.step = s.epoch+1, 0
	} else {
		s.step++
	}
	pos := st.asm.Snapshot()
	pos.Submitted = st.submitted()
	data, err := assembly.EncodePosition(pos)
	if err != nil {
		data = nil // cannot happen: the position is plain data
	}
	for r, p := range parts {
		p.Step, p.Last, p.World, p.Position = idx, last, s.world, data
		if last {
			p.EpochFailed = st.failedIn[e]
		}
		s.queues[r] = append(s.queues[r], p)
		s.queued += len(p.Keys)
	}
	s.formed = true
	st.changed = true
}

// takeReady removes the first n ready batches of epoch e and records them
// as handed out.
func (st *readerState) takeReady(e, n int, now time.Time) []assembly.ReadyBatch {
	batches := st.ready[e][:n:n]
	st.ready[e] = st.ready[e][n:]
	if len(st.ready[e]) == 0 {
		delete(st.ready, e)
	}
	for _, b := range batches {
		st.readySamples -= len(b.Keys)
		st.epochsFinished(st.asm.HandOut(b), now)
	}
	return batches
}

// dropTail hands out the rest of a cut epoch e to no rank (drop_last) and
// counts its samples as dropped.
func (st *readerState) dropTail(e int, now time.Time) {
	n := 0
	for _, b := range st.takeReady(e, len(st.ready[e]), now) {
		n += len(b.Keys)
	}
	st.stats.DroppedSamples += int64(n)
	st.note(slog.LevelInfo, "dropping the epoch's last, partial step (drop_last)", "epoch", e, "samples", n)
}

// splitRows stacks the rows of batches (all of epoch e) into one part per
// entry of sizes, in order. A part is runs of rows in the chunks they came
// in, as a whole batch is: nothing is copied (copying a step of
// ImageNet-size rows was the agent's largest cost while serving, page
// faults included).
func splitRows(e int, batches []assembly.ReadyBatch, sizes []int) []Batch {
	var keys []string
	var sources []int
	for _, b := range batches {
		keys = append(keys, b.Keys...)
		sources = append(sources, b.Sources...)
	}
	// Each tensor's data as one list of runs over all the batches, and the
	// size of one of its rows (all batches share the job's schema).
	var tensors []safetensors.Tensor
	var runs [][][]byte
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
	parts := make([]Batch, len(sizes))
	lo := 0
	for r, n := range sizes {
		p := Batch{Epoch: e, Keys: keys[lo : lo+n : lo+n], Runs: make([][][]byte, len(tensors))}
		if len(sources) == len(keys) {
			p.Sources = sources[lo : lo+n : lo+n]
		}
		for j, t := range tensors {
			p.Tensors = append(p.Tensors, safetensors.Tensor{
				Name: t.Name, DType: t.DType, Shape: append([]int{n}, t.Shape...)})
			p.Runs[j] = cutRuns(runs[j], lo*rowBytes[j], (lo+n)*rowBytes[j])
		}
		parts[r] = p
		lo += n
	}
	return parts
}

// cutRuns is bytes [from, to) of the concatenation of runs, as runs
// aliasing them.
func cutRuns(runs [][]byte, from, to int) [][]byte {
	var out [][]byte
	off := 0
	for _, r := range runs {
		lo, hi := max(from-off, 0), min(to-off, len(r))
		if lo < hi {
			out = append(out, r[lo:hi:hi])
		}
		off += len(r)
		if off >= to {
			break
		}
	}
	return out
}

// pop hands rank r its oldest queued part.
func (st *readerState) pop(r int, now time.Time) rankPart {
	s := &st.ranks
	p := s.queues[r][0]
	s.queues[r][0] = rankPart{}
	s.queues[r] = s.queues[r][1:]
	s.queued -= len(p.Keys)
	p.gen = st.gens.n
	st.delivered(r, p, now)
	return p
}

// delivered counts part p as handed to rank r.
func (st *readerState) delivered(r int, p rankPart, now time.Time) {
	s := &st.ranks
	n := len(p.Keys)
	c := &s.counts[r]
	c.batches++
	c.samples += int64(n)
	c.epoch, c.step = p.Epoch, p.Step
	st.stats.SamplesDelivered += int64(n)
	st.stats.BatchesDelivered++
	st.window.Consumed += int64(n)
	st.window.Done = st.stats.SamplesDelivered
	if st.firstBatch.IsZero() {
		st.firstBatch = now
	}
	st.changed = true
}
