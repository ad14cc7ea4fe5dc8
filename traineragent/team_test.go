package traineragent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/wire"
)

// teamLayout has 46 samples per epoch in 8 shards of uneven sizes.
var teamLayout = layout{{3, 6}, {5}, {1, 2, 3}, {6}, {4, 4}, {2}, {7}, {3}}

// startTeam starts one agent per entry of ranks (the first must hold rank
// 0: it plans), after delay each but the first.
func startTeam(t *testing.T, e env, job wire.Job, world int, ranks [][]int, delay time.Duration, dropLast bool) ([]*Agent, []func() error) {
	t.Helper()
	var agents []*Agent
	var waits []func() error
	for i, rs := range ranks {
		if i > 0 {
			time.Sleep(delay)
		}
		a, err := New(e.nc, e.js, job, Options{Name: fmt.Sprintf("node%d", i), WorldSize: world, Ranks: rs, PrefetchSamples: 8, DropLast: dropLast}, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
		waits = append(waits, runAgent(t, a))
	}
	return agents, waits
}

// takeTeam runs every rank against the agent serving it, each taking n
// parts (n < 0: until io.EOF), and returns each rank's parts, checked.
func takeTeam(t *testing.T, agents []*Agent, ranks [][]int, world, n int) [][]rankPart {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := make([][]rankPart, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for i, rs := range ranks {
		a := agents[i].readers[0]
		for _, r := range rs {
			wg.Go(func() {
				for n < 0 || len(out[r]) < n {
					p, err := a.nextPart(ctx, rankRequest{rank: r, world: world})
					if errors.Is(err, io.EOF) && n < 0 {
						return
					}
					if err != nil {
						errs[r] = fmt.Errorf("rank %d after %d parts: %w", r, len(out[r]), err)
						return
					}
					out[r] = append(out[r], p)
				}
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, parts := range out {
		for _, p := range parts {
			checkBatch(t, p.Batch)
		}
	}
	return out
}

// TestTeamServesEveryRankExactlyOnce: a reader's 4 ranks served by two
// agents of 2 ranks each, sharing the job's queue: the ranks take the
// same steps, full but each epoch's last, which splits the rest evenly;
// every sample of every epoch reaches one rank once. With the second
// agent late, the first holds more than its ranks need at an epoch's end:
// those rows are produced again for the other's ranks.
func TestTeamServesEveryRankExactlyOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		drop  bool
	}{{"together", 0, false}, {"second agent late", 300 * time.Millisecond, false}, {"drop_last", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			job := testJob("team", 3, 2, teamLayout)
			job.Submitted = time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
			f := newFunction(t, job, teamLayout)
			e.submit(t, job, f, 2)
			ranks := [][]int{{0, 1}, {2, 3}}
			agents, waits := startTeam(t, e, job, 4, ranks, tc.delay, tc.drop)
			parts := takeTeam(t, agents, ranks, 4, -1)
			checkSteps(t, parts, 2, [2]int{0, 0})
			dropped := 0
			steps := (46 + 7) / 8
			if tc.drop {
				dropped, steps = 3*(46%8), 46/8
			}
			checkEveryOnce(t, job, teamLayout, seen(nil, parts), dropped)
			if diff := cmp.Diff(map[int]int{0: steps, 1: steps, 2: steps}, stepsPerEpoch(parts)); diff != "" {
				t.Errorf("steps per epoch (-want +got):\n%s", diff)
			}
			for i, w := range waits {
				if err := w(); err != nil {
					t.Fatalf("agent %d: %v", i, err)
				}
			}
			e.doneRecordOf(t, job.Spec.ID, wire.DefaultReader)
			if n := e.taskBacklog(t, job.Spec.ID); n != 0 {
				t.Errorf("%d tasks left unsettled", n)
			}
			again := 0
			for ep := range job.Spec.Epochs {
				for s := range teamLayout {
					again += f.sendsOf(ep, s) - 1
				}
			}
			t.Logf("shards produced again for rows moved between the agents: %d", again)
		})
	}
}
