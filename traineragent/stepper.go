package traineragent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluice-project/sluice/format/safetensors"
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
	Spans []rowSpan
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
// in, and the parts formed that their ranks have not taken yet. The agent
// guards it with a.mu.
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
	// superseded, if set, says (a.mu held) that the request may no longer
	// take a part: a member's request from before a resume or a re-join,
	// whose requester may be gone (teamserve.go).
	superseded func() bool
}

// join checks req against the ranks' world, fixing what is not fixed yet;
// a.mu must be held.
func (a *Reader) join(req rankRequest) error {
	s := &a.ranks
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
	if a.team != nil && a.team.holders[req.rank] != req.agent {
		return fmt.Errorf("%w: rank %d is served by %s", ErrWorldMismatch, req.rank, agentName(a.team.holders[req.rank]))
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

// nextPart returns rank req.rank's next part, blocking until one is
// ready; the time spent blocked is the trainer's stall time. It returns
// io.EOF once the rank got every step of every epoch, an error wrapping
// ErrWorldMismatch for a request that does not fit the ranks, and one
// wrapping ErrStopped if Run ended before.
//
// The part counts as delivered once nextPart returns it: the reader's
// position, covering the part's whole step, is written first.
func (a *Reader) nextPart(ctx context.Context, req rankRequest) (rankPart, error) {
	if a.member != nil {
		return a.memberPart(ctx, req)
	}
	p, err := a.takeAndRecord(ctx, req)
	if err != nil || p.Spans == nil {
		return p, err
	}
	return a.cutPart(ctx, p)
}

// takeAndRecord pops rank req.rank's next part once the position that
// covers its step is written.
func (a *Reader) takeAndRecord(ctx context.Context, req rankRequest) (rankPart, error) {
	p, err := a.takePart(ctx, req)
	if err != nil {
		return rankPart{}, err
	}
	// Not cancelled with Run: a step taken is recorded and returned even
	// while the agent stops (else a later write could record it unreturned).
	// Every rank's call writes or waits for the write covering its step.
	if err := a.sync(context.WithoutCancel(ctx), true); err != nil {
		err = fmt.Errorf("recording the position of reader %s: %w", a.reader, err)
		a.stop(err)
		return rankPart{}, fmt.Errorf("%w: %w", ErrStopped, err)
	}
	return p, nil
}

// takePart pops rank req.rank's next part, forming the next step if the
// rank has none queued.
func (a *Reader) takePart(ctx context.Context, req rankRequest) (rankPart, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.join(req); err != nil {
		return rankPart{}, err
	}
	s := &a.ranks
	world := s.world
	waiting := false
	stopWaiting := func() {
		if waiting {
			a.unblock(time.Now())
		}
	}
	// A member's rank waits at its own agent, which counts that wait.
	remote := req.agent != ""
	for {
		switch {
		case req.superseded != nil && req.superseded():
			stopWaiting()
			return rankPart{}, errSuperseded
		case s.world != world:
			// A resume changed the world size while the rank waited.
			stopWaiting()
			return rankPart{}, fmt.Errorf("%w: world size %d, but a resume set %d", ErrWorldMismatch, world, s.world)
		case a.resuming:
			// Wait: the position is being rewound.
		case len(s.queues[req.rank]) > 0:
			stopWaiting()
			return a.pop(req.rank, time.Now()), nil
		case s.epoch >= a.job.Spec.Epochs:
			stopWaiting()
			if c := &s.counts[req.rank]; !c.ended {
				c.ended = true
				s.nEnded++
				a.notify()
			}
			return rankPart{}, io.EOF
		case a.runEnded || a.closing:
			stopWaiting()
			if a.runErr != nil {
				return rankPart{}, fmt.Errorf("%w: %w", ErrStopped, a.runErr)
			}
			return rankPart{}, ErrStopped
		case a.formStep(time.Now()):
			continue
		}
		if !waiting && !remote {
			waiting = true
			a.block(time.Now())
		}
		wake := a.wake
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			a.mu.Lock()
			stopWaiting()
			return rankPart{}, ctx.Err()
		case <-wake:
		}
		a.mu.Lock()
	}
}

// supply is what the ranks' current epoch e has ready; a.mu must be held.
func (a *Reader) supply(e int) epochSupply {
	var sup epochSupply
	for _, b := range a.ready[e] {
		sup.Ready = append(sup.Ready, len(b.Keys))
	}
	if e < a.asm.finished {
		sup.Cut = true
	} else if ep := a.asm.open[e]; ep != nil {
		sup.Pending, sup.Cut = ep.pendingRows(), ep.cut
	}
	return sup
}

// stepReady reports whether the ranks' current epoch has a step (or its
// end) ready; a.mu must be held. While it has not, the agent pulls past
// its prefetch bound: later epochs' batches must not starve the current.
func (a *Reader) stepReady() bool {
	s := &a.ranks
	if s.epoch >= a.job.Spec.Epochs {
		return true
	}
	return planStep(a.supply(s.epoch), max(s.world, 1), a.job.Spec.BatchSize, s.dropLast).Action != stepWait
}

// formStep forms the ranks' next global step and queues its parts, moving
// through finished epochs and dropped tails; it reports whether anything
// changed. a.mu must be held and the world fixed.
func (a *Reader) formStep(now time.Time) bool {
	if a.team != nil {
		return a.formTeamStep(now)
	}
	s := &a.ranks
	changed := false
	for s.epoch < a.job.Spec.Epochs {
		e := s.epoch
		plan := planStep(a.supply(e), s.world, a.job.Spec.BatchSize, s.dropLast)
		switch plan.Action {
		case stepWait:
			return changed
		case stepEpochDone:
			s.epoch, s.step = e+1, 0
			changed = true
			continue
		case stepDrop:
			a.dropTail(e, now)
			changed = true
			continue
		}
		batches := a.takeReady(e, plan.Batches, now)
		var parts []Batch
		if plan.Action == stepFull {
			for _, b := range batches {
				parts = append(parts, b.Batch)
			}
		} else {
			parts = splitRows(e, batches, plan.Sizes)
		}
		if plan.Last && len(a.ready[e]) > 0 {
			// The rest of a cut epoch after its last step is a dropped tail.
			a.dropTail(e, now)
		}
		rp := make([]rankPart, len(parts))
		for r, b := range parts {
			rp[r].Batch = b
		}
		a.queueStep(rp, plan.Last)
		return true
	}
	return changed
}

// queueStep queues the parts of the ranks' next step, one per rank (each
// carrying the position once the whole step is handed out), and moves the
// ranks on; a.mu must be held.
func (a *Reader) queueStep(parts []rankPart, last bool) {
	s := &a.ranks
	idx, e := s.step, s.epoch
	if last {
		s.epoch, s.step = s.epoch+1, 0
	} else {
		s.step++
	}
	pos := a.asm.snapshot()
	pos.Submitted = a.submitted()
	data, err := encodePosition(pos)
	if err != nil {
		data = nil // cannot happen: the position is plain data
	}
	for r, p := range parts {
		p.Step, p.Last, p.World, p.Position = idx, last, s.world, data
		if last {
			p.EpochFailed = a.failedIn[e]
		}
		s.queues[r] = append(s.queues[r], p)
		s.queued += len(p.Keys)
	}
	s.formed = true
	a.m.bufferedSamples.Set(float64(a.buffered()))
	a.notify()
}

// takeReady removes the first n ready batches of epoch e and records them
// as handed out; a.mu must be held.
func (a *Reader) takeReady(e, n int, now time.Time) []readyBatch {
	batches := a.ready[e][:n:n]
	a.ready[e] = a.ready[e][n:]
	if len(a.ready[e]) == 0 {
		delete(a.ready, e)
	}
	for _, b := range batches {
		a.readySamples -= len(b.Keys)
		a.epochsFinished(a.asm.handOut(b), now)
	}
	return batches
}

// dropTail hands out the rest of a cut epoch e to no rank (drop_last) and
// counts its samples as dropped; a.mu must be held.
func (a *Reader) dropTail(e int, now time.Time) {
	n := 0
	for _, b := range a.takeReady(e, len(a.ready[e]), now) {
		n += len(b.Keys)
	}
	a.stats.DroppedSamples += int64(n)
	a.m.droppedSamples.Add(float64(n))
	a.log.Info("dropping the epoch's last, partial step (drop_last)", "epoch", e, "samples", n)
}

// splitRows stacks the rows of batches (all of epoch e) into one part per
// entry of sizes, in order. A part is runs of rows in the chunks they came
// in, as a whole batch is: nothing is copied (copying a step of
// ImageNet-size rows was the agent's largest cost while serving, page
// faults included).
func splitRows(e int, batches []readyBatch, sizes []int) []Batch {
	var keys []string
	for _, b := range batches {
		keys = append(keys, b.Keys...)
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
				rowBytes[j] = b.dataLen(j) / len(b.Keys)
			}
			runs[j] = append(runs[j], b.data(j)...)
		}
	}
	parts := make([]Batch, len(sizes))
	lo := 0
	for r, n := range sizes {
		p := Batch{Epoch: e, Keys: keys[lo : lo+n : lo+n], runs: make([][][]byte, len(tensors))}
		for j, t := range tensors {
			p.Tensors = append(p.Tensors, safetensors.Tensor{
				Name: t.Name, DType: t.DType, Shape: append([]int{n}, t.Shape...)})
			p.runs[j] = cutRuns(runs[j], lo*rowBytes[j], (lo+n)*rowBytes[j])
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

// pop hands rank r its oldest queued part; a.mu must be held.
func (a *Reader) pop(r int, now time.Time) rankPart {
	s := &a.ranks
	p := s.queues[r][0]
	s.queues[r][0] = rankPart{}
	s.queues[r] = s.queues[r][1:]
	s.queued -= len(p.Keys)
	if a.team != nil {
		p.gen = a.team.gen
	}
	a.delivered(r, p, now)
	return p
}

// delivered counts part p as handed to rank r; a.mu must be held.
func (a *Reader) delivered(r int, p rankPart, now time.Time) {
	s := &a.ranks
	n := len(p.Keys)
	c := &s.counts[r]
	c.batches++
	c.samples += int64(n)
	c.epoch, c.step = p.Epoch, p.Step
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
	a.notify()
}
