package traineragent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// TestTeamRandomRestarts: a team of two agents (ranks 0,1 and 2,3) under
// restarts at random moments, over seeds: the trainer is killed (every
// rank's request cancelled) after a random time, sometimes with the
// member's or the planner's agent, and a new generation resumes from the
// last step every rank took, after a gap of 0 to 6 s. Every sample must
// reach one rank once (what each generation took up to its checkpoint,
// then the last generation's), each generation's ranks in equal steps.
// SLUICE_TEAM_SEEDS seeds (default 2), SLUICE_TEAM_MAX_GAP the longest gap
// (default 1s; the target is 6s over 200 seeds).
func TestTeamRandomRestarts(t *testing.T) {
	seeds, maxGap := 2, time.Second
	if s := os.Getenv("SLUICE_TEAM_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("SLUICE_TEAM_MAX_GAP"); s != "" {
		maxGap, _ = time.ParseDuration(s)
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) { chaosRun(t, uint64(seed), maxGap) })
	}
}

func chaosRun(t *testing.T, seed uint64, maxGap time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 24))
	e := newEnv(t)
	job := fixture.Job(fmt.Sprintf("chaos%d", seed), 8, 2, teamLayout)
	e.submit(t, job, newFunction(t, job, teamLayout), 2)
	ranks := [][]int{{0, 1}, {2, 3}}
	type run struct {
		a    *Agent
		stop context.CancelFunc
		errc chan error
	}
	start := func(i int) run {
		var log *slog.Logger
		if os.Getenv("SLUICE_TEAM_LOG") != "" {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
		a, err := New(e.nc, e.js, keyed(job), teamOptions(fmt.Sprintf("node%d", i), 4, ranks[i]), log, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- a.Run(ctx) }()
		t.Cleanup(cancel)
		return run{a, cancel, errc}
	}
	runs := []run{start(0), start(1)}

	// generation runs the ranks until EOF or ctx ends; parts per rank.
	generation := func(ctx context.Context) ([][]readerstate.RankPart, []error) {
		parts := make([][]readerstate.RankPart, 4)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i, rs := range ranks {
			a := runs[i].a.readers[0]
			for _, r := range rs {
				wg.Go(func() {
					for {
						p, err := a.nextPart(ctx, readerstate.RankRequest{Rank: r, World: 4})
						if err != nil {
							if !errors.Is(err, io.EOF) && ctx.Err() == nil {
								errs[r] = fmt.Errorf("rank %d after %d parts: %w", r, len(parts[r]), err)
							}
							return
						}
						parts[r] = append(parts[r], p)
					}
				})
			}
		}
		wg.Wait()
		return parts, errs
	}

	var kept [][]readerstate.RankPart // every rank's parts up to each generation's checkpoint
	state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 4}
	events := 1 + rng.IntN(3)
	for ev := range events {
		ctx, kill := context.WithCancel(context.Background())
		after := time.Duration(rng.Int64N(int64(time.Second)))
		var parts [][]readerstate.RankPart
		var errs []error
		done := make(chan struct{})
		go func() {
			parts, errs = generation(ctx)
			close(done)
		}()
		select {
		case <-time.After(after):
		case <-done:
		}
		what := rng.IntN(4) // 0, 1: the trainer alone; 2: and the member; 3: and the planner
		kill()
		<-done
		if what >= 2 {
			i := 3 - what // 2: the member (agent 1), 3: the planner
			runs[i].stop()
			if err := <-runs[i].errc; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("event %d: agent %d stopped with %v", ev, i, err)
			}
			runs[i] = start(i)
		}
		if what < 2 {
			// A rank request that failed as the trainer died is its
			// death; any other is a failure.
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("event %d: %v", ev, err)
			}
		}
		// The checkpoint: the last step every rank took.
		n := len(parts[0])
		for _, p := range parts {
			n = min(n, len(p))
		}
		if n > 0 {
			for r := range parts {
				parts[r] = parts[r][:n]
			}
			checkSteps(t, parts, 2, [2]int{state.Epoch, state.Step})
			if kept == nil {
				kept = make([][]readerstate.RankPart, 4)
			}
			for r := range parts {
				kept[r] = append(kept[r], parts[r]...)
			}
			last := parts[0][n-1]
			state = State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader,
				Epoch: last.Epoch, Step: last.Step + 1, WorldSize: 4, Position: last.Position}
			if last.Last {
				state.Epoch, state.Step = last.Epoch+1, 0
			}
		}
		if state.Epoch >= job.Spec.Epochs {
			break // every step was taken before the trainer died: the job is done
		}
		gap := time.Duration(rng.Int64N(int64(maxGap) + 1))
		t.Logf("event %d after %v: %s; checkpoint epoch %d step %d; gap %v", ev, after,
			[]string{"trainer", "trainer", "trainer and member", "trainer and planner"}[what], state.Epoch, state.Step, gap)
		time.Sleep(gap) // the scenario's gap: a restart 0 to 6 s later
		var wg sync.WaitGroup
		rerrs := make([]error, len(runs))
		for i := range runs {
			wg.Go(func() {
				rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				_, rerrs[i] = resumeAgent(rctx, runs[i].a, state, 4)
			})
		}
		wg.Wait()
		if err := errors.Join(rerrs...); err != nil {
			t.Fatalf("event %d: resuming: %v", ev, err)
		}
	}
	var rest [][]readerstate.RankPart
	if state.Epoch < job.Spec.Epochs {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		var errs []error
		rest, errs = generation(ctx)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		checkSteps(t, rest, 2, [2]int{state.Epoch, state.Step})
	}
	fixture.CheckEveryOnce(t, job, teamLayout, seen(seen(nil, kept), rest), 0)
	if state.Epoch >= job.Spec.Epochs {
		return // a restarted agent waits for ranks that will not ask again
	}
	for i, r := range runs {
		select {
		case err := <-r.errc:
			if err != nil {
				t.Errorf("agent %d: %v", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("agent %d did not end", i)
		}
	}
}
