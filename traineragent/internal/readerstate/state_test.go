package readerstate_test

import (
	"encoding/json"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// The reader's state tested with plain values: no NATS, no HTTP, no lock,
// times given.

var stateNow = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// loadedState is the state of a reader of job with nothing recorded.
func loadedState(t *testing.T, job wire.Job, c readerstate.Config) *readerstate.State {
	t.Helper()
	st := readerstate.NewReaderState(job, c, stateNow)
	if err := st.Load(nil, stateNow); err != nil {
		t.Fatal(err)
	}
	return st
}

// feedState applies msgs to st as the agent's intake does.
func feedState(t *testing.T, st *readerstate.State, msgs []fixture.OutputMsg) {
	t.Helper()
	for _, m := range msgs {
		if _, err := st.Intake(m.Ref, false, stateNow, func() (assembly.Outcome, error) { return fixture.ApplySent(st.Asm, m, true) }); err != nil {
			t.Fatalf("intake of %s: %v", m.Ref, err)
		}
	}
}

// takeStep takes one part for each of ranks (the world's size world), in
// rank order, each asked for by the agent holders names (nil: this one):
// nil if the first has none ready.
func takeStep(t *testing.T, st *readerstate.State, world int, ranks []int, holders []string, superseded bool) []readerstate.RankPart {
	t.Helper()
	var parts []readerstate.RankPart
	for _, r := range ranks {
		req := readerstate.RankRequest{Rank: r, World: world}
		if holders != nil {
			req.Agent = holders[r]
		}
		if err := st.Join(req); err != nil {
			t.Fatalf("rank %d joins: %v", r, err)
		}
		p, wait, err := st.Take(r, world, superseded, stateNow)
		switch {
		case wait && len(parts) == 0:
			return nil
		case wait:
			t.Fatalf("rank %d waits, but rank %d took a part of the step", r, ranks[0])
		case err != nil:
			t.Fatalf("rank %d: %v", r, err)
		}
		parts = append(parts, p)
	}
	return parts
}

// rowsOf names the rows of a part: its keys, or the rows of its spans
// (fixture.RowKey of shard and row) where another agent holds them.
func rowsOf(p readerstate.RankPart) []string {
	if p.Spans == nil {
		return p.Keys
	}
	var out []string
	for _, sp := range p.Spans {
		for i := range sp.N {
			out = append(out, fixture.RowKey(sp.Ref.Shard, sp.Row+i))
		}
	}
	return out
}

// checkOnce fails unless got has every key of want once.
func checkOnce(t *testing.T, got, want []string) {
	t.Helper()
	count := map[string]int{}
	for _, k := range got {
		count[k]++
	}
	for _, k := range want {
		if count[k] != 1 {
			t.Errorf("row %s handed out %d times, want once", k, count[k])
		}
		delete(count, k)
	}
	for k, n := range count {
		t.Errorf("row %s handed out %d times, want never", k, n)
	}
}

// shardRows are the keys of shards ss of rows rows each (chunked's).
func shardRows(rows int, ss ...int) []string {
	var out []string
	for _, s := range ss {
		for r := range rows {
			out = append(out, fixture.RowKey(s, r))
		}
	}
	return out
}

// TestStateHandsEveryRowOnceInEqualSteps: rows fed in, steps taken by two
// ranks: a rank asking before any row waits, changing nothing; then every
// row of every epoch is handed out once, each rank takes as many steps
// per epoch, the last one ends the epoch, and every rank is told the end.
func TestStateHandsEveryRowOnceInEqualSteps(t *testing.T) {
	job := fixture.Job("state", 2, 2, fixture.Layout{{3, 2}, {4}})
	st := loadedState(t, job, readerstate.Config{WorldSize: 2})
	st.Changed = false
	if parts := takeStep(t, st, 2, []int{0, 1}, nil, false); parts != nil || st.Changed {
		t.Fatalf("before any row: parts %v, changed %t; want a wait and no change", parts, st.Changed)
	}
	var msgs []fixture.OutputMsg
	for e := range 2 {
		msgs = append(msgs, fixture.Chunked(t, job, e, 0, []int{3, 2}, true)...)
		msgs = append(msgs, fixture.Chunked(t, job, e, 1, []int{4}, true)...)
	}
	feedState(t, st, msgs)
	got := map[int][]string{}
	steps := [2]map[int]int{{}, {}}
	for last := false; !last; {
		parts := takeStep(t, st, 2, []int{0, 1}, nil, false)
		if parts == nil {
			t.Fatal("a rank waits with every row in")
		}
		for r, p := range parts {
			got[p.Epoch] = append(got[p.Epoch], rowsOf(p)...)
			steps[r][p.Epoch]++
			last = p.Last && p.Epoch == 1
		}
	}
	for e := range 2 {
		checkOnce(t, got[e], append(shardRows(5, 0), shardRows(4, 1)...))
	}
	for _, r := range []int{0, 1} {
		if _, _, err := st.Take(r, 2, false, stateNow); !errors.Is(err, io.EOF) {
			t.Errorf("rank %d after the last step: %v, want io.EOF", r, err)
		}
	}
	if steps[0][0] != steps[1][0] || steps[0][1] != steps[1][1] {
		t.Errorf("steps per epoch: rank 0 %v, rank 1 %v", steps[0], steps[1])
	}
	if !st.Done() {
		t.Error("every row handed out and every rank told: not done")
	}
	if s := st.Snapshot(stateNow); s.SamplesDelivered != 18 || s.Epochs != 2 {
		t.Errorf("stats: %d delivered, %d epochs; want 18, 2", s.SamplesDelivered, s.Epochs)
	}
}

// TestStateTakesARetryChunkedDifferentlyExactlyOnce is reproduction 2 of
// issue 24 stateNow the state's level: a shard's send cut after two chunks of
// 4 rows, a step handed out of them, then its retry chunked as 2 of 6
// (another function version): every row once, none lost, nothing failed.
func TestStateTakesARetryChunkedDifferentlyExactlyOnce(t *testing.T) {
	job := fixture.Job("state-rechunk", 1, 4, fixture.Layout{{4, 4, 4}})
	st := loadedState(t, job, readerstate.Config{WorldSize: 1})
	first := fixture.Chunked(t, job, 0, 0, []int{4, 4, 4}, true)
	feedState(t, st, first[:2]) // cut after two chunks
	var got []string
	parts := takeStep(t, st, 1, []int{0}, nil, false)
	if parts == nil {
		t.Fatal("no step of the first send's 8 rows")
	}
	got = append(got, rowsOf(parts[0])...)
	feedState(t, st, fixture.Chunked(t, job, 0, 0, []int{6, 6}, true))
	for {
		parts := takeStep(t, st, 1, []int{0}, nil, false)
		if parts == nil {
			t.Fatal("the rank waits with every row in")
		}
		got = append(got, rowsOf(parts[0])...)
		if parts[0].Last {
			break
		}
	}
	checkOnce(t, got, shardRows(12, 0))
	if s := st.Snapshot(stateNow); len(s.FailedSamples) > 0 || s.SamplesDelivered != 12 {
		t.Errorf("%d delivered, failed %v; want 12, none", s.SamplesDelivered, s.FailedSamples)
	}
}

// checkpointAfter is the state a trainer checkpoints after part p's step,
// and its position restored.
func checkpointAfter(t *testing.T, job wire.Job, p readerstate.RankPart) (readerstate.TrainerState, *assembly.Assembler) {
	t.Helper()
	pos, err := assembly.DecodePosition(p.Position)
	if err != nil {
		t.Fatal(err)
	}
	fresh := assembly.NewAssembler(job)
	if err := fresh.Restore(pos); err != nil {
		t.Fatal(err)
	}
	return readerstate.TrainerState{Version: readerstate.StateVersion, Epoch: p.Epoch, Step: p.Step + 1, WorldSize: p.World, Position: json.RawMessage(p.Position)}, fresh
}

// teamOfTwo is a team's state: the planner serves ranks 0,1 and holds
// shards 0,1; member m serves ranks 2,3 and holds shards 2,3 (told as
// notes); each shard is one chunk of 4 rows, batches of 2: two steps.
func teamOfTwo(t *testing.T) (*readerstate.State, *readerstate.TeamState, wire.Job, []fixture.OutputMsg) {
	t.Helper()
	job := fixture.Job("state-team", 1, 2, fixture.Layout{{4}, {4}, {4}, {4}})
	st := loadedState(t, job, readerstate.Config{WorldSize: 4})
	team := readerstate.NewTeamState(4, []int{0, 1})
	st.Steps = team
	if _, err := team.JoinMember(st, "m", "nonce-of-m-000000", []int{2, 3}, 4, false, stateNow); err != nil {
		t.Fatal(err)
	}
	var ends []fixture.OutputMsg
	for s := range 4 {
		msgs := fixture.Chunked(t, job, 0, s, []int{4}, true)
		ends = append(ends, msgs[1])
		if s < 2 {
			feedState(t, st, msgs[:1])
			continue
		}
		_, sc, first, err := assembly.SplitChunkAt(msgs[0].Data)
		if err != nil {
			t.Fatal(err)
		}
		ref := msgs[0].Ref
		if _, err := st.Intake(ref, false, stateNow, func() (assembly.Outcome, error) { return team.AddRemote(st, ref, "m", first, 4, sc, "") }); err != nil {
			t.Fatal(err)
		}
	}
	return st, team, job, ends
}

// TestStateFastRestartSupersedesTheOldGeneration is reproduction 1 of
// issue 24 stateNow the state's level: a trainer restarted from its checkpoint
// stateNow once (a torchrun elastic restart) resumes while its member's poll of
// the old generation still asks for rank 2's part. The old request may
// take no part once the new generation resumed; the new generation's
// ranks get every row after the checkpoint once, in equal steps, each
// part carrying the new generation.
func TestStateFastRestartSupersedesTheOldGeneration(t *testing.T) {
	st, team, job, ends := teamOfTwo(t)
	step0 := takeStep(t, st, 4, []int{0, 1, 2, 3}, team.Holders, false)
	if step0 == nil {
		t.Fatal("no first step: every agent holds two full batches")
	}
	var got []string
	for _, p := range step0 {
		got = append(got, rowsOf(p)...)
	}
	old := team.Ticket(st, "m") // the member's poll, its trainer killed
	if old == nil || old() {
		t.Fatal("the member's ticket of the first generation is superseded before any resume")
	}

	// The new generation resumes from the checkpoint taken after step 0.
	state, fresh := checkpointAfter(t, job, step0[0])
	if _, replay, err := st.Rewind(readerstate.ResumeRequest{State: state, World: 4}, 4, fresh, step0[0].Position, stateNow); err != nil || replay != nil {
		t.Fatalf("rewind to the step the ranks were stateNow: replay %v, %v; want none", replay, err)
	}
	if !old() {
		t.Fatal("the first generation's ticket is not superseded by the resume")
	}
	if _, wait, err := st.Take(2, 4, old(), stateNow); !errors.Is(err, readerstate.ErrSuperseded) || wait {
		t.Fatalf("the old generation's request for rank 2: wait %t, %v; want errSuperseded", wait, err)
	}

	feedState(t, st, ends) // the epoch is cut: its last step is planned
	now := team.Ticket(st, "m")
	step1 := takeStep(t, st, 4, []int{0, 1, 2, 3}, team.Holders, now())
	if step1 == nil {
		t.Fatal("no last step for the new generation")
	}
	for r, p := range step1 {
		if p.Gen != st.Gens.N || p.Step != 1 || !p.Last {
			t.Errorf("rank %d: generation %d step %d last %t; want generation %d, the last step 1", r, p.Gen, p.Step, p.Last, st.Gens.N)
		}
		got = append(got, rowsOf(p)...)
	}
	checkOnce(t, got, shardRows(4, 0, 1, 2, 3))
	if !slices.Equal(team.Holders, []string{"", "", "m", "m"}) {
		t.Errorf("holders %q after the resume", team.Holders)
	}
}

// TestStateResumeRewindsAStepTakenByAGoneGeneration: the old generation
// took step 1 (its trainer then killed before its checkpoint); the new
// one resumes from step 0's position: the memory is rewound, the shards
// whose rows were handed out are produced again, and the new generation
// gets those rows once.
func TestStateResumeRewindsAStepTakenByAGoneGeneration(t *testing.T) {
	job := fixture.Job("state-resume", 1, 2, fixture.Layout{{4}, {4}})
	st := loadedState(t, job, readerstate.Config{WorldSize: 2})
	var msgs []fixture.OutputMsg
	for s := range 2 {
		msgs = append(msgs, fixture.Chunked(t, job, 0, s, []int{4}, true)...)
	}
	feedState(t, st, msgs)
	step0 := takeStep(t, st, 2, []int{0, 1}, nil, false)
	if takeStep(t, st, 2, []int{0, 1}, nil, false) == nil { // taken, never seen by the trainer
		t.Fatal("no second step")
	}
	state, fresh := checkpointAfter(t, job, step0[0])
	res, replay, err := st.Rewind(readerstate.ResumeRequest{State: state, World: 2}, 2, fresh, nil, stateNow)
	if err != nil || replay == nil || !st.Resuming {
		t.Fatalf("rewind: %+v, replay %v, resuming %t, %v; want a replay", res, replay, st.Resuming, err)
	}
	if parts := takeStep(t, st, 2, []int{0, 1}, nil, false); parts != nil {
		t.Fatal("a step formed while the resume is not done")
	}
	st.ResumeDone(&readerstate.ResumeRecord{State: state, World: 2, Result: res})
	for e, ss := range replay { // the dispatcher produces them again
		for _, s := range ss {
			feedState(t, st, fixture.Chunked(t, job, e, s, []int{4}, true))
		}
	}
	got := rowsOf(step0[0])
	got = append(got, rowsOf(step0[1])...)
	for {
		parts := takeStep(t, st, 2, []int{0, 1}, nil, false)
		if parts == nil {
			t.Fatal("the ranks wait with the replayed rows in")
		}
		got = append(got, rowsOf(parts[0])...)
		got = append(got, rowsOf(parts[1])...)
		if parts[0].Last {
			break
		}
	}
	checkOnce(t, got, shardRows(4, 0, 1))
}
