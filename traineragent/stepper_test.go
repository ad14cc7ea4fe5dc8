package traineragent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// takeRanks runs world ranks against ag at once, each taking n parts (n <
// 0: until io.EOF), and returns each rank's parts, checked.
func takeRanks(t *testing.T, ag *Agent, world, n int) [][]readerstate.RankPart {
	t.Helper()
	all := make([]int, world)
	for r := range all {
		all[r] = r
	}
	return takeTeam(t, []*Agent{ag}, [][]int{all}, world, n)
}

// checkSteps asserts that the ranks took the same steps, in order from
// (epoch, step) first on: parts of a step share epoch, step, last flag and
// position; all are full batches but an epoch's last step's, whose sizes
// differ by at most one (larger for lower ranks).
func checkSteps(t *testing.T, parts [][]readerstate.RankPart, batch int, first [2]int) {
	t.Helper()
	world := len(parts)
	for r := range parts {
		if len(parts[r]) != len(parts[0]) {
			t.Fatalf("rank %d took %d parts, rank 0 %d", r, len(parts[r]), len(parts[0]))
		}
	}
	for i, p0 := range parts[0] {
		var sizes []int
		for r := range world {
			p := parts[r][i]
			if p.Epoch != p0.Epoch || p.Step != p0.Step || p.Last != p0.Last || p.World != world || !bytes.Equal(p.Position, p0.Position) {
				t.Fatalf("part %d: rank %d has epoch %d step %d last %t world %d, rank 0 epoch %d step %d last %t",
					i, r, p.Epoch, p.Step, p.Last, p.World, p0.Epoch, p0.Step, p0.Last)
			}
			sizes = append(sizes, len(p.Keys))
		}
		if !p0.Last && slices.ContainsFunc(sizes, func(n int) bool { return n != batch }) {
			t.Errorf("epoch %d step %d: sizes %v, want %d each", p0.Epoch, p0.Step, sizes, batch)
		}
		if p0.Last && (sizes[0]-sizes[world-1] > 1 || !slices.IsSortedFunc(sizes, func(a, b int) int { return b - a })) {
			t.Errorf("epoch %d last step %d: sizes %v, want them to differ by at most one, lower ranks larger", p0.Epoch, p0.Step, sizes)
		}
		var p assembly.Position
		if err := json.Unmarshal(p0.Position, &p); err != nil || p.Version != assembly.PositionVersion {
			t.Errorf("epoch %d step %d: position %q: %v", p0.Epoch, p0.Step, p0.Position, err)
		}
		want := first
		if i > 0 {
			prev := parts[0][i-1]
			want = [2]int{prev.Epoch, prev.Step + 1}
			if prev.Last {
				want = [2]int{prev.Epoch + 1, 0}
			}
		}
		if got := [2]int{p0.Epoch, p0.Step}; got != want {
			t.Errorf("part %d is epoch %d step %d, want %v", i, got[0], got[1], want)
		}
	}
}

// stepsPerEpoch counts rank 0's parts per epoch.
func stepsPerEpoch(parts [][]readerstate.RankPart) map[int]int {
	n := map[int]int{}
	for _, p := range parts[0] {
		n[p.Epoch]++
	}
	return n
}

// seen counts the (epoch, sample) pairs in parts.
func seen(got map[string]int, parts [][]readerstate.RankPart) map[string]int {
	if got == nil {
		got = map[string]int{}
	}
	for _, rank := range parts {
		for _, p := range rank {
			for _, k := range p.Keys {
				got[fmt.Sprintf("%d/%s", p.Epoch, k)]++
			}
		}
	}
	return got
}

