package traineragent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/internal/ratelog"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/traineragent/internal/teamproto"
	"github.com/sluice-project/sluice/wire"
)

// serveTeam answers the team's requests for this reader (its planner)
// until ctx ends. Each request's envelope is checked in the subscription's
// callback, before its body is read; a request that passes runs in its
// own goroutine, within the bounds of its member's requests in progress
// (joins: teamproto.MaxJoins), so the goroutines are bounded by the members. What
// waits beyond is NATS's pending limit (a slow consumer drops it).
func (a planner) serveTeam(ctx context.Context, nc *nats.Conn) (*nats.Subscription, error) {
	subj := wire.TeamSubject(a.job.Spec.ID, a.reader, "*")
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) { a.admitTeam(ctx, m) })
	if err != nil {
		return nil, fmt.Errorf("serving reader %s's team on %s: %w", a.reader, subj, err)
	}
	if err := sub.SetPendingLimits(1<<14, 64<<20); err != nil {
		return nil, fmt.Errorf("serving reader %s's team: %w", a.reader, err)
	}
	return sub, nil
}

// admitTeam checks a team request's envelope and its sender's session,
// and answers it within the sender's bounds.
func (a planner) admitTeam(ctx context.Context, m *nats.Msg) {
	t := a.team
	op := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	h, err := t.auth.Open(m, teamproto.KindRequest, op)
	if err != nil {
		a.refuseTeam(m, op, h.Member, "auth", err)
		return
	}
	if len(m.Data) > teamproto.MaxTeamRequest {
		a.refuseTeam(m, op, h.Member, "size", fmt.Errorf("%w: %d bytes: want at most %d", teamproto.ErrAuth, len(m.Data), teamproto.MaxTeamRequest))
		return
	}
	if op == wire.TeamOpJoin {
		select {
		case t.joins <- struct{}{}:
		default:
			a.respondTeam(m, h, wire.TeamReply{Status: teamproto.StatusBusy, Error: "too many joins in progress"})
			return
		}
		go func() {
			defer func() { <-t.joins }()
			a.respondTeam(m, h, a.teamJoin(h, m.Data))
		}()
		return
	}
	a.mu.Lock()
	mem, refusal := t.admit(h, time.Now())
	a.mu.Unlock()
	if refusal != nil {
		if refusal.Status == teamproto.StatusNotMember {
			t.refused.Add(1)
			a.m.teamRefused.Inc()
		}
		a.respondTeam(m, h, *refusal)
		return
	}
	go func() {
		r := a.teamRequest(ctx, op, h.Member, m.Data)
		a.mu.Lock()
		t.done(mem)
		a.mu.Unlock()
		a.respondTeam(m, h, r)
	}()
}

// refuseTeam answers a request whose envelope failed, unsigned (its sender
// may not be of the job), counts it and logs it (at most once a second
// per reason, the next line counting those left out: a flood must not
// flood the log).
func (a planner) refuseTeam(m *nats.Msg, op, member, reason string, err error) {
	t := a.team
	n := t.refused.Add(1)
	a.m.teamRefused.Inc()
	if why := teamproto.NodeRefusal(err, teamproto.KindRequest); why != "" {
		a.m.nodeRefused.WithLabelValues(why).Inc()
		reason = why
	}
	if ok, left := t.logs.Allow(reason, time.Now()); ok {
		a.log.Warn("refused a team message", "op", readerstate.CutText(op), "member", readerstate.CutText(member), "reason", reason,
			"refused_total", n, "unlogged_since", left, "err", err)
	}
	if m.Reply == "" {
		return
	}
	out := nats.NewMsg(m.Reply)
	out.Header.Set(wire.TeamHeaderRefused, err.Error())
	_ = m.RespondMsg(out)
}

// respondTeam answers request h with r, sealed.
func (a planner) respondTeam(m *nats.Msg, h teamproto.Head, r wire.TeamReply) {
	r.Planner = a.team.id
	data, err := json.Marshal(r)
	if err == nil {
		out := nats.NewMsg(m.Reply)
		out.Data = data
		h.Planner = a.team.id
		a.team.auth.Seal(out, teamproto.KindReply, h)
		err = m.RespondMsg(out)
	}
	if err != nil {
		a.log.Warn("answering a member", "op", h.Op, "err", err)
	}
}

