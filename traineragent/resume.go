package traineragent

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

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
//
// generation names the trainer's run the rank is of (every rank of one
// launch the same; "" when the client has none): a resume naming another
// run than the current generation's starts a new one, whichever ranks
// resumed before.
func (a *Reader) Resume(ctx context.Context, st State, world, rank int, generation string) (ResumeResult, error) {
	if err := readerstate.CheckGeneration(generation); err != nil {
		return ResumeResult{}, err
	}
	return a.role.resume(ctx, readerstate.ResumeRequest{State: st, World: world, Rank: rank, Token: generation})
}

// resumeHere is Resume on the agent that keeps the reader's position (a
// lone agent, a team's planner); agent is the member that forwarded it
// ("": this agent's own rank).
func (a *Reader) resumeHere(ctx context.Context, req readerstate.ResumeRequest, agent string) (ResumeResult, error) {
	st, world := req.State, req.World
	p, err := a.checkState(st)
	if err != nil {
		return ResumeResult{}, err
	}
	if world == 0 {
		world = st.WorldSize
	}
	if world < 1 || world > readerstate.MaxWorldSize {
		return ResumeResult{}, fmt.Errorf("%w: world size %d: want 1..%d", readerstate.ErrBadState, world, readerstate.MaxWorldSize)
	}
	if req.Rank < 0 || req.Rank >= world {
		return ResumeResult{}, fmt.Errorf("%w: rank %d: want 0..%d (world size %d)", readerstate.ErrBadState, req.Rank, world-1, world)
	}
	req.World = world
	fresh := assembly.NewAssembler(a.job)
	if err := fresh.Restore(p); err != nil {
		return ResumeResult{}, fmt.Errorf("%w: %w", readerstate.ErrBadState, err)
	}
	if err := a.lockForResume(ctx); err != nil {
		return ResumeResult{}, err
	}
	if result, answered, err := a.st.AnswerResume(req, agent); answered {
		a.unlockResume()
		return result, err
	}
	result, replay, err := a.st.Rewind(req, world, fresh, a.pos.recorded, time.Now())
	a.unlockResume()
	switch {
	case err != nil:
		return result, err
	case replay == nil:
		// Nothing to rewind: the reader is claimed all the same.
		if err := a.claim(context.WithoutCancel(ctx)); err != nil {
			err = fmt.Errorf("recording the resumed position of reader %s: %w", a.reader, err)
			a.stop(err)
			return ResumeResult{}, fmt.Errorf("%w: %w", readerstate.ErrStopped, err)
		}
		return result, nil
	}
	a.log.Info("resuming from a trainer's checkpoint", "epoch", st.Epoch, "step", st.Step, "rank", req.Rank,
		"world_size", world, "checkpoint_world_size", st.WorldSize, "replay_epochs", len(replay))
	return a.recordResume(ctx, req, p, replay, result)
}

// lockForResume waits for the recorded position, and for a concurrent
// resume (every rank sends one) to finish, and returns with a.pos.mu and
// a.mu held: no write (and no ack after it) while the position is
// compared and rewound, so what was acked is what the recorded position
// holds.
func (a *Reader) lockForResume(ctx context.Context) error {
	for {
		if err := a.waitFor(ctx, func() bool { return a.st.RunEnded || a.st.Loaded && !a.st.Resuming }); err != nil {
			return err
		}
		a.mu.Lock()
		unloaded, err := a.pos == nil, a.st.Stopped()
		a.unlock()
		if unloaded {
			return err // the run ended before the position was read: there is none to rewind
		}
		a.pos.mu.Lock()
		a.mu.Lock()
		if !a.st.Resuming {
			return nil
		}
		a.unlockResume()
	}
}

func (a *Reader) unlockResume() {
	a.unlock()
	a.pos.mu.Unlock()
}

// recordResume writes the rewound position (p, with the shards being
// replayed: an agent that crashes now leaves a position that sends them
// again), then asks for the replay. It finishes even if the client goes
// away: the memory is rewound already.
func (a *Reader) recordResume(ctx context.Context, req readerstate.ResumeRequest, p assembly.Position, replay map[int][]int, result ResumeResult) (ResumeResult, error) {
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
		a.st.ResumeDone(nil)
		a.unlock()
		return ResumeResult{}, fmt.Errorf("%w: %w", readerstate.ErrStopped, err)
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
	a.st.ResumeDone(&readerstate.ResumeRecord{State: req.State, World: req.World, Token: req.Token, Result: result})
	a.unlock()
	a.log.Info("resumed", "replayed_shards", result.ReplayedShards)
	return result, nil
}

// checkState validates st against the agent's job and reader and returns
// its position (the start of the job for null).
func (a *Reader) checkState(st State) (assembly.Position, error) {
	switch {
	case st.Version != readerstate.StateVersion:
		return assembly.Position{}, fmt.Errorf("%w: version %d: this agent reads %d", readerstate.ErrBadState, st.Version, readerstate.StateVersion)
	case st.Job != "" && st.Job != a.job.Spec.ID:
		return assembly.Position{}, fmt.Errorf("%w: a state of job %q, this agent reads %q", readerstate.ErrBadState, st.Job, a.job.Spec.ID)
	case st.Reader != "" && st.Reader != a.reader:
		return assembly.Position{}, fmt.Errorf("%w: a state of reader %q, this agent is %q", readerstate.ErrBadState, st.Reader, a.reader)
	case st.Epoch < 0 || st.Step < 0 || st.WorldSize < 0 || st.WorldSize > readerstate.MaxWorldSize:
		return assembly.Position{}, fmt.Errorf("%w: epoch %d step %d world size %d: want >= 0 (world size at most %d)", readerstate.ErrBadState, st.Epoch, st.Step, st.WorldSize, readerstate.MaxWorldSize)
	}
	raw, err := readerstate.PositionJSON(st.Position)
	if err != nil {
		return assembly.Position{}, fmt.Errorf("%w: position: %w", readerstate.ErrBadState, err)
	}
	if bytes.Equal(raw, []byte("null")) {
		return assembly.Position{Version: assembly.PositionVersion, Submitted: a.st.Submitted()}, nil
	}
	p, err := assembly.DecodePosition(raw)
	if err != nil {
		return assembly.Position{}, fmt.Errorf("%w: %w", readerstate.ErrBadState, err)
	}
	if p.Submitted != a.st.Submitted() {
		return assembly.Position{}, fmt.Errorf("%w: a state of the job submitted at %q, this one was submitted at %q",
			readerstate.ErrBadState, p.Submitted, a.st.Submitted())
	}
	return p, nil
}
