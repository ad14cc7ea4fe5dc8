package readerstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
)

// StateVersion is the format of a trainer's State.
const StateVersion = 1

// State is a trainer's place in a job as its client saves it in a
// checkpoint (the client's state dict): the next step the training loop
// takes, the world size it had, and the position metadata of the last
// batch it took (parsed, or as its JSON text; null before the first). DDP
// ranks step together, so rank 0's state stands for every rank's. An
// empty job or reader is the agent's own.
type TrainerState struct {
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

// ResumeRecord is a generation's resume, to answer the ranks that join it.
type ResumeRecord struct {
	State  TrainerState
	World  int
	Token  string // the trainer's run it is of ("": none given)
	Result ResumeResult
}

// ResumeRequest is one rank's resume: the state it loaded, the world size
// of its generation, the trainer's run it is of (Token; "" none), and its
// request's id (a member's forward, which it may send again; "" none).
type ResumeRequest struct {
	State       TrainerState
	World, Rank int
	Token, ID   string
}

// AnswerResume answers a resume that rewinds nothing: the reader stopped,
// the rank is not agent's, the rank joins the current generation, or its
// state conflicts with the generation's.
func (s *State) AnswerResume(req ResumeRequest, agent string) (ResumeResult, bool, error) {
	if s.RunEnded {
		return ResumeResult{}, true, s.Stopped()
	}
	if agent != "" {
		if err := s.Steps.serves(req.Rank, agent); err != nil {
			return ResumeResult{}, true, fmt.Errorf("%w: %w", ErrBadState, err)
		}
	}
	world := req.World
	if world == 0 {
		world = req.State.WorldSize
	}
	req.World = world
	v, err := s.Gens.decide(req)
	switch {
	case err != nil:
		return ResumeResult{}, true, err
	case v == resumeJoins:
		s.Gens.Join(req.Rank, req.ID)
		s.Changed = true
		return s.Gens.from.Result, true, nil
	}
	return ResumeResult{}, false, nil
}

// Rewind makes the state's position (fresh) the reader's, for a new
// generation of world ranks that req's rank starts, the recorded
// position being recorded (nil: none): what the ranks held and the steps
// they were in are forgotten. It returns the shards to produce again,
// nil if the memory was already there (the resume is then done); else
// the state is resuming until resumeDone.
func (s *State) Rewind(req ResumeRequest, world int, fresh *assembly.Assembler, recorded []byte, now time.Time) (ResumeResult, map[int][]int, error) {
	st := req.State
	// A new generation of ranks (a trainer restarted from its checkpoint
	// by torchrun, the agent still running): the rewind owes them every
	// sample past the checkpoint.
	if s.Ranks.formed || s.Gens.from != nil {
		s.note(slog.LevelInfo, "a new generation of ranks resumes", "epoch", st.Epoch, "step", st.Step, "world_size", world, "rank", req.Rank)
	}
	dropLast, dropFixed := s.Ranks.dropLast, s.Ranks.DropFixed
	s.Ranks = Stepper{dropLast: dropLast, DropFixed: dropFixed}
	s.Gens.start(&ResumeRecord{State: st, World: world, Token: req.Token}, req.Rank, req.ID)
	h := assembly.Position{Version: assembly.PositionVersion}
	var err error
	if recorded != nil {
		if h, err = assembly.DecodePosition(recorded); err != nil {
			s.Gens.settle(nil)
			return ResumeResult{}, nil, fmt.Errorf("the recorded position: %w", err)
		}
	}
	replay, err := assembly.ReplaySet(s.Asm.Snapshot(), fresh.Snapshot(), s.job.Spec.Epochs, len(s.job.Shards))
	if err != nil {
		s.Gens.settle(nil)
		return ResumeResult{}, nil, err
	}
	// Resumed: the recorded position was past the state's. The memory is
	// rewound whenever it differs (shard ends may have arrived since).
	rec := assembly.NewAssembler(s.job)
	if err := rec.Restore(h); err != nil {
		s.Gens.settle(nil)
		return ResumeResult{}, nil, fmt.Errorf("the recorded position: %w", err)
	}
	want := mustEncode(fresh.Snapshot())
	result := ResumeResult{Resumed: !bytes.Equal(mustEncode(rec.Snapshot()), want)}
	s.Ranks.setWorld(world)
	s.Ranks.epoch, s.Ranks.step = 0, 0
	if st.Epoch == fresh.Finished {
		// The step index goes on from the checkpoint's (with the new
		// world size, steps hold a different number of samples).
		s.Ranks.epoch, s.Ranks.step = st.Epoch, st.Step
	}
	s.Changed = true
	if bytes.Equal(mustEncode(s.Asm.Snapshot()), want) {
		s.Gens.settle(&ResumeRecord{State: st, World: world, Token: req.Token, Result: result})
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
func (s *State) rewindMemory(fresh *assembly.Assembler, replay map[int][]int, now time.Time) {
	fresh.Version = s.Asm.Version + 1
	fresh.Schema = s.Asm.Schema
	carried := assembly.Carry(s.Asm, fresh)
	fresh.MarkReplayed(replay)
	s.Asm = fresh
	s.rest = nil
	clear(s.ready)
	s.ReadySamples = 0
	for _, b := range carried {
		s.ready[b.Epoch] = append(s.ready[b.Epoch], b)
		s.ReadySamples += len(b.Keys)
	}
	s.epochsFinished(s.Asm.Start(), now)
	s.Resuming = true
	s.Changed = true
}

// ResumeDone ends a resume's rewind: steps are formed again, and r (nil:
// the resume failed) answers the generation's other ranks.
func (s *State) ResumeDone(r *ResumeRecord) {
	s.Resuming = false
	s.Gens.settle(r)
	s.Changed = true
}

// sameState compares two states, positions by their decoded content (a
// client may re-encode the JSON).
func sameState(x, y TrainerState) bool {
	if x.Version != y.Version || x.Job != y.Job || x.Reader != y.Reader || x.Epoch != y.Epoch ||
		x.Step != y.Step || x.WorldSize != y.WorldSize {
		return false
	}
	px, errx := PositionJSON(x.Position)
	py, erry := PositionJSON(y.Position)
	var vx, vy any
	if errx != nil || erry != nil || json.Unmarshal(px, &vx) != nil || json.Unmarshal(py, &vy) != nil {
		return false
	}
	return mustJSON(vx) == mustJSON(vy)
}

// PositionJSON is a state's position as JSON: "null" when absent, and the
// metadata's JSON text unwrapped when a client kept it as a string.
func PositionJSON(raw json.RawMessage) ([]byte, error) {
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

func mustEncode(p assembly.Position) []byte {
	data, _ := assembly.EncodePosition(p)
	return data
}