// doneRecordOf reads a reader's done key, failing if it is missing.
func (e env) doneRecordOf(t *testing.T, job, reader string) wire.ReaderDone {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), wire.ReadersBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(context.Background(), wire.ReaderDoneKey(job, reader))
	if err != nil {
		t.Fatalf("done key of reader %s: %v", reader, err)
	}
	var d wire.ReaderDone
	if err := json.Unmarshal(entry.Value(), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// rankLayout has 26 samples per epoch.
var rankLayout = fixture.Layout{{3, 6}, {5}, {1, 2, 3}, {6}}

func TestRanksTakeDisjointEqualSteps(t *testing.T) {
	for _, world := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("world %d", world), func(t *testing.T) {
			e := newEnv(t)
			job := fixture.Job("ranks", 2, 4, rankLayout)
			job.Submitted = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
			e.submit(t, job, newFunction(t, job, rankLayout), 2)
			a, err := New(e.nc, e.js, job, Options{PrefetchSamples: 4}, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			wait := runAgent(t, a)
			parts := takeRanks(t, a, world, -1)
			checkSteps(t, parts, 4, [2]int{0, 0})
			fixture.CheckEveryOnce(t, job, rankLayout, seen(nil, parts), 0)
			// 26 samples: full steps of 4*world, then the tail split.
			steps := (26 + 4*world - 1) / (4 * world)
			if diff := cmp.Diff(map[int]int{0: steps, 1: steps}, stepsPerEpoch(parts)); diff != "" {
				t.Errorf("steps per epoch (-want +got):\n%s", diff)
			}
			if err := wait(); err != nil {
				t.Fatal(err)
			}
			if d := e.doneRecordOf(t, job.Spec.ID, wire.DefaultReader); !d.Submitted.Equal(job.Submitted) || d.Time.IsZero() {
				t.Errorf("done record %+v", d)
			}
			st := a.Stats()
			if st.WorldSize != world || len(st.Ranks) != world || st.DroppedSamples != 0 {
				t.Fatalf("stats: world %d, ranks %+v, dropped %d", st.WorldSize, st.Ranks, st.DroppedSamples)
			}
			for _, r := range st.Ranks {
				if !r.Ended || r.Batches != int64(2*steps) || r.Epoch != 1 || r.Step != steps-1 {
					t.Errorf("rank stats %+v, want ended after %d parts, the last epoch 1 step %d", r, 2*steps, steps-1)
				}
			}
		})
	}
}

