package traineragent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/traineragent/internal/teamproto"
	"github.com/sluice-project/sluice/wire"
)

// testTeamKey is the team key of the tests' jobs.
var testTeamKey = []byte("a test team key of 32 bytes, ok!")

// keyed is job as submitted with testTeamKey: its record holds the key
// that certifies its nodes (a team's agents seal their messages).
func keyed(job wire.Job) wire.Job {
	job.NodeKey = wire.JobNodeKey(testTeamKey)
	return job
}

// testNode is node's credential of job (testTeamKey's).
func testNode(t testing.TB, job, node string) *wire.NodeIdentity {
	t.Helper()
	id, err := wire.DeriveNode(testTeamKey, job, node)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// testAuth seals and checks reader's team messages of job as node.
func testAuth(t testing.TB, job, node string) *teamproto.Auth {
	t.Helper()
	check, err := wire.NewNodeVerifier(job, wire.JobNodeKey(testTeamKey))
	if err != nil {
		t.Fatal(err)
	}
	return teamproto.NewAuth(testNode(t, job, node), check, job, wire.DefaultReader)
}

// teamOptions are the options of agent name of a team: ranks of world.
func teamOptions(name string, world int, ranks []int) Options {
	return Options{Name: name, WorldSize: world, Ranks: ranks, PrefetchSamples: 8, TeamKey: testTeamKey}
}

// teamLayout has 46 samples per epoch in 8 shards of uneven sizes.
var teamLayout = fixture.Layout{{3, 6}, {5}, {1, 2, 3}, {6}, {4, 4}, {2}, {7}, {3}}

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
		a, err := New(e.nc, e.js, keyed(job), Options{Name: fmt.Sprintf("node%d", i), WorldSize: world, Ranks: rs, PrefetchSamples: 8, DropLast: dropLast, TeamKey: testTeamKey}, nil, nil, nil)
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
func takeTeam(t *testing.T, agents []*Agent, ranks [][]int, world, n int) [][]readerstate.RankPart {
	t.Helper()
	out := takeTeamParts(t, agents, ranks, world, n)
	for _, parts := range out {
		for _, p := range parts {
			fixture.CheckBatch(t, p.Batch)
		}
	}
	return out
}

// takeTeamParts is takeTeam without checking the batches' tensors
// against the test layout's.
func takeTeamParts(t *testing.T, agents []*Agent, ranks [][]int, world, n int) [][]readerstate.RankPart {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := make([][]readerstate.RankPart, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for i, rs := range ranks {
		a := agents[i].readers[0]
		for _, r := range rs {
			wg.Go(func() {
				for n < 0 || len(out[r]) < n {
					p, err := a.nextPart(ctx, readerstate.RankRequest{Rank: r, World: world})
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
			job := fixture.Job("team", 3, 2, teamLayout)
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
			fixture.CheckEveryOnce(t, job, teamLayout, seen(nil, parts), dropped)
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

// TestTeamResumesOnAnotherLayout: a checkpoint taken with 2 agents x 2
// ranks resumes with 3 agents x 1 rank: every sample the checkpointed
// model had not trained on comes once, to the new world. So too for a
// job that mixes two sources (shards 0-4 and 5-7, weighted 3:1), each
// row's source named in its part.
func TestTeamResumesOnAnotherLayout(t *testing.T) {
	t.Run("one dataset", func(t *testing.T) { testTeamResumesOnAnotherLayout(t, fixture.Job("teamresume", 2, 2, teamLayout)) })
	t.Run("mixed", func(t *testing.T) {
		testTeamResumesOnAnotherLayout(t, fixture.MixedJob("teamresumemix", 2, 2, teamLayout, 5, 3, 1))
	})
}

func testTeamResumesOnAnotherLayout(t *testing.T, job wire.Job) {
	e := newEnv(t)
	job.Submitted = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	f := newFunction(t, job, teamLayout)
	e.submit(t, job, f, 2)

	ranks := [][]int{{0, 1}, {2, 3}}
	ctx, cancel := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	var first []*Agent
	for i, rs := range ranks {
		a, err := New(e.nc, e.js, keyed(job), Options{Name: fmt.Sprintf("old%d", i), WorldSize: 4, Ranks: rs, PrefetchSamples: 8, TeamKey: testTeamKey}, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, a)
		runs.Go(func() { _ = a.Run(ctx) })
	}
	kept := takeTeam(t, first, ranks, 4, 3)
	checkSteps(t, kept, 2, [2]int{0, 0})
	last := kept[0][2]
	state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader,
		Epoch: last.Epoch, Step: last.Step + 1, WorldSize: 4, Position: last.Position}
	takeTeam(t, first, ranks, 4, 2) // past the checkpoint: lost with the crash
	cancel()
	runs.Wait()

	ranks = [][]int{{0}, {1}, {2}}
	agents, waits := startTeam(t, e, job, 3, ranks, 0, false)
	var wg sync.WaitGroup
	results := make([]ResumeResult, 3)
	errs := make([]error, 3)
	for i := range agents {
		wg.Go(func() { results[i], errs[i] = resumeAgent(context.Background(), agents[i], state, 3) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if !results[0].Resumed || results[1] != results[0] || results[2] != results[0] {
		t.Errorf("resumes %+v, want one rewind told to every rank", results)
	}
	rest := takeTeam(t, agents, ranks, 3, -1)
	checkSteps(t, rest, 2, [2]int{last.Epoch, last.Step + 1})
	fixture.CheckEveryOnce(t, job, teamLayout, seen(seen(nil, kept), rest), 0)
	if len(job.Sources) > 0 {
		checkPartSources(t, job, kept, rest)
	}
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
	}
}

// TestTeamAgentRestarts: an agent of a team stops mid-epoch and starts
// again (a member: the chunks it held are produced again where its ranks
// need them; the planner: it loads the position and the members tell it
// again what they hold). Every sample still reaches one rank once.
func TestTeamAgentRestarts(t *testing.T) {
	for _, restart := range []int{1, 0} {
		t.Run(fmt.Sprintf("agent %d", restart), func(t *testing.T) {
			e := newEnv(t)
			job := fixture.Job("teamrestart", 2, 2, teamLayout)
			job.Submitted = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
			f := newFunction(t, job, teamLayout)
			e.submit(t, job, f, 2)
			ranks := [][]int{{0, 1}, {2, 3}}
			start := func(i int) (*Agent, context.CancelFunc, <-chan error) {
				a, err := New(e.nc, e.js, keyed(job), Options{Name: fmt.Sprintf("node%d", i), WorldSize: 4, Ranks: ranks[i], PrefetchSamples: 8, TeamKey: testTeamKey}, nil, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				go func() { errc <- a.Run(ctx) }()
				t.Cleanup(cancel)
				return a, cancel, errc
			}
			var agents []*Agent
			var stops []context.CancelFunc
			var errcs []<-chan error
			for i := range ranks {
				a, stop, errc := start(i)
				agents, stops, errcs = append(agents, a), append(stops, stop), append(errcs, errc)
			}
			before := takeTeam(t, agents, ranks, 4, 3)
			stops[restart]()
			if err := <-errcs[restart]; !errors.Is(err, context.Canceled) {
				t.Fatalf("agent %d stopped with %v", restart, err)
			}
			agents[restart], stops[restart], errcs[restart] = start(restart)
			after := takeTeam(t, agents, ranks, 4, -1)
			for r := range after {
				if len(after[r]) != len(after[0]) {
					t.Errorf("rank %d took %d parts after the restart, rank 0 %d", r, len(after[r]), len(after[0]))
				}
			}
			fixture.CheckEveryOnce(t, job, teamLayout, seen(seen(nil, before), after), 0)
			for i, errc := range errcs {
				select {
				case err := <-errc:
					if err != nil {
						t.Errorf("agent %d: %v", i, err)
					}
				case <-time.After(30 * time.Second):
					t.Errorf("agent %d did not end", i)
				}
			}
		})
	}
}

// TestTeamEndsAnEpochWithoutAShardThatFailed: a shard whose every send is
// refused for good (its object gone), whichever agent of the team takes
// it, is reported failed by the planner and the epoch ends without it for
// every rank, each taking the same steps.
func TestTeamEndsAnEpochWithoutAShardThatFailed(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("teamgone", 2, 2, teamLayout)
	f := newFunction(t, job, teamLayout)
	f.status = map[assembly.ShardRef]int{{Epoch: 0, Shard: 3}: http.StatusNotFound, {Epoch: 1, Shard: 5}: http.StatusNotFound}
	e.submit(t, job, f, 2)
	ranks := [][]int{{0, 1}, {2, 3}}
	agents, waits := startTeam(t, e, job, 4, ranks, 0, false)
	parts := takeTeam(t, agents, ranks, 4, -1)
	checkSteps(t, parts, 2, [2]int{0, 0})
	got := seen(nil, parts)
	for k := range got {
		if strings.HasPrefix(k, "0/s3-") || strings.HasPrefix(k, "1/s5-") {
			t.Errorf("sample %s of a failed shard delivered", k)
		}
	}
	if want := 2*46 - 6 - 2; len(got) != want {
		t.Errorf("%d samples delivered, want %d", len(got), want)
	}
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
	}
	var reasons []string
	for _, fs := range agents[0].Stats().FailedSamples {
		if fs.Key == job.Shards[3] || fs.Key == job.Shards[5] {
			reasons = append(reasons, fs.Reason)
		}
	}
	if len(reasons) != 2 {
		t.Errorf("the planner reports %q for the failed shards, want one entry each", reasons)
	}
}

// TestTeamRandomLayouts: teams of 2 or 3 agents over random datasets,
// world sizes, batch sizes and drop_last: every rank takes the same steps,
// full but each epoch's last, and every sample that is not dropped
// reaches one rank once.
func TestTeamRandomLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 12 {
		var l fixture.Layout
		total := 0
		for range 3 + rng.IntN(8) {
			var chunks []int
			for range 1 + rng.IntN(3) {
				n := 1 + rng.IntN(7)
				chunks = append(chunks, n)
				total += n
			}
			l = append(l, chunks)
		}
		agents := 2 + rng.IntN(2)
		world := agents + rng.IntN(3)
		batch := 1 + rng.IntN(4)
		dropLast := rng.IntN(3) == 0
		ranks := make([][]int, agents)
		for r := range world {
			a := r % agents // every agent serves a rank; rank 0 is the planner's
			if r >= agents {
				a = rng.IntN(agents)
			}
			ranks[a] = append(ranks[a], r)
		}
		t.Run(fmt.Sprintf("%d: %d samples, %d agents %v, batch %d, drop_last %t", i, total, agents, ranks, batch, dropLast), func(t *testing.T) {
			e := newEnv(t)
			job := fixture.Job(fmt.Sprintf("teamrand%d", i), 2, batch, l)
			e.submit(t, job, newFunction(t, job, l), 2)
			team, waits := startTeam(t, e, job, world, ranks, 0, dropLast)
			parts := takeTeam(t, team, ranks, world, -1)
			checkSteps(t, parts, batch, [2]int{0, 0})
			dropped := 0
			if dropLast {
				dropped = 2 * (total % (world * batch))
			}
			fixture.CheckEveryOnce(t, job, l, seen(nil, parts), dropped)
			for j, w := range waits {
				if err := w(); err != nil {
					t.Fatalf("agent %d: %v", j, err)
				}
			}
		})
	}
}

// TestTeamResumesRandomLayouts: a checkpoint taken by a random layout
// (one agent for every rank, or a team) resumes on another random one:
// every sample the checkpointed model had not trained on comes once.
func TestTeamResumesRandomLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 17))
	layoutOf := func() (int, [][]int) {
		agents := 1 + rng.IntN(3)
		world := agents + rng.IntN(3)
		ranks := make([][]int, agents)
		for r := range world {
			a := r % agents
			if r >= agents {
				a = rng.IntN(agents)
			}
			ranks[a] = append(ranks[a], r)
		}
		return world, ranks
	}
	for i := range 8 {
		w1, r1 := layoutOf()
		w2, r2 := layoutOf()
		took := 1 + rng.IntN(4)
		t.Run(fmt.Sprintf("%d: %v then %v after %d steps", i, r1, r2, took), func(t *testing.T) {
			e := newEnv(t)
			job := fixture.Job(fmt.Sprintf("teamresume%d", i), 2, 2, teamLayout)
			e.submit(t, job, newFunction(t, job, teamLayout), 2)
			ctx, cancel := context.WithCancel(context.Background())
			var runs sync.WaitGroup
			var first []*Agent
			for j, rs := range r1 {
				o := Options{Name: fmt.Sprintf("a%d", j), WorldSize: w1, Ranks: rs, PrefetchSamples: 8, TeamKey: testTeamKey}
				a, err := New(e.nc, e.js, keyed(job), o, nil, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				first = append(first, a)
				runs.Go(func() { _ = a.Run(ctx) })
			}
			kept := takeTeam(t, first, r1, w1, took)
			last := kept[0][took-1]
			state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader,
				Epoch: last.Epoch, Step: last.Step + 1, WorldSize: w1, Position: last.Position}
			if last.Last {
				state.Epoch, state.Step = last.Epoch+1, 0
			}
			takeTeam(t, first, r1, w1, 1) // past the checkpoint: lost with the crash
			cancel()
			runs.Wait()

			second, waits := startTeam(t, e, job, w2, r2, 0, false)
			var wg sync.WaitGroup
			errs := make([]error, len(second))
			for j := range second {
				wg.Go(func() { _, errs[j] = resumeAgent(context.Background(), second[j], state, w2) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			rest := takeTeam(t, second, r2, w2, -1)
			fixture.CheckEveryOnce(t, job, teamLayout, seen(seen(nil, kept), rest), 0)
			for j, w := range waits {
				if err := w(); err != nil {
					t.Fatalf("agent %d: %v", j, err)
				}
			}
		})
	}
}

// checkPartSources checks that every part names each row's source.
func checkPartSources(t *testing.T, job wire.Job, runs ...[][]readerstate.RankPart) {
	t.Helper()
	for _, parts := range runs {
		for r, rank := range parts {
			for _, p := range rank {
				if len(p.Sources) != len(p.Keys) {
					t.Fatalf("rank %d: epoch %d step %d: %d rows, %d sources", r, p.Epoch, p.Step, len(p.Keys), len(p.Sources))
				}
				for i, k := range p.Keys {
					if want := job.SourceOf(fixture.ShardOfKey(t, k)); p.Sources[i] != want {
						t.Fatalf("row %s: source %d, want %d", k, p.Sources[i], want)
					}
				}
			}
		}
	}
}
