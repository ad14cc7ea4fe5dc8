package traineragent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/traineragent/internal/teamproto"
	"github.com/sluice-project/sluice/wire"
)

// role is what tells a reader's three kinds apart; everything else about
// a reader (its state, lock, stats, HTTP API) is the same for all three:
//
//   - solo: a lone agent serves every rank; it forms the steps
//     (soloSteps), keeps the position and hands out every part;
//   - planner: the agent serving rank 0 of a team (agents serving some
//     ranks each, one per node): as solo, with the team's step policy
//     (teamSteps) and the team's requests answered (teamserve.go);
//   - memberRole: another agent of a team: it keeps its chunks' bytes,
//     tells the planner of them, and asks it for its ranks' parts
//     (teamproto.Member); the planner keeps the position.
//
// A role is chosen once, by New, from Options.Ranks.
type role interface {
	// open loads where the reader starts from: its recorded position
	// (a member has none: its planner keeps it).
	open(ctx context.Context, js jetstream.JetStream) error
	// dispatching tells the role the agent's dispatcher, once it runs.
	dispatching(d *dispatch.Dispatcher)
	// start starts the role's background work on bg until ctx ends;
	// stop, called when the agent's run ends (before ctx is cancelled),
	// releases what start took.
	start(ctx context.Context, nc *nats.Conn, bg *sync.WaitGroup) (stop func(), err error)
	// nextPart returns rank req.rank's next part (Reader.nextPart).
	nextPart(ctx context.Context, req readerstate.RankRequest) (readerstate.RankPart, error)
	// resume rewinds the reader to a trainer's state (Reader.Resume).
	resume(ctx context.Context, req readerstate.ResumeRequest) (ResumeResult, error)
	// done reports whether every rank this agent serves got every step
	// of every epoch and its end (handedOut: every step); s is the
	// reader's state, its lock held.
	done(s *readerstate.State) bool
	handedOut(s *readerstate.State) bool
	// finish records the reader as delivered: its position, and its
	// done key (a member: nothing, its planner does).
	finish(ctx context.Context) error
	// chunk and end take a shard's output: a chunk, its end, or (end
	// nil) its failure for good.
	chunk(task wire.ShardTask, index int, data []byte) error
	end(task wire.ShardTask, end *wire.ShardEnd, reason string)
	// buffer is what the output buffer's gates see of the reader: the
	// bytes it holds, whether it wants more tasks taken, and whether its
	// ranks wait for rows it lacks (buffer.go).
	buffer() (held int64, wants, starved bool)
}

// solo is the role of a reader served by one agent.
type solo struct{ *Reader }

func (a solo) open(ctx context.Context, js jetstream.JetStream) error { return a.loadPosition(ctx, js) }

func (solo) dispatching(*dispatch.Dispatcher) {}

func (a solo) start(ctx context.Context, _ *nats.Conn, bg *sync.WaitGroup) (func(), error) {
	bg.Go(func() { a.keepAlive(ctx) })
	return func() {}, nil
}

func (a solo) nextPart(ctx context.Context, req readerstate.RankRequest) (readerstate.RankPart, error) {
	p, err := a.takeAndRecord(ctx, req)
	if err != nil || p.Spans == nil {
		return p, err
	}
	return a.cutPart(ctx, p)
}

func (a solo) resume(ctx context.Context, req readerstate.ResumeRequest) (ResumeResult, error) {
	return a.resumeHere(ctx, req, "")
}

func (solo) done(s *readerstate.State) bool      { return s.Done() }
func (solo) handedOut(s *readerstate.State) bool { return s.HandedOut() }

func (a solo) finish(ctx context.Context) error {
	if err := a.sync(ctx, false); err != nil {
		return err
	}
	return a.writeDone(ctx)
}

func (a solo) chunk(task wire.ShardTask, index int, data []byte) error {
	return a.addChunk(task, index, data)
}

func (a solo) end(task wire.ShardTask, end *wire.ShardEnd, reason string) {
	if end == nil {
		a.addFailed(task, reason)
		return
	}
	a.addEnd(task, *end)
}

func (a solo) buffer() (held int64, wants, starved bool) {
	a.mu.Lock()
	held, prod := a.st.Asm.HeldBytes, a.producer
	wants, starved = a.st.Pull()
	a.mu.Unlock()
	return held + prod.HeldBytes(), wants, starved
}

// planner is the role of the agent that plans a team's steps (rank 0's).
type planner struct {
	solo
	team *team
}

