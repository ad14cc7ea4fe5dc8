package readerstate

import (
	"errors"
	"strings"
	"testing"
)

// apply applies a rank's resume to g as the reader does and says what it
// was: "new" (a rewind, settled at once), "join" or "conflict".
func apply(g *Generations, req ResumeRequest) string {
	v, err := g.decide(req)
	switch {
	case err != nil:
		return "conflict"
	case v == resumeJoins:
		g.Join(req.Rank, req.ID)
		return "join"
	}
	g.start(&ResumeRecord{State: req.State, World: req.World, Token: req.Token}, req.Rank, req.ID)
	g.settle(&ResumeRecord{State: req.State, World: req.World, Token: req.Token, Result: ResumeResult{Resumed: true, ReplayedShards: 3}})
	return "new"
}

// TestGenerations drives the book of generations through a DDP job's
// life, step by step, with values (no generation token: the book goes by
// which ranks resumed).
func TestGenerations(t *testing.T) {
	s0 := TrainerState{Version: StateVersion, Epoch: 0, Step: 5, WorldSize: 4, Position: []byte(`{"v":1,"a":1}`)}
	s0again := s0
	s0again.Position = []byte(` { "a": 1, "v": 1 } `) // the same position, re-encoded
	s1 := TrainerState{Version: StateVersion, Epoch: 1, Step: 2, WorldSize: 4, Position: []byte(`{"v":1,"a":2}`)}
	var g Generations
	for i, step := range []struct {
		st          TrainerState
		world, rank int
		id, want    string
		gen         uint64
	}{
		// The first resume of an agent's life rewinds.
		{s0, 4, 2, "", "new", 1},
		// The generation's other ranks join it, in any order, however
		// late (the ranks that resumed first were served meanwhile).
		{s0, 4, 0, "", "join", 1},
		{s0again, 4, 3, "", "join", 1},
		// A member's forward sent again is answered as the first.
		{s0, 4, 1, "m1", "join", 1},
		{s0, 4, 1, "m1", "join", 1},
		// A rank resuming again in its generation: a new process, so a
		// new generation (torchrun restarted the job).
		{s0, 4, 0, "", "new", 2},
		{s0, 4, 1, "m2", "join", 2},
		// A rank new to the generation with another checkpoint: refused.
		{s1, 4, 2, "", "conflict", 2},
		{s0, 4, 2, "", "join", 2},
		// Another world size is a new generation, whoever comes first.
		{s1, 3, 2, "", "new", 3},
		{s1, 3, 0, "", "join", 3},
	} {
		req := ResumeRequest{State: step.st, World: step.world, Rank: step.rank, ID: step.id}
		if got := apply(&g, req); got != step.want || g.N != step.gen {
			t.Fatalf("step %d: rank %d's resume: %s in generation %d, want %s in %d", i, step.rank, got, g.N, step.want, step.gen)
		}
	}
	// Ranks of the generation before that did not resume in this one
	// must before they take a part: rank 1 resumed in generation 2, rank
	// 3 only in generation 1.
	for r, want := range map[int]bool{0: false, 1: true, 2: false, 3: false} {
		err := g.mustResume(r)
		if (err != nil) != want || err != nil && !errors.Is(err, ErrResumeConflict) {
			t.Errorf("rank %d: mustResume %v, want an error: %t", r, err, want)
		}
	}
	if apply(&g, ResumeRequest{State: s1, World: 3, Rank: 1}) != "join" || g.mustResume(1) != nil {
		t.Errorf("rank 1 resumed in generation 3: it may take parts")
	}
	// A failed resume leaves no generation to join: the next rewinds.
	g.start(&ResumeRecord{State: s0, World: 4}, 0, "")
	g.settle(nil)
	if got := apply(&g, ResumeRequest{State: s0, World: 4, Rank: 1}); got != "new" {
		t.Errorf("after a failed resume: %s, want new", got)
	}
}

// TestGenerationsWithTokens: when the client names the trainer's run, a
// resume of another run starts a generation whoever resumed before, and
// one of the same run joins it, checked against its state and world
// size. The case tokens exist for: a launch killed during its resume,
// and a rank of the next launch that never resumed in it arriving first.
func TestGenerationsWithTokens(t *testing.T) {
	s0 := TrainerState{Version: StateVersion, Epoch: 1, Step: 0, WorldSize: 4, Position: []byte(`{"v":1,"a":1}`)}
	s1 := s0
	s1.Step = 3
	var g Generations
	for i, step := range []struct {
		st          TrainerState
		world, rank int
		token, want string
		gen         uint64
	}{
		{s0, 4, 1, "run2", "new", 1},
		{s0, 4, 2, "run2", "join", 1},
		// Run 2 is killed while ranks 0 and 3 had not resumed; run 3's
		// rank 0 comes first: without a token it would join run 2.
		{s0, 4, 0, "run3", "new", 2},
		{s0, 4, 2, "run3", "join", 2},
		{s0, 4, 1, "run3", "join", 2},
		// A rank of the run with another checkpoint or world size: refused.
		{s1, 4, 3, "run3", "conflict", 2},
		{s0, 2, 3, "run3", "conflict", 2},
		{s0, 4, 3, "run3", "join", 2},
		// A retried resume of a rank of the run joins again.
		{s0, 4, 3, "run3", "join", 2},
		// A client without a token goes by the ranks that resumed.
		{s0, 4, 0, "", "new", 3},
	} {
		req := ResumeRequest{State: step.st, World: step.world, Rank: step.rank, Token: step.token}
		if got := apply(&g, req); got != step.want || g.N != step.gen {
			t.Fatalf("step %d: rank %d of %q: %s in generation %d, want %s in %d", i, step.rank, step.token, got, g.N, step.want, step.gen)
		}
	}
	for _, bad := range []string{strings.Repeat("x", maxGeneration+1), "a b", "r\n", "é"} {
		if err := CheckGeneration(bad); !errors.Is(err, ErrBadState) {
			t.Errorf("generation %q: %v, want ErrBadState", bad, err)
		}
	}
	if err := CheckGeneration("torchrun-3f2a/0"); err != nil {
		t.Error(err)
	}
}

// TestGenerationsConflictNamesBothPositions: the refusal of a mixture
// names the rank's state and the generation's, and the ranks that
// resumed from it.
func TestGenerationsConflictNamesBothPositions(t *testing.T) {
	a := TrainerState{Version: StateVersion, Epoch: 0, Step: 5, WorldSize: 2, Position: []byte(`{"v":1,"a":1}`)}
	b := TrainerState{Version: StateVersion, Epoch: 0, Step: 7, WorldSize: 2, Position: []byte(`{"v":1,"a":2}`)}
	var g Generations
	g.start(&ResumeRecord{State: a, World: 2}, 0, "")
	g.settle(&ResumeRecord{State: a, World: 2})
	_, err := g.decide(ResumeRequest{State: b, World: 2, Rank: 1})
	if !errors.Is(err, ErrResumeConflict) {
		t.Fatalf("a second checkpoint: %v, want ErrResumeConflict", err)
	}
	for _, want := range []string{"rank 1 resumes from epoch 0 step 7", "resumed from epoch 0 step 5", "(ranks 0)", describeState(a), describeState(b)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if describeState(a) == describeState(b) {
		t.Errorf("two positions described alike: %s", describeState(a))
	}
}