// teamJoin answers a join of member h.member, whose h.session is its nonce.
func (a planner) teamJoin(h teamproto.Head, data []byte) wire.TeamReply {
	var req wire.TeamJoin
	if err := json.Unmarshal(data, &req); err != nil {
		return wire.TeamReply{Status: teamproto.StatusMismatch, Error: fmt.Sprintf("join: %v", err)}
	}
	a.mu.Lock()
	defer a.unlock()
	session, err := a.team.JoinMember(a.st, h.Member, h.Session, req.Ranks, req.World, req.DropLast, time.Now())
	switch {
	case errors.Is(err, readerstate.ErrNameTaken):
		a.team.refused.Add(1)
		a.m.teamRefused.Inc()
		a.log.Warn("refused a join under a live member's name", "agent", readerstate.CutText(h.Member), "err", err)
		return wire.TeamReply{Status: teamproto.StatusTaken, Error: err.Error()}
	case err != nil:
		return wire.TeamReply{Status: teamproto.StatusMismatch, Error: err.Error()}
	}
	return wire.TeamReply{Status: teamproto.StatusOK, Session: session}
}

func (a planner) teamRequest(ctx context.Context, op, member string, data []byte) wire.TeamReply {
	bad := func(err error) wire.TeamReply {
		return wire.TeamReply{Status: teamproto.StatusMismatch, Error: err.Error()}
	}
	switch op {
	case wire.TeamOpNotes:
		var req wire.TeamNotes
		if err := json.Unmarshal(data, &req); err != nil {
			return bad(fmt.Errorf("notes: %w", err))
		}
		if len(req.Notes) > teamproto.MaxNotes {
			return bad(fmt.Errorf("notes: %d in one request: want at most %d", len(req.Notes), teamproto.MaxNotes))
		}
		r := wire.TeamReply{Status: teamproto.StatusOK}
		for i, n := range req.Notes {
			dup, deferred, err := a.addNote(member, n)
			switch {
			case err != nil:
				if r.Refused == nil {
					r.Refused = map[int]string{}
				}
				r.Refused[i] = err.Error()
			case deferred:
				r.Deferred = append(r.Deferred, i)
			case dup:
				r.Duplicates = append(r.Duplicates, i)
			}
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		r.Want = a.team.Wants(a.st, member)
		return r
	case wire.TeamOpStatus:
		var req wire.TeamStatus
		if err := json.Unmarshal(data, &req); err != nil {
			return bad(fmt.Errorf("status: %w", err))
		}
		if len(req.Held) > a.job.Spec.Epochs*len(a.job.Shards) {
			return bad(fmt.Errorf("status: %d shards held: the job has %d", len(req.Held), a.job.Spec.Epochs*len(a.job.Shards)))
		}
		return a.memberStatus(member, req)
	case wire.TeamOpPart:
		var req wire.TeamPartRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return bad(fmt.Errorf("part: %w", err))
		}
		return a.memberPartReply(ctx, member, req)
	case wire.TeamOpResume:
		var req wire.TeamResume
		var st State
		if err := json.Unmarshal(data, &req); err != nil {
			return wire.TeamReply{Status: teamproto.StatusBadState, Error: fmt.Sprintf("resume: %v", err)}
		}
		if err := json.Unmarshal(req.State, &st); err != nil {
			return wire.TeamReply{Status: teamproto.StatusBadState, Error: fmt.Sprintf("resume: the state: %v", err)}
		}
		if len(req.ID) > readerstate.MaxResumeID {
			return wire.TeamReply{Status: teamproto.StatusBadState, Error: fmt.Sprintf("resume: an id of %d bytes: want at most %d", len(req.ID), readerstate.MaxResumeID)}
		}
		if err := readerstate.CheckGeneration(req.Generation); err != nil {
			return wire.TeamReply{Status: teamproto.StatusBadState, Error: fmt.Sprintf("resume: %v", err)}
		}
		res, err := a.resumeFor(ctx, readerstate.ResumeRequest{State: st, World: req.World, Rank: req.Rank, Token: req.Generation, ID: req.ID}, member)
		if err != nil {
			return wire.TeamReply{Status: teamproto.StatusOf(err), Error: err.Error()}
		}
		a.mu.Lock()
		gen := a.st.Gens.N
		a.mu.Unlock()
		out, err := json.Marshal(res)
		if err != nil {
			return wire.TeamReply{Status: teamproto.StatusStopped, Error: err.Error()}
		}
		return wire.TeamReply{Status: teamproto.StatusOK, Resume: out, Gen: gen}
	}
	return bad(fmt.Errorf("unknown request %.32q", op))
}