func (a planner) start(ctx context.Context, nc *nats.Conn, bg *sync.WaitGroup) (func(), error) {
	sub, err := a.serveTeam(ctx, nc)
	if err != nil {
		return nil, err
	}
	bg.Go(func() { a.keepAlive(ctx) })
	return func() { _ = sub.Unsubscribe() }, nil
}

func (a planner) resume(ctx context.Context, req readerstate.ResumeRequest) (ResumeResult, error) {
	return a.resumeFor(ctx, req, "")
}

// resumeFor is the planner's resume of a rank of agent (a member that
// forwarded it; "": the planner's own).
func (a planner) resumeFor(ctx context.Context, req readerstate.ResumeRequest, agent string) (ResumeResult, error) {
	world := req.World
	if world == 0 {
		world = req.State.WorldSize
	}
	// The team's size, fixed when it started (holders' length): the
	// ranks' world is not read here, since a concurrent resume's rewind
	// zeroes it for a moment (reproduction 7 of issue 24).
	if n := len(a.team.Holders); world != n {
		return ResumeResult{}, fmt.Errorf("%w: world size %d, but the reader's team serves %d ranks: start its agents with --world-size %d and their --ranks",
			readerstate.ErrBadState, world, n, world)
	}
	req.World = world
	return a.resumeHere(ctx, req, agent)
}

// memberRole is the role of a team's agent that does not plan.
type memberRole struct {
	*Reader
	m *teamproto.Member
}

func (a memberRole) open(context.Context, jetstream.JetStream) error {
	a.mu.Lock()
	defer a.unlock()
	return a.st.Load(nil, time.Now()) // the planner keeps the position
}

func (a memberRole) dispatching(d *dispatch.Dispatcher) {
	a.m.Dispatching(d.Settle, a.arrived)
}

func (a memberRole) start(ctx context.Context, _ *nats.Conn, bg *sync.WaitGroup) (func(), error) {
	bg.Go(func() { a.m.KeepStatus(ctx) })
	bg.Go(func() { a.m.KeepNotes(ctx) })
	return a.m.Stop, nil
}

func (a memberRole) done(s *readerstate.State) bool      { return s.RanksEnded(a.m.ServedRanks()) }
func (a memberRole) handedOut(s *readerstate.State) bool { return s.RanksEnded(a.m.ServedRanks()) }

func (memberRole) finish(context.Context) error { return nil } // the planner records the reader

func (a memberRole) chunk(task wire.ShardTask, index int, data []byte) error {
	return a.m.Chunk(task, index, data)
}

func (a memberRole) end(task wire.ShardTask, end *wire.ShardEnd, reason string) {
	a.m.End(task, end, reason) // settled once the planner's position has it
}

// buffer: the chunks it stores; it wants more, and its ranks wait, when
// the planner wants its rows.
func (a memberRole) buffer() (held int64, wants, starved bool) {
	held, wants = a.m.Buffer()
	return held, wants, wants
}

// nextPart is a member's: the planner's part for the rank, cut here; the
// wait counts as the trainer's.
func (a memberRole) nextPart(ctx context.Context, req readerstate.RankRequest) (readerstate.RankPart, error) {
	m := a.m
	req, err := m.Serves(req)
	if err != nil {
		return readerstate.RankPart{}, err
	}
	a.mu.Lock()
	a.st.Block(time.Now())
	a.unlock()
	p, err := m.Part(ctx, req, func() *teamproto.Producer {
		// A rank may ask before the agent dispatches: wait for it (the
		// poll outlives the request: the member's run, not ctx).
		_ = a.waitFor(m.Running(), func() bool { return a.producer != nil || a.st.RunEnded })
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.producer
	})
	now := time.Now()
	a.mu.Lock()
	defer a.unlock()
	a.st.Unblock(now)
	if errors.Is(err, io.EOF) {
		if a.st.RankEnded(req.Rank) && a.st.RanksEnded(m.ServedRanks()) {
			// The planner recorded every step before it told a rank
			// the end: every shard is complete. (Settled before the
			// agent sees it is done and returns what it holds.)
			m.SettleAll()
		}
		return readerstate.RankPart{}, err
	}
	if err != nil {
		if len(p.Keys) > 0 {
			a.st.Lost(p, err) // the planner counts the part as handed out
		}
		return readerstate.RankPart{}, err
	}
	a.st.Delivered(req.Rank, p, now)
	go m.DropSettled(a.st.SlowestEpoch(m.ServedRanks()))
	return p, nil
}

// resume is a member's: it forwards a rank's resume to the planner, which
// writes the position (its write's timeout, and some).
func (a memberRole) resume(ctx context.Context, req readerstate.ResumeRequest) (ResumeResult, error) {
	return a.m.Resume(ctx, req, positionWriteTimeout+10*time.Second)
}
