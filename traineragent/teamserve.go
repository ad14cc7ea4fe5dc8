package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/wire"
)

// The team protocol: JSON requests from a member agent to its reader's
// planner on wire.TeamSubject(job, reader, op), each answered with a
// teamReply (its Planner says which run of the planner answered).
const (
	opJoin    = "join"   // joinRequest: the member serves Ranks
	opNotes   = "notes"  // notesRequest: chunks it received (row counts, not bytes), shard ends, shards failed for good
	opPart    = "part"   // partRequest: a rank's next part (waits up to partWait)
	opResume  = "resume" // resumeRequest: a rank resumes from a checkpoint
	opStatus  = "status" // statusRequest: which of its shards are settled, and whether to take more
	partWait  = 5 * time.Second
	teamRetry = 250 * time.Millisecond
)

// Outcomes of a team request (teamReply.Status).
const (
	statusOK        = "ok"
	statusWait      = "wait"       // no part yet: ask again
	statusEOF       = "eof"        // the rank got every step
	statusMismatch  = "mismatch"   // ErrWorldMismatch
	statusNotMember = "not_member" // the asking agent has not joined this planner run
	statusBadState  = "bad_state"
	statusConflict  = "conflict"
	statusEnded     = "ended" // ErrJobEnded
	statusStopped   = "stopped"
)

type joinRequest struct {
	Agent    string `json:"agent"`
	Ranks    []int  `json:"ranks"`
	World    int    `json:"world"`
	DropLast bool   `json:"drop_last"`
}

type notesRequest struct {
	Agent string      `json:"agent"`
	Notes []chunkNote `json:"notes"`
}

// chunkNote is a chunk a member received, or (Chunk -1) a shard's end or
// (Reason set) its failure.
type chunkNote struct {
	Epoch   int            `json:"epoch"`
	Shard   int            `json:"shard"`
	Chunk   int            `json:"chunk"`
	First   *int           `json:"first,omitempty"` // its first shard row (absent from older members: after their last chunk)
	Rows    int            `json:"rows,omitempty"`  // its samples (their keys stay with the member)
	Schema  *schemaNote    `json:"schema,omitempty"`
	Corrupt string         `json:"corrupt,omitempty"`
	End     *wire.ShardEnd `json:"end,omitempty"`    // a shard's end
	Reason  string         `json:"reason,omitempty"` // why the shard failed for good
	Key     string         `json:"key,omitempty"`    // the failed shard's key
}

// firstRow is the note's first shard row, -1 when it does not say.
func (n chunkNote) firstRow() int {
	if n.First == nil || *n.First < 0 {
		return -1
	}
	return *n.First
}

// schemaNote is a chunk's tensor layout.
type schemaNote struct {
	Names  []string            `json:"names"`
	DTypes []safetensors.DType `json:"dtypes"`
	Shapes [][]int             `json:"shapes"`
}

func noteOf(sc *schema) *schemaNote {
	if sc == nil {
		return nil
	}
	return &schemaNote{Names: sc.names, DTypes: sc.dtypes, Shapes: sc.shapes}
}

func (n *schemaNote) schema() (*schema, error) {
	if n == nil || len(n.Names) == 0 || len(n.DTypes) != len(n.Names) || len(n.Shapes) != len(n.Names) {
		return nil, errors.New("a chunk's schema needs a dtype and a shape per tensor")
	}
	return &schema{names: n.Names, dtypes: n.DTypes, shapes: n.Shapes}, nil
}

type partRequest struct {
	Agent    string `json:"agent"`
	Rank     int    `json:"rank"`
	World    int    `json:"world"`
	DropLast *bool  `json:"drop_last,omitempty"`
}

type resumeRequest struct {
	Agent string `json:"agent"`
	State State  `json:"state"`
	World int    `json:"world"`
}

type statusRequest struct {
	Agent string   `json:"agent"`
	Held  [][2]int `json:"held,omitempty"` // (epoch, shard) of the tasks it holds output of
}

// teamReply answers every team request.
type teamReply struct {
	Planner string `json:"planner"`
	Status  string `json:"status"`
	Error   string `json:"error,omitempty"`
	// notes: those that were copies, and those refused (index: why)
	Duplicates []int          `json:"duplicates,omitempty"`
	Refused    map[int]string `json:"refused,omitempty"`
	// notes and status: whether the member should take more tasks
	Want bool `json:"want,omitempty"`
	// status:
	Complete [][2]int `json:"complete,omitempty"`
	// part:
	Part *partNote `json:"part,omitempty"`
	// resume:
	Resume *ResumeResult `json:"resume,omitempty"`
}

