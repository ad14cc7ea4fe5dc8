package stepplan

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPlanTeamStep(t *testing.T) {
	const b = 4
	full := func(h string) TeamBatch { return TeamBatch{h, b} }
	for _, tc := range []struct {
		name     string
		s        TeamSupply
		holders  []string
		dropLast bool
		want     TeamPlan
	}{
		{"each rank its own agent's batch", TeamSupply{Ready: []TeamBatch{full("a"), full("b"), full("a"), full("b"), full("a")}},
			[]string{"a", "a", "b"}, false, TeamPlan{Action: StepFull, Take: []int{0, 2, 1}}},
		{"an agent without a batch for each of its ranks", TeamSupply{Ready: []TeamBatch{full("a"), full("a"), full("a"), full("b")}, Pending: 9},
			[]string{"a", "b", "b"}, false, TeamPlan{Action: StepWait}},
		{"no step known to follow", TeamSupply{Ready: []TeamBatch{full("a"), full("b")}},
			[]string{"a", "b"}, false, TeamPlan{Action: StepWait}},
		{"pending samples follow", TeamSupply{Ready: []TeamBatch{full("a"), full("b")}, Pending: 1},
			[]string{"a", "b"}, false, TeamPlan{Action: StepFull, Take: []int{0, 1}}},
		{"drop_last: a full step's worth must follow", TeamSupply{Ready: []TeamBatch{full("a"), full("b"), full("a")}, Pending: 3},
			[]string{"a", "b"}, true, TeamPlan{Action: StepWait}},
		{"drop_last: it does", TeamSupply{Ready: []TeamBatch{full("a"), full("b"), full("a")}, Pending: 4},
			[]string{"a", "b"}, true, TeamPlan{Action: StepFull, Take: []int{0, 1}}},
		{"cut: the rest is planned at once", TeamSupply{Ready: []TeamBatch{full("a"), full("b"), {"a", 1}}, Cut: true},
			[]string{"a", "b"}, false, TeamPlan{Action: StepRest}},
		{"cut and nothing left", TeamSupply{Cut: true}, []string{"a", "b"}, false, TeamPlan{Action: StepEpochDone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TeamStep(tc.s, tc.holders, b, tc.dropLast)
			if got.Action != tc.want.Action || !slices.Equal(got.Take, tc.want.Take) {
				t.Errorf("got %v %v, want %v %v", got.Action, got.Take, tc.want.Action, tc.want.Take)
			}
		})
	}
}

// TestPlanRestOneHolderIsPlanStep: with one agent the plan is what the
// single-agent policy does: full steps of consecutive batches, then the
// tail split by tailSizes (or dropped).
func TestPlanRestOneHolderIsPlanStep(t *testing.T) {
	for world := 1; world <= 4; world++ {
		for total := 0; total <= 40; total++ {
			for _, dropLast := range []bool{false, true} {
				holders := make([]string, world)
				steps, dropped := Rest(map[string]int{"": total}, holders, 3, dropLast)
				full := total / (world * 3)
				rest := total - full*world*3
				wantSteps := full
				if rest > 0 && !dropLast {
					wantSteps++
				}
				if len(steps) != wantSteps {
					t.Fatalf("world %d, %d rows, drop_last %t: %d steps, want %d", world, total, dropLast, len(steps), wantSteps)
				}
				for j, step := range steps {
					for r, ds := range step {
						want := 3
						if j == full {
							want = tailSizes(rest, world)[r]
						}
						got := 0
						for _, d := range ds {
							got += d.N
						}
						if got != want || len(ds) > 1 {
							t.Fatalf("world %d, %d rows: step %d rank %d: draws %v, want one of %d", world, total, j, r, ds, want)
						}
					}
				}
				if dropLast && dropped[""] != rest {
					t.Fatalf("world %d, %d rows: dropped %v, want %d", world, total, dropped, rest)
				}
			}
		}
	}
}

// TestPlanRestProperties: for random holders, layouts and row counts,
// every rank takes the same number of steps, full but the last, which
// splits the rest evenly; every row is drawn once or dropped; a rank
// takes another agent's rows only when its own has none left for it.
func TestPlanRestProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"", "b", "c"}
	for range 3000 {
		nh := 1 + rng.IntN(3)
		world := nh + rng.IntN(4)
		holders := make([]string, world)
		for r := range holders {
			holders[r] = names[rng.IntN(nh)]
		}
		for r := range nh { // every agent serves a rank
			holders[r] = names[r]
		}
		rng.Shuffle(world, func(i, j int) { holders[i], holders[j] = holders[j], holders[i] })
		rows := map[string]int{}
		total := 0
		for _, h := range names[:nh] {
			if n := rng.IntN(30); n > 0 || rng.IntN(2) == 0 {
				rows[h] = n
				total += n
			}
		}
		batch := 1 + rng.IntN(5)
		dropLast := rng.IntN(3) == 0
		steps, dropped := Rest(rows, holders, batch, dropLast)

		full := total / (world * batch)
		rest := total - full*world*batch
		drawn := map[string]int{}
		for j, step := range steps {
			for r, ds := range step {
				want := batch
				if j == full {
					want = tailSizes(rest, world)[r]
				}
				got := 0
				for i, d := range ds {
					got += d.N
					drawn[d.Holder] += d.N
					if d.Holder != holders[r] && i == 0 && rows[holders[r]] > 0 && drawn[holders[r]] < rows[holders[r]]-dropped[holders[r]] {
						t.Fatalf("%v rows %v batch %d: step %d rank %d takes %v with its own agent's rows left", holders, rows, batch, j, r, ds)
					}
				}
				if got != want {
					t.Fatalf("%v rows %v batch %d drop_last %t: step %d rank %d gets %d rows, want %d", holders, rows, batch, dropLast, j, r, got, want)
				}
			}
		}
		if want := full + btoi(rest > 0 && !dropLast); len(steps) != want {
			t.Fatalf("%v rows %v batch %d: %d steps, want %d", holders, rows, batch, len(steps), want)
		}
		for h, n := range rows {
			if drawn[h]+dropped[h] != n {
				t.Fatalf("%v rows %v batch %d drop_last %t: holder %q: %d drawn + %d dropped, want %d", holders, rows, batch, dropLast, h, drawn[h], dropped[h], n)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