func TestRanksDropLast(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("drop", 2, 4, rankLayout)
	e.submit(t, job, newFunction(t, job, rankLayout), 2)
	reg := prometheus.NewRegistry()
	a, err := New(e.nc, e.js, job, Options{WorldSize: 3, DropLast: true}, nil, NewMetrics(reg), nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	parts := takeRanks(t, a, 3, -1)
	checkSteps(t, parts, 4, [2]int{0, 0})
	// Of 26 samples, 2 full steps of 12; the 2 left are dropped.
	fixture.CheckEveryOnce(t, job, rankLayout, seen(nil, parts), 4)
	if diff := cmp.Diff(map[int]int{0: 2, 1: 2}, stepsPerEpoch(parts)); diff != "" {
		t.Errorf("steps per epoch (-want +got):\n%s", diff)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.DroppedSamples != 4 || !st.DropLast || st.Epochs != 2 {
		t.Errorf("stats: %d dropped, drop_last %t, %d epochs; want 4, true, 2", st.DroppedSamples, st.DropLast, st.Epochs)
	}
	if n, err := prometheusCounter(reg, "sluice_agent_dropped_samples_total"); n != 4 || err != nil {
		t.Errorf("sluice_agent_dropped_samples_total = %v, %v; want 4", n, err)
	}
	e.doneRecordOf(t, job.Spec.ID, wire.DefaultReader)
}

// TestRanksGetEpochsInOrder queues epoch 1 before epoch 0 with a prefetch
// bound that epoch 1 alone fills: the agent must take tasks on for the
// epoch its ranks are in.
func TestRanksGetEpochsInOrder(t *testing.T) {
	e := newEnv(t)
	l := fixture.Layout{{2, 2}, {2}}
	job := fixture.Job("order", 2, 2, l)
	e.submit(t, job, newFunction(t, job, l), 1, assembly.ShardRef{Epoch: 1, Shard: 0}, assembly.ShardRef{Epoch: 1, Shard: 1}, assembly.ShardRef{Epoch: 0, Shard: 0}, assembly.ShardRef{Epoch: 0, Shard: 1})
	a, err := New(e.nc, e.js, job, Options{PrefetchSamples: 2}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	batches := take(t, a, -1)
	checkDelivery(t, job, l, batches)
	var epochs []int
	for _, b := range batches {
		epochs = append(epochs, b.Epoch)
	}
	if !slices.IsSorted(epochs) {
		t.Errorf("epochs of the batches in order taken: %v", epochs)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestResumeFromACheckpoint trains 2 ranks for 3 steps, checkpoints, takes
// more steps (which the crashed trainer's model never keeps: 3, or every
// step left but for the 410s) and stops; a new agent resumes from the
// checkpoint with 2 or 3 ranks. Its ranks take a step and crash too, and a
// new generation of ranks resumes from the same checkpoint with the agent
// still running. The samples the model saw are every sample of every epoch
// once, the shards recorded past the checkpoint produced again. So too
// for a job mixing two sources (shards 0-3 and 4-5, 3:1).
func TestResumeFromACheckpoint(t *testing.T) {
	l := fixture.Layout{{3, 6}, {5}, {1, 2, 3}, {6}, {4, 4}, {2}} // 36 samples per epoch: 9 steps of 2x2
	for _, tc := range []struct {
		world, past int
		mixed       bool
	}{{2, 3, false}, {3, 3, false}, {3, 15, false}, {3, 3, true}} {
		world := tc.world
		name := fmt.Sprintf("2 ranks to %d, %d steps past the checkpoint", world, tc.past)
		if tc.mixed {
			name += ", mixed"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			job := fixture.Job("resume", 2, 2, l)
			if tc.mixed {
				job = fixture.MixedJob("resume", 2, 2, l, 4, 3, 1)
			}
			job.Submitted = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
			f := newFunction(t, job, l)
			e.submit(t, job, f, 2)

			a, err := New(e.nc, e.js, job, Options{PrefetchSamples: 4}, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- a.Run(ctx) }()
			kept := takeRanks(t, a, 2, 3)
			checkSteps(t, kept, 2, [2]int{0, 0})
			last := kept[0][2]
			state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader,
				Epoch: 0, Step: last.Step + 1, WorldSize: 2, Position: last.Position}
			takeRanks(t, a, 2, tc.past) // past the checkpoint: lost with the crash
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("Run after cancel: %v", err)
			}

			sent := func() int {
				n := 0
				for ep := range job.Spec.Epochs {
					for s := range l {
						n += f.sendsOf(ep, s)
					}
				}
				return n
			}
			before := sent()
			ag, err := New(e.nc, e.js, job, Options{PrefetchSamples: 4}, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			b := ag.readers[0]
			wait := runAgent(t, ag)
			// Every new rank but the last sends the same state
			// (re-encoded, maybe), at once.
			results := make([]ResumeResult, world)
			errs := make([]error, world)
			var wg sync.WaitGroup
			for r := range world - 1 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st := state
					st.Position = append(json.RawMessage(strings.Repeat(" ", r)), state.Position...)
					if r == 1 {
						// A client may keep the metadata's text as a string.
						st.Position, _ = json.Marshal(string(state.Position))
					}
					results[r], errs[r] = b.Resume(context.Background(), st, world, r, "")
				}()
			}
			wg.Wait()
			// The last rank loads another checkpoint: refused, naming
			// both; then the generation's.
			other := state
			other.Step++
			if _, err := b.Resume(context.Background(), other, world, world-1, ""); !errors.Is(err, readerstate.ErrResumeConflict) ||
				!strings.Contains(err.Error(), fmt.Sprintf("epoch %d step %d", other.Epoch, other.Step)) ||
				!strings.Contains(err.Error(), fmt.Sprintf("epoch %d step %d", state.Epoch, state.Step)) {
				t.Errorf("a rank resuming from another state than its generation's: %v, want ErrResumeConflict naming both", err)
			}
			results[world-1], errs[world-1] = b.Resume(context.Background(), state, world, world-1, "")
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			res := results[0]
			if !res.Resumed || res.ReplayedShards == 0 || slices.ContainsFunc(results, func(r ResumeResult) bool { return r != res }) {
				t.Errorf("resumes: %+v, want one rewind with shards replayed, told to every rank", results)
			}

			takeRanks(t, ag, world, 1) // a step the crashed generation's model never keeps
			world++
			if res, err := resumeAgent(context.Background(), ag, state, world); err != nil || !res.Resumed {
				t.Fatalf("a new generation's resume: %+v, %v; want a rewind", res, err)
			}
			rest := takeRanks(t, ag, world, -1)
			checkSteps(t, rest, 2, [2]int{0, state.Step})
			fixture.CheckEveryOnce(t, job, l, seen(seen(nil, kept), rest), 0)
			if tc.mixed {
				checkPartSources(t, job, kept, rest)
			}
			if err := wait(); err != nil {
				t.Fatal(err)
			}
			e.doneRecordOf(t, job.Spec.ID, wire.DefaultReader)
			if n := e.taskBacklog(t, job.Spec.ID); n != 0 {
				t.Errorf("%d tasks left unsettled, want 0", n)
			}
			t.Logf("shards sent after the crash: %d (the job has %d)", sent()-before, len(l)*job.Spec.Epochs)
		})
	}
}

// TestAnAgentRestartedAfterAResumeSendsItsReplaysAgain: an agent stops
// right after a resume, before the shards it asked for again arrived; the
// next agent, with no resume of its own, finds them noted in the position
// and sends them itself, and the model sees every sample once.
func TestAnAgentRestartedAfterAResumeSendsItsReplaysAgain(t *testing.T) {
	l := fixture.Layout{{3, 6}, {5}, {1, 2, 3}, {6}}
	e := newEnv(t)
	job := fixture.Job("replay-again", 1, 2, l)
	f := newFunction(t, job, l)
	e.submit(t, job, f, 2)
	a, err := New(e.nc, e.js, job, Options{PrefetchSamples: 4}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	kept := takeRanks(t, a, 2, 2)
	last := kept[0][1]
	state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader,
		Epoch: 0, Step: last.Step + 1, WorldSize: 2, Position: last.Position}
	takeRanks(t, a, 2, 2)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}

	// The next agent resumes and stops at once: the replies to its replays
	// are held back by the function until it stopped.
	f.mu.Lock()
	f.hold = make(chan struct{})
	f.mu.Unlock()
	b, err := New(e.nc, e.js, job, Options{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(context.Background())
	berr := make(chan error, 1)
	go func() { berr <- b.Run(bctx) }()
	res, err := resumeAgent(context.Background(), b, state, 2)
	if err != nil || res.ReplayedShards == 0 {
		t.Fatalf("resume: %+v, %v; want shards replayed", res, err)
	}
	bcancel()
	if err := <-berr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
	if p := e.storedPosition(t, job.Spec.ID, wire.DefaultReader); p.Epochs[0].Replayed == "" {
		t.Errorf("position after the resume %+v: want the shards noted as replayed", p)
	}
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()

	c, err := New(e.nc, e.js, job, Options{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, c)
	rest := takeRanks(t, c, 2, -1)
	checkSteps(t, rest, 2, [2]int{0, 0})
	fixture.CheckEveryOnce(t, job, l, seen(seen(nil, kept), rest), 0)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestResumeRefusesARankWaitingInAnotherWorld: a rank waiting for its
// first part when a resume sets a smaller world gets ErrWorldMismatch.
func TestResumeRefusesARankWaitingInAnotherWorld(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("rewait", 1, 2, fixture.Layout{{2}})
	e.record(t, job)
	ag, err := New(e.nc, e.js, job, Options{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, ag)
	a := ag.readers[0]
	got := make(chan error, 1)
	go func() {
		_, err := a.nextPart(context.Background(), readerstate.RankRequest{Rank: 2, World: 3})
		got <- err
	}()
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.st.Blocked == 0 {
			return errors.New("rank 2 is not waiting yet")
		}
		return nil
	})
	st := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 3}
	if _, err := a.Resume(context.Background(), st, 2, 0, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, readerstate.ErrWorldMismatch) {
			t.Errorf("the waiting rank of the old world: %v, want ErrWorldMismatch", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting rank of the old world was not refused")
	}
}

// TestResumeOfALateRankJoinsItsGeneration (issue 31): a DDP job's ranks
// each load rank 0's checkpoint; rank 0's resume rewinds and it takes a
// step before rank 1's resume arrives. Rank 1's resume joins the
// generation (nothing rewound again, the same answer), so rank 0 is not
// served its step twice; a rank that took parts in the generation before
// and resumes again starts the next one, and a rank of that one's
// predecessor that did not resume again is refused a part.
func TestResumeOfALateRankJoinsItsGeneration(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("late", 2, 2, rankLayout)
	e.submit(t, job, newFunction(t, job, rankLayout), 2)
	ag, err := New(e.nc, e.js, job, Options{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, ag)
	kept := takeRanks(t, ag, 2, 2)
	last := kept[0][1]
	state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader,
		Epoch: last.Epoch, Step: last.Step + 1, WorldSize: 2, Position: last.Position}
	takeRanks(t, ag, 2, 1) // past the checkpoint: lost with the crash
	b := ag.readers[0]
	ctx := context.Background()
	res0, err := b.Resume(ctx, state, 2, 0, "")
	if err != nil || !res0.Resumed {
		t.Fatalf("rank 0's resume: %+v, %v; want a rewind", res0, err)
	}
	first, err := b.nextPart(ctx, readerstate.RankRequest{Rank: 0, World: 2})
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	gen := b.st.Gens.N
	b.mu.Unlock()
	res1, err := b.Resume(ctx, state, 2, 1, "")
	b.mu.Lock()
	joined := b.st.Gens.N == gen
	b.mu.Unlock()
	if err != nil || res1 != res0 || !joined {
		t.Fatalf("rank 1's late resume: %+v, %v (generation kept: %t); want rank 0's answer, no rewind", res1, err, joined)
	}
	rest := takeRanks(t, ag, 2, 1)
	rest[0] = append([]readerstate.RankPart{first}, rest[0]...)
	second, err := b.nextPart(ctx, readerstate.RankRequest{Rank: 1, World: 2})
	if err != nil {
		t.Fatal(err)
	}
	rest[1] = append(rest[1], second)
	checkSteps(t, rest, 2, [2]int{state.Epoch, state.Step})

	// Rank 0 restarts alone (a new process): the next generation. Rank
	// 1, of the one before, must resume before it takes a part.
	if _, err := b.Resume(ctx, state, 2, 0, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.nextPart(ctx, readerstate.RankRequest{Rank: 1, World: 2}); !errors.Is(err, readerstate.ErrResumeConflict) || !strings.Contains(err.Error(), "load the checkpoint again") {
		t.Fatalf("rank 1 of the generation before: %v, want readerstate.ErrResumeConflict", err)
	}
	if _, err := b.Resume(ctx, state, 2, 1, ""); err != nil {
		t.Fatal(err)
	}
	all := takeRanks(t, ag, 2, -1)
	checkSteps(t, all, 2, [2]int{state.Epoch, state.Step})
	fixture.CheckEveryOnce(t, job, rankLayout, seen(seen(nil, kept), all), 0)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}
