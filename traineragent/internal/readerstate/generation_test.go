package readerstate

import (
	"errors"
	"strings"
	"testing"
)

// TestGenerations drives the book of generations through a DDP job's
// life, step by step, with values.
func TestGenerations(t *testing.T) {
	s0 := TrainerState{Version: StateVersion, Epoch: 0, Step: 5, WorldSize: 4, Position: []byte(`{"v":1,"a":1}`)}
	s0again := s0
	s0again.Position = []byte(` { "a": 1, "v": 1 } `) // the same position, re-encoded
	s1 := TrainerState{Version: StateVersion, Epoch: 1, Step: 2, WorldSize: 4, Position: []byte(`{"v":1,"a":2}`)}
	var g Generations
	// do applies rank's resume as the reader does and says what it was.
	do := func(st TrainerState, world, rank int, id string) string {
		v, err := g.decide(st, world, rank, id)
		switch {
		case err != nil:
			return "conflict"
		case v == resumeJoins:
			g.Join(rank, id)
			return "join"
		}
		g.start(&ResumeRecord{State: st, World: world}, rank, id)
		g.settle(&ResumeRecord{State: st, World: world, Result: ResumeResult{Resumed: true, ReplayedShards: 3}})
		return "new"
	}
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
		if got := do(step.st, step.world, step.rank, step.id); got != step.want || g.N != step.gen {
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
	if do(s1, 3, 1, "") != "join" || g.mustResume(1) != nil {
		t.Errorf("rank 1 resumed in generation 3: it may take parts")
	}
	// A failed resume leaves no generation to join: the next rewinds.
	g.start(&ResumeRecord{State: s0, World: 4}, 0, "")
	g.settle(nil)
	if got := do(s0, 4, 1, ""); got != "new" {
		t.Errorf("after a failed resume: %s, want new", got)
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
	_, err := g.decide(b, 2, 1, "")
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