// addNote applies member's note of a chunk, a shard end or a failed
// shard: deferred (not applied) when the member holds too much at the
// planner already.
func (a planner) addNote(member string, n wire.TeamNote) (duplicate, deferred bool, err error) {
	ref := wire.ChunkRef{Job: a.job.Spec.ID, Epoch: n.Epoch, Shard: n.Shard, Chunk: n.Chunk}
	if n.Epoch < 0 || n.Epoch >= a.job.Spec.Epochs || n.Shard < 0 || n.Shard >= len(a.job.Shards) || n.Chunk >= assembly.MaxChunksPerShard || n.Chunk < -1 {
		return false, false, fmt.Errorf("note of %s: out of range", ref)
	}
	var out assembly.Outcome
	switch {
	case n.Chunk >= 0:
		var sc *assembly.Schema
		if n.Corrupt == "" && n.Rows != 0 {
			if sc, err = teamproto.SchemaOf(n.Schema); err != nil {
				return false, false, fmt.Errorf("chunk %s: %w", ref, err)
			}
		}
		if n.Rows < 0 || sc != nil && n.Rows > teamproto.RowBound(sc, a.chunkMax()) {
			return false, false, fmt.Errorf("chunk %s: %d rows: a chunk of this schema within %d bytes has at most %d", ref, n.Rows, a.chunkMax(), teamproto.RowBound(sc, a.chunkMax()))
		}
		corrupt := readerstate.CutText(n.Corrupt)
		a.mu.Lock()
		deferred = !a.team.MemberRoom(a.st, member, n.Rows)
		a.mu.Unlock()
		if deferred {
			return false, true, nil
		}
		out, err = a.intake(ref, func(st *readerstate.State) (assembly.Outcome, error) {
			return a.team.AddRemote(st, ref, member, teamproto.NoteFirstRow(n), n.Rows, sc, corrupt)
		})
	case n.End != nil:
		ref.Chunk = -1
		end := *n.End
		if end.Job != "" && end.Job != a.job.Spec.ID || end.Epoch != n.Epoch || end.Shard != n.Shard {
			return false, false, fmt.Errorf("end of %s names job %.64q epoch %d shard %d", ref, end.Job, end.Epoch, end.Shard)
		}
		// An end that says fewer samples than rows came keeps those rows
		// and reports it (assembler.end): nothing is lost to it, and a
		// member's end of a retry may say less than an earlier send gave
		// (an object rewritten), so it is not refused either.
		out, err = a.intake(ref, func(st *readerstate.State) (assembly.Outcome, error) { return st.Asm.End(ref, end, false) })
	case n.Reason != "":
		a.addFailed(a.job.Task(n.Epoch, n.Shard), readerstate.CutText(n.Reason))
	default:
		return false, false, fmt.Errorf("note of %s: neither a chunk, an end nor a failure", ref)
	}
	return out.Duplicate && !out.HeldThere, false, err
}

// admit checks request h's sender against the members that joined, and
// counts it in progress (the caller's busy-- ends it), unless refused.
func (t *team) admit(h teamproto.Head, now time.Time) (*readerstate.TeamMember, *wire.TeamReply) {
	mem := t.Members[h.Member]
	switch {
	case mem == nil || mem.Session != h.Session:
		r := teamproto.NotMember(h.Member)
		return nil, &r
	case !mem.Seqs.Accept(h.Seq):
		return nil, &wire.TeamReply{Status: teamproto.StatusNotMember, Error: fmt.Sprintf("a copy of request %d of agent %q", h.Seq, h.Member)}
	case mem.Busy >= teamproto.MaxMemberRequests+2*mem.Ranks:
		return nil, &wire.TeamReply{Status: teamproto.StatusBusy, Error: fmt.Sprintf("agent %q has %d requests in progress", h.Member, mem.Busy)}
	}
	mem.Busy++
	mem.Seen = now
	return mem, nil
}