// partNote is a member rank's part: its rows as spans of chunks (the
// member reads their keys from the chunks).
type partNote struct {
	Epoch    int             `json:"epoch"`
	Step     int             `json:"step"`
	Last     bool            `json:"last"`
	Failed   int64           `json:"failed,omitempty"` // EpochFailed
	World    int             `json:"world"`
	Position json.RawMessage `json:"position"`
	Rows     int             `json:"rows"`
	Spans    []spanNote      `json:"spans"`
	Schema   *schemaNote     `json:"schema,omitempty"`
}

type spanNote struct {
	Shard int  `json:"shard"`
	Chunk int  `json:"chunk"`
	Lo    int  `json:"lo"`
	N     int  `json:"n"`
	Row   *int `json:"row,omitempty"` // the shard row of Lo (absent from older planners)
}

// serveTeam answers the team's requests for this reader (its planner)
// until ctx ends.
func (a *Reader) serveTeam(ctx context.Context, nc *nats.Conn) (*nats.Subscription, error) {
	subj := wire.TeamSubject(a.job.Spec.ID, a.reader, "*")
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) { go a.answerTeam(ctx, m) })
	if err != nil {
		return nil, fmt.Errorf("serving reader %s's team on %s: %w", a.reader, subj, err)
	}
	return sub, nil
}

func (a *Reader) answerTeam(ctx context.Context, m *nats.Msg) {
	op := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	reply := a.teamRequest(ctx, op, m.Data)
	reply.Planner = a.team.id
	data, err := json.Marshal(reply)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		a.log.Warn("answering a member", "op", op, "err", err)
	}
}

func (a *Reader) teamRequest(ctx context.Context, op string, data []byte) teamReply {
	bad := func(err error) teamReply { return teamReply{Status: statusMismatch, Error: err.Error()} }
	switch op {
	case opJoin:
		var req joinRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return bad(fmt.Errorf("join: %w", err))
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if err := a.joinMember(req.Agent, req.Ranks, req.World, req.DropLast, time.Now()); err != nil {
			return bad(err)
		}
		return teamReply{Status: statusOK}
	case opNotes:
		var req notesRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return bad(fmt.Errorf("notes: %w", err))
		}
		if !a.seeMember(req.Agent) {
			return notMember(req.Agent)
		}
		r := teamReply{Status: statusOK}
		for i, n := range req.Notes {
			dup, err := a.addNote(req.Agent, n)
			switch {
			case err != nil:
				if r.Refused == nil {
					r.Refused = map[int]string{}
				}
				r.Refused[i] = err.Error()
			case dup:
				r.Duplicates = append(r.Duplicates, i)
			}
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		r.Want = a.teamWants(req.Agent)
		return r
	case opStatus:
		var req statusRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return bad(fmt.Errorf("status: %w", err))
		}
		if !a.seeMember(req.Agent) {
			return notMember(req.Agent)
		}
		return a.memberStatus(req)
	case opPart:
		var req partRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return bad(fmt.Errorf("part: %w", err))
		}
		if !a.seeMember(req.Agent) {
			return notMember(req.Agent)
		}
		return a.memberPartReply(ctx, req)
	case opResume:
		var req resumeRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return teamReply{Status: statusBadState, Error: fmt.Sprintf("resume: %v", err)}
		}
		res, err := a.Resume(ctx, req.State, req.World)
		if err != nil {
			return teamReply{Status: statusOf(err), Error: err.Error()}
		}
		return teamReply{Status: statusOK, Resume: &res}
	}
	return bad(fmt.Errorf("unknown request %q", op))
}

func notMember(name string) teamReply {
	return teamReply{Status: statusNotMember, Error: fmt.Sprintf("agent %q has not joined", name)}
}

// seeMember notes a request of member name; false if it has not joined.
func (a *Reader) seeMember(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.team.members[name]
	if m != nil {
		m.seen = time.Now()
	}
	return m != nil
}

