package traineragent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// TestTeamFastTrainerRestart (reproduction 1): the trainer is killed while
// a member's rank waits for its part at the planner, and a new generation
// resumes at once. The member's request to the planner outlived the
// trainer's and took the new generation's first part for a requester that
// was gone: 16 samples lost, the member's ranks a step ahead. Every sample
// must reach one rank once, in equal steps.
func TestTeamFastTrainerRestart(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("fastrestart", 2, 2, teamLayout)
	f := newFunction(t, job, teamLayout)
	f.hold = make(chan struct{}) // no output yet: the rank's request waits at the planner
	e.submit(t, job, f, 2)
	ranks := [][]int{{0, 1}, {2, 3}}
	agents, waits := startTeam(t, e, job, 4, ranks, 0, false)

	asked := make(chan struct{}, 64)
	spy, err := e.nc.Subscribe(wire.TeamSubject(job.Spec.ID, wire.DefaultReader, "part"), func(*nats.Msg) {
		select {
		case asked <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, kill := context.WithCancel(context.Background())
	died := make(chan error, 1)
	go func() {
		_, err := agents[1].readers[0].nextPart(ctx, readerstate.RankRequest{Rank: 2, World: 4})
		died <- err
	}()
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the member never asked the planner for rank 2's part")
	}
	_ = spy.Unsubscribe()
	kill() // the trainer dies
	if err := <-died; !errors.Is(err, context.Canceled) {
		t.Fatalf("the dead rank's request: %v", err)
	}

	// The new generation resumes from the start (its checkpoint saw no
	// step), on every agent, then takes every step.
	state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 4}
	var wg sync.WaitGroup
	errs := make([]error, len(agents))
	for i := range agents {
		wg.Go(func() { _, errs[i] = resumeAgent(context.Background(), agents[i], state, 4) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	close(f.hold)
	parts := takeTeam(t, agents, ranks, 4, -1)
	checkSteps(t, parts, 2, [2]int{0, 0})
	fixture.CheckEveryOnce(t, job, teamLayout, seen(nil, parts), 0)
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
	}
}

// TestTeamResumesWhileTheOldPlannerStops (reproduction 7): a 2 x 2 -> 3 x 1
// resume while the old team's planner still runs (it stops slowly under
// load): the new members' requests reached both planners, and the first
// answer won: "the reader's planner says: bad trainer state: world size 3,
// but the reader's team serves 4 ranks". A member must take only the
// answers of the planner it joined.
func TestTeamResumesWhileTheOldPlannerStops(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("oldplanner", 2, 2, teamLayout)
	f := newFunction(t, job, teamLayout)
	e.submit(t, job, f, 2)

	oldRanks := [][]int{{0, 1}, {2, 3}}
	oldCtx, stopOld := context.WithCancel(context.Background())
	defer stopOld()
	var oldRuns sync.WaitGroup
	var old []*Agent
	for i, rs := range oldRanks {
		o := teamOptions(fmt.Sprintf("old%d", i), 4, rs)
		// No position written by the old planner once the new one runs (a
		// second writer of the reader stops the other, as it should).
		o.KeepAliveInterval = time.Hour
		a, err := New(e.nc, e.js, keyed(job), o, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, a)
		oldRuns.Go(func() { _ = a.Run(oldCtx) })
	}
	kept := takeTeam(t, old, oldRanks, 4, 2)
	last := kept[0][1]
	state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader,
		Epoch: last.Epoch, Step: last.Step + 1, WorldSize: 4, Position: last.Position}

	// The new layout starts and resumes while the old team still runs.
	ranks, agents, waits, err := resumeThreeByOne(t, e, job, state)
	if err != nil {
		t.Fatalf("resuming 3 x 1 while the old planner runs: %v", err)
	}
	stopOld()
	oldRuns.Wait()
	rest := takeTeam(t, agents, ranks, 3, -1)
	checkSteps(t, rest, 2, [2]int{last.Epoch, last.Step + 1})
	fixture.CheckEveryOnce(t, job, teamLayout, seen(seen(nil, kept), rest), 0)
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
	}
}

// TestTeamDropsAPartOfAnEarlierGeneration: a member's rank asks and its
// trainer goes away at once; the member's poll then gets the part, which
// no request takes before a new generation resumes: the resume rewound
// it, so the new generation must not get it (its first step would be
// the old one's).
func TestTeamDropsAPartOfAnEarlierGeneration(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("stalepart", 2, 2, teamLayout)
	e.submit(t, job, newFunction(t, job, teamLayout), 2)
	ranks := [][]int{{0, 1}, {2, 3}}
	agents, waits := startTeam(t, e, job, 4, ranks, 0, false)
	m := agents[1].readers[0].role.(memberRole).m
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := agents[1].readers[0].nextPart(gone, readerstate.RankRequest{Rank: 2, World: 4}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a request of a trainer gone: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pl := m.PollOf(2)
		if pl == nil {
			t.Fatal("no poll for rank 2")
		}
		select {
		case <-pl.Done:
		case <-time.After(time.Until(deadline)):
			t.Fatal("rank 2's poll got no part")
		}
		if pl.Err != nil {
			t.Fatal(pl.Err)
		}
		break
	}
	state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 4}
	var wg sync.WaitGroup
	errs := make([]error, len(agents))
	for i := range agents {
		wg.Go(func() { _, errs[i] = resumeAgent(context.Background(), agents[i], state, 4) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	parts := takeTeam(t, agents, ranks, 4, -1)
	checkSteps(t, parts, 2, [2]int{0, 0})
	fixture.CheckEveryOnce(t, job, teamLayout, seen(nil, parts), 0)
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
	}
}

// TestTeamConcurrentResumes (reproduction 7, the race within the new
// team): the ranks of a 3 x 1 team resume at once, again and again, each
// after a step: a member's resume forwarded to the planner read the
// ranks' world size without the lock while the planner's own rank's
// resume rewound it ("world size 4, but the reader's team serves 0
// ranks", seen in TestTeamRandomRestarts).
func TestTeamConcurrentResumes(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("concresume", 20, 2, teamLayout)
	e.submit(t, job, newFunction(t, job, teamLayout), 2)
	ranks := [][]int{{0}, {1}, {2}}
	agents, _ := startTeam(t, e, job, 3, ranks, 0, false)
	state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 3}
	for round := range 40 {
		var wg sync.WaitGroup
		errs := make([]error, len(agents))
		for i := range agents {
			wg.Go(func() { _, errs[i] = resumeAgent(context.Background(), agents[i], state, 3) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		parts := takeTeam(t, agents, ranks, 3, 1)
		last := parts[0][0]
		state = State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader,
			Epoch: last.Epoch, Step: last.Step + 1, WorldSize: 3, Position: last.Position}
		if last.Last {
			state.Epoch, state.Step = last.Epoch+1, 0
		}
	}
}

// resumeThreeByOne starts the new layout of a change of ranks, three
// agents of one rank each (new0..new2), and resumes each one's reader from
// state at once; waits end the agents' runs.
func resumeThreeByOne(t *testing.T, e env, job wire.Job, state State) (ranks [][]int, agents []*Agent, waits []func() error, err error) {
	t.Helper()
	ranks = [][]int{{0}, {1}, {2}}
	for i, rs := range ranks {
		a, err := New(e.nc, e.js, keyed(job), teamOptions(fmt.Sprintf("new%d", i), 3, rs), nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
		waits = append(waits, runAgent(t, a))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(agents))
	for i := range agents {
		wg.Go(func() { _, errs[i] = resumeAgent(ctx, agents[i], state, 3) })
	}
	wg.Wait()
	return ranks, agents, waits, errors.Join(errs...)
}
