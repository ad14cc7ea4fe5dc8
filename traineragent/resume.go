package traineragent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/wire"
)

// StateVersion is the format of a trainer's State.
const StateVersion = 1

// State is a trainer's place in a job as its client saves it in a
// checkpoint (the client's state dict): the next step the training loop
// takes, the world size it had, and the position metadata of the last
// batch it took (parsed, or as its JSON text; null before the first). DDP
// ranks step together, so rank 0's state stands for every rank's. An
// empty job or reader is the agent's own.
type State struct {
	Version   int             `json:"v"`
	Job       string          `json:"job"`
	Reader    string          `json:"reader"`
	Epoch     int             `json:"epoch"`
	Step      int             `json:"step"`
	WorldSize int             `json:"world_size"`
	Position  json.RawMessage `json:"position"`
}

// ResumeResult is what Resume did: Resumed says the reader's recorded
// position was past the state's and was rewound (false when it was already
// there); ReplayedShards counts the shards asked to be produced again.
type ResumeResult struct {
	Resumed        bool `json:"resumed"`
	ReplayedShards int  `json:"replayed_shards"`
}

// ErrBadState means a resume's state is malformed or not this reader's
// (POST /v1/resume answers 400).
var ErrBadState = errors.New("bad trainer state")

// ErrResumeConflict means a resume cannot be done: this agent handed out a
// batch already, or resumed from another state (POST /v1/resume answers 409).
var ErrResumeConflict = errors.New("conflicting resume")

// resumeRecord is a generation's resume, to answer the ranks that join it.
type resumeRecord struct {
	state  State
	world  int
	result ResumeResult
}

// resumeRequest is one rank's resume: the state it loaded, the world size
// of its generation, and its request's id (a member's forward, which it
// may send again; "" none).
type resumeRequest struct {
	state       State
	world, rank int
	id          string
}

// Resume rewinds the reader to a trainer's checkpointed state for rank of
// a new generation of world ranks (0: the state's world size), so that
// every sample the checkpointed model had not consumed is delivered
// exactly once. The generation's first resume rewinds: the agent's
// recorded position is at or past the state's, the shards whose messages
// it had acked beyond the state's position are produced again
// (assembly.ReplaySet), the chunks held are returned to the stream, and the
// state's position, with those shards noted as replayed, becomes the
// reader's. Copies of what the state's position already covers are
// dropped by ChunkRef, as ever. Its other ranks' resumes join it and
// rewind nothing, however late they come (generations says when a resume
// is a new generation's).
//
// A resume claims the reader: the position is written even when nothing
// is rewound, so that an agent of an earlier run still stopping cannot
// write over it unseen (reproduction 7 of issue 24: a 2 x 2 -> 3 x 1
// resume while the old planner stops).
func (a *Reader) Resume(ctx context.Context, st State, world, rank int) (ResumeResult, error) {
	return a.role.resume(ctx, resumeRequest{state: st, world: world, rank: rank})
}

// resumeHere is Resume on the agent that keeps the reader's position (a
// lone agent, a team's planner); agent is the member that forwarded it
// ("": this agent's own rank).
func (a *Reader) resumeHere(ctx context.Context, req resumeRequest, agent string) (ResumeResult, error) {
	st, world := req.state, req.world
	p, err := a.checkState(st)
	if err != nil {
		return ResumeResult{}, err
	}
	if world == 0 {
		world = st.WorldSize
	}
	if world < 1 || world > MaxWorldSize {
		return ResumeResult{}, fmt.Errorf("%w: world size %d: want 1..%d", ErrBadState, world, MaxWorldSize)
	}
	if req.rank < 0 || req.rank >= world {
		return ResumeResult{}, fmt.Errorf("%w: rank %d: want 0..%d (world size %d)", ErrBadState, req.rank, world-1, world)
	}
	fresh := assembly.NewAssembler(a.job)
	if err := fresh.Restore(p); err != nil {
		return ResumeResult{}, fmt.Errorf("%w: %w", ErrBadState, err)
	}
	if err := a.lockForResume(ctx); err != nil {
		return ResumeResult{}, err
	}
	if result, answered, err := a.st.answerResume(req, agent); answered {
		a.unlockResume()
		return result, err
	}
	result, replay, err := a.st.rewind(req, world, fresh, a.pos.recorded, time.Now())
	a.unlockResume()
	switch {
	case err != nil:
		return result, err
	case replay == nil:
		// Nothing to rewind: the reader is claimed all the same.
		if err := a.claim(context.WithoutCancel(ctx)); err != nil {
			err = fmt.Errorf("recording the resumed position of reader %s: %w", a.reader, err)
			a.stop(err)
			return ResumeResult{}, fmt.Errorf("%w: %w", ErrStopped, err)
		}
		return result, nil
	}
	a.log.Info("resuming from a trainer's checkpoint", "epoch", st.Epoch, "step", st.Step, "rank", req.rank,
		"world_size", world, "checkpoint_world_size", st.WorldSize, "replay_epochs", len(replay))
	return a.recordResume(ctx, st, world, p, replay, result)
}