// addNote applies member's note of a chunk, a shard end or a failed shard.
func (a *Reader) addNote(member string, n chunkNote) (duplicate bool, err error) {
	ref := wire.ChunkRef{Job: a.job.Spec.ID, Epoch: n.Epoch, Shard: n.Shard, Chunk: n.Chunk}
	if n.Epoch < 0 || n.Epoch >= a.job.Spec.Epochs || n.Shard < 0 || n.Shard >= len(a.job.Shards) || n.Chunk >= maxChunksPerShard {
		return false, fmt.Errorf("note of %s: out of range", ref)
	}
	var out outcome
	switch {
	case n.Chunk >= 0:
		var sc *schema
		if n.Corrupt == "" && n.Rows > 0 {
			if sc, err = n.Schema.schema(); err != nil {
				return false, fmt.Errorf("chunk %s: %w", ref, err)
			}
		}
		_ = a.intake(ref, func() (outcome, error) {
			out, err = a.asm.addRemote(ref, member, n.firstRow(), n.Rows, sc, n.Corrupt)
			return out, err
		})
	case n.End != nil:
		ref.Chunk = -1
		_ = a.intake(ref, func() (outcome, error) {
			out, err = a.asm.end(ref, *n.End, false)
			return out, err
		})
	case n.Reason != "":
		a.addFailed(a.job.Task(n.Epoch, n.Shard), n.Reason)
	default:
		return false, fmt.Errorf("note of %s: neither a chunk, an end nor a failure", ref)
	}
	return out.duplicate && !out.heldThere, err
}

// memberStatus says which of a member's shards every rank's position has
// complete (the member settles their tasks) and whether it should take
// more tasks.
func (a *Reader) memberStatus(req statusRequest) teamReply {
	r := teamReply{Status: statusOK}
	a.mu.Lock()
	r.Want = a.teamWants(req.Agent)
	a.mu.Unlock()
	for _, h := range req.Held {
		if a.recorded.has(shardRef{h[0], h[1]}) {
			r.Complete = append(r.Complete, h)
		}
	}
	return r
}

// memberPartReply takes a member rank's next part, waiting up to
// partWait, and records it as handed out before answering.
func (a *Reader) memberPartReply(ctx context.Context, req partRequest) teamReply {
	ctx, cancel := context.WithTimeout(ctx, partWait)
	defer cancel()
	p, err := a.takeAndRecord(ctx, rankRequest{rank: req.Rank, world: req.World, dropLast: req.DropLast, agent: req.Agent})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return teamReply{Status: statusWait}
		}
		return teamReply{Status: statusOf(err), Error: err.Error()}
	}
	a.mu.Lock()
	sc := noteOf(a.asm.schema)
	a.mu.Unlock()
	n := &partNote{Epoch: p.Epoch, Step: p.Step, Last: p.Last, Failed: p.EpochFailed, World: p.World, Position: p.Position, Rows: len(p.Keys), Schema: sc}
	for _, s := range p.Spans {
		row := s.row
		n.Spans = append(n.Spans, spanNote{Shard: s.ref.Shard, Chunk: s.ref.Chunk, Lo: s.lo, N: s.n, Row: &row})
	}
	return teamReply{Status: statusOK, Part: n}
}

// statusOf is the team status of a reader's error.
func statusOf(err error) string {
	switch {
	case errors.Is(err, io.EOF):
		return statusEOF
	case errors.Is(err, ErrJobEnded):
		return statusEnded
	case errors.Is(err, ErrWorldMismatch):
		return statusMismatch
	case errors.Is(err, ErrBadState):
		return statusBadState
	case errors.Is(err, ErrResumeConflict):
		return statusConflict
	}
	return statusStopped
}

// errOf is the reader's error of a team status, for the member's caller.
func errOf(status, msg string) error {
	switch status {
	case statusEOF:
		return io.EOF
	case statusEnded:
		return fmt.Errorf("%w: %s", ErrJobEnded, msg)
	case statusMismatch:
		return fmt.Errorf("%w: the reader's planner says: %s", ErrWorldMismatch, msg)
	case statusBadState:
		return fmt.Errorf("%w: the reader's planner says: %s", ErrBadState, msg)
	case statusConflict:
		return fmt.Errorf("%w: the reader's planner says: %s", ErrResumeConflict, msg)
	}
	return fmt.Errorf("%w: the reader's planner says: %s", ErrStopped, msg)
}