// done ends a request admit admitted.
func (t *team) done(mem *readerstate.TeamMember) { mem.Busy-- }

// chunkMax is the job's chunk size limit.
func (a planner) chunkMax() int {
	if n := a.job.Spec.ChunkMaxBytes; n > 0 {
		return int(n)
	}
	return wire.DefaultChunkMaxBytes
}

// memberStatus says which of a member's shards every rank's position has
// complete (the member settles their tasks) and whether it should take
// more tasks.
func (a planner) memberStatus(member string, req wire.TeamStatus) wire.TeamReply {
	r := wire.TeamReply{Status: teamproto.StatusOK}
	a.mu.Lock()
	r.Want = a.team.Wants(a.st, member)
	a.mu.Unlock()
	for _, h := range req.Held {
		if a.recorded.Has(assembly.ShardRef{Epoch: h[0], Shard: h[1]}) {
			r.Complete = append(r.Complete, h)
		}
	}
	return r
}

// memberPartReply takes a member rank's next part, waiting up to
// teamproto.PartWait, and records it as handed out before answering.
func (a planner) memberPartReply(ctx context.Context, member string, req wire.TeamPartRequest) wire.TeamReply {
	ctx, cancel := context.WithTimeout(ctx, teamproto.PartWait)
	defer cancel()
	// A part goes only to a request of the member's current session and
	// generation of ranks: one from before a resume or a re-join may have
	// lost its requester (a trainer or a member agent restarted), and the
	// part would be lost with it. Such a request is told to ask again.
	a.mu.Lock()
	superseded := a.team.Ticket(a.st, member)
	a.mu.Unlock()
	if superseded == nil {
		return teamproto.NotMember(member)
	}
	p, err := a.takeAndRecord(ctx, readerstate.RankRequest{Rank: req.Rank, World: req.World, DropLast: req.DropLast, Agent: member, Superseded: superseded})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, readerstate.ErrSuperseded) {
			return wire.TeamReply{Status: teamproto.StatusWait}
		}
		return wire.TeamReply{Status: teamproto.StatusOf(err), Error: err.Error()}
	}
	a.mu.Lock()
	sc := teamproto.NoteOf(a.st.Asm.Schema)
	a.mu.Unlock()
	n := &wire.TeamPart{Epoch: p.Epoch, Step: p.Step, Last: p.Last, Failed: p.EpochFailed, World: p.World, Position: p.Position, Rows: len(p.Keys), Schema: sc, Gen: p.Gen}
	for _, s := range p.Spans {
		row := s.Row
		n.Spans = append(n.Spans, wire.TeamSpan{Shard: s.Ref.Shard, Chunk: s.Ref.Chunk, Lo: s.Lo, N: s.N, Row: &row})
	}
	return wire.TeamReply{Status: teamproto.StatusOK, Part: n}
}

// team is the planner's side of its reader's team: what answers the
// members over NATS (teamserve.go). Its bookkeeping, readerstate.TeamState, is part
// of the reader's state.
type team struct {
	*readerstate.TeamState
	// id names this planner's run: members that see another id re-join
	// and announce again the chunks they hold.
	id   string
	auth *teamproto.Auth
	// joins bounds the joins in progress.
	joins chan struct{}
	// refused counts team messages refused (envelope, session, copies,
	// joins under a live member's name); logs bounds their log lines.
	// logged (unix ns).
	refused atomic.Int64
	logs    ratelog.Limiter
}

func newTeam(world int, own []int, auth *teamproto.Auth) *team {
	return &team{TeamState: readerstate.NewTeamState(world, own), id: newTeamID(), auth: auth, joins: make(chan struct{}, teamproto.MaxJoins)}
}

func newTeamID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