// lockForResume waits for the recorded position, and for a concurrent
// resume (every rank sends one) to finish, and returns with a.pos.mu and
// a.mu held: no write (and no ack after it) while the position is
// compared and rewound, so what was acked is what the recorded position
// holds.
func (a *Reader) lockForResume(ctx context.Context) error {
	for {
		if err := a.waitFor(ctx, func() bool { return a.st.runEnded || a.st.loaded && !a.st.resuming }); err != nil {
			return err
		}
		a.pos.mu.Lock()
		a.mu.Lock()
		if !a.st.resuming {
			return nil
		}
		a.unlockResume()
	}
}

func (a *Reader) unlockResume() {
	a.unlock()
	a.pos.mu.Unlock()
}

// answerResume answers a resume that rewinds nothing: the reader stopped,
// the rank is not agent's, the rank joins the current generation, or its
// state conflicts with the generation's.
func (s *readerState) answerResume(req resumeRequest, agent string) (ResumeResult, bool, error) {
	if s.runEnded {
		return ResumeResult{}, true, s.stopped()
	}
	if agent != "" {
		if err := s.steps.serves(req.rank, agent); err != nil {
			return ResumeResult{}, true, fmt.Errorf("%w: %w", ErrBadState, err)
		}
	}
	world := req.world
	if world == 0 {
		world = req.state.WorldSize
	}
	v, err := s.gens.decide(req.state, world, req.rank, req.id)
	switch {
	case err != nil:
		return ResumeResult{}, true, err
	case v == resumeJoins:
		s.gens.join(req.rank, req.id)
		s.changed = true
		return s.gens.from.result, true, nil
	}
	return ResumeResult{}, false, nil
}

// rewind makes the state's position (fresh) the reader's, for a new
// generation of world ranks that req's rank starts, the recorded
// position being recorded (nil: none): what the ranks held and the steps
// they were in are forgotten. It returns the shards to produce again,
// nil if the memory was already there (the resume is then done); else
// the state is resuming until resumeDone.
func (s *readerState) rewind(req resumeRequest, world int, fresh *assembly.Assembler, recorded []byte, now time.Time) (ResumeResult, map[int][]int, error) {
	st := req.state
	// A new generation of ranks (a trainer restarted from its checkpoint
	// by torchrun, the agent still running): the rewind owes them every
	// sample past the checkpoint.
	if s.ranks.formed || s.gens.from != nil {
		s.note(slog.LevelInfo, "a new generation of ranks resumes", "epoch", st.Epoch, "step", st.Step, "world_size", world, "rank", req.rank)
	}
	dropLast, dropFixed := s.ranks.dropLast, s.ranks.dropFixed
	s.ranks = stepper{dropLast: dropLast, dropFixed: dropFixed}
	s.gens.start(&resumeRecord{state: st, world: world}, req.rank, req.id)
	h := assembly.Position{Version: assembly.PositionVersion}
	var err error
	if recorded != nil {
		if h, err = assembly.DecodePosition(recorded); err != nil {
			s.gens.settle(nil)
			return ResumeResult{}, nil, fmt.Errorf("the recorded position: %w", err)
		}
	}
	replay, err := assembly.ReplaySet(s.asm.Snapshot(), fresh.Snapshot(), s.job.Spec.Epochs, len(s.job.Shards))
	if err != nil {
		s.gens.settle(nil)
		return ResumeResult{}, nil, err
	}
	// Resumed: the recorded position was past the state's. The memory is
	// rewound whenever it differs (shard ends may have arrived since).
	rec := assembly.NewAssembler(s.job)
	if err := rec.Restore(h); err != nil {
		s.gens.settle(nil)
		return ResumeResult{}, nil, fmt.Errorf("the recorded position: %w", err)
	}
	want := mustEncode(fresh.Snapshot())
	result := ResumeResult{Resumed: !bytes.Equal(mustEncode(rec.Snapshot()), want)}
	s.ranks.setWorld(world)
	s.ranks.epoch, s.ranks.step = 0, 0
	if st.Epoch == fresh.Finished {
		// The step index goes on from the checkpoint's (with the new
		// world size, steps hold a different number of samples).
		s.ranks.epoch, s.ranks.step = st.Epoch, st.Step
	}
	s.changed = true
	if bytes.Equal(mustEncode(s.asm.Snapshot()), want) {
		s.gens.settle(&resumeRecord{state: st, world: world, result: result})
		return result, nil, nil
	}
	s.rewindMemory(fresh, replay, now)
	if replay == nil {
		replay = map[int][]int{} // rewound: the caller records it
	}
	return result, replay, nil
}

// rewindMemory makes fresh the memory, with what it still holds carried
// over (chunks held, shard ends: their tasks are unsettled, nothing sends
// them again) and the shards whose handed-out chunks are gone replayed;
// the ready batches are re-formed, and no step is formed until the replay
// is asked for (resumeDone).
func (s *readerState) rewindMemory(fresh *assembly.Assembler, replay map[int][]int, now time.Time) {
	fresh.Version = s.asm.Version + 1
	fresh.Schema = s.asm.Schema
	carried := assembly.Carry(s.asm, fresh)
	fresh.MarkReplayed(replay)
	s.asm = fresh
	s.rest = nil
	clear(s.ready)
	s.readySamples = 0
	for _, b := range carried {
		s.ready[b.Epoch] = append(s.ready[b.Epoch], b)
		s.readySamples += len(b.Keys)
	}
	s.epochsFinished(s.asm.Start(), now)
	s.resuming = true
	s.changed = true
}

// resumeDone ends a resume's rewind: steps are formed again, and r (nil:
// the resume failed) answers the generation's other ranks.
func (s *readerState) resumeDone(r *resumeRecord) {
	s.resuming = false
	s.gens.settle(r)
	s.changed = true
}

// recordResume writes the rewound position (p, with the shards being
// replayed: an agent that crashes now leaves a position that sends them
// again), then asks for the replay. It finishes even if the client goes
// away: the memory is rewound already.
func (a *Reader) recordResume(ctx context.Context, st State, world int, p assembly.Position, replay map[int][]int, result ResumeResult) (ResumeResult, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), positionWriteTimeout)
	defer cancel()
	base := assembly.NewAssembler(a.job)
	if err := base.Restore(p); err == nil {
		a.recorded.Reset(base)
	} else {
		a.recorded.Reset(nil) // cannot be: fresh was restored from p
	}
	if err := a.sync(ctx, false); err != nil {
		// The memory says the replay is queued: the agent cannot go on.
		// (A position written on the way out notes the shards as
		// replayed, so the next resume asks for them again.)
		err = fmt.Errorf("recording the resumed position of reader %s: %w", a.reader, err)
		a.stop(err)
		a.mu.Lock()
		a.st.resumeDone(nil)
		a.unlock()
		return ResumeResult{}, fmt.Errorf("%w: %w", ErrStopped, err)
	}
	var tasks []wire.ShardTask
	for e, ss := range replay {
		for _, s := range ss {
			tasks = append(tasks, a.job.Task(e, s))
		}
	}
	result.ReplayedShards = len(tasks)
	a.replay(tasks)
	a.mu.Lock()
	a.st.resumeDone(&resumeRecord{state: st, world: world, result: result})
	a.unlock()
	a.log.Info("resumed", "replayed_shards", result.ReplayedShards)
	return result, nil
}

// checkState validates st against the agent's job and reader and returns
// its position (the start of the job for null).
func (a *Reader) checkState(st State) (assembly.Position, error) {
	switch {
	case st.Version != StateVersion:
		return assembly.Position{}, fmt.Errorf("%w: version %d: this agent reads %d", ErrBadState, st.Version, StateVersion)
	case st.Job != "" && st.Job != a.job.Spec.ID:
		return assembly.Position{}, fmt.Errorf("%w: a state of job %q, this agent reads %q", ErrBadState, st.Job, a.job.Spec.ID)
	case st.Reader != "" && st.Reader != a.reader:
		return assembly.Position{}, fmt.Errorf("%w: a state of reader %q, this agent is %q", ErrBadState, st.Reader, a.reader)
	case st.Epoch < 0 || st.Step < 0 || st.WorldSize < 0 || st.WorldSize > MaxWorldSize:
		return assembly.Position{}, fmt.Errorf("%w: epoch %d step %d world size %d: want >= 0 (world size at most %d)", ErrBadState, st.Epoch, st.Step, st.WorldSize, MaxWorldSize)
	}
	raw, err := positionJSON(st.Position)
	if err != nil {
		return assembly.Position{}, fmt.Errorf("%w: position: %w", ErrBadState, err)
	}
	if bytes.Equal(raw, []byte("null")) {
		return assembly.Position{Version: assembly.PositionVersion, Submitted: a.st.submitted()}, nil
	}
	p, err := assembly.DecodePosition(raw)
	if err != nil {
		return assembly.Position{}, fmt.Errorf("%w: %w", ErrBadState, err)
	}
	if p.Submitted != a.st.submitted() {
		return assembly.Position{}, fmt.Errorf("%w: a state of the job submitted at %q, this one was submitted at %q",
			ErrBadState, p.Submitted, a.st.submitted())
	}
	return p, nil
}

// sameState compares two states, positions by their decoded content (a
// client may re-encode the JSON).
func sameState(x, y State) bool {
	if x.Version != y.Version || x.Job != y.Job || x.Reader != y.Reader || x.Epoch != y.Epoch ||
		x.Step != y.Step || x.WorldSize != y.WorldSize {
		return false
	}
	px, errx := positionJSON(x.Position)
	py, erry := positionJSON(y.Position)
	var vx, vy any
	if errx != nil || erry != nil || json.Unmarshal(px, &vx) != nil || json.Unmarshal(py, &vy) != nil {
		return false
	}
	return mustJSON(vx) == mustJSON(vy)
}

// positionJSON is a state's position as JSON: "null" when absent, and the
// metadata's JSON text unwrapped when a client kept it as a string.
func positionJSON(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, err
		}
		raw = bytes.TrimSpace([]byte(text))
	}
	if len(raw) == 0 {
		return []byte("null"), nil
	}
	return raw, nil
}

// mustJSON encodes a decoded JSON value; map keys come out sorted.
func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
