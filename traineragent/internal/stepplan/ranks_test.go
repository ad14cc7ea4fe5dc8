package stepplan

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPlanStep(t *testing.T) {
	const b = 4
	for _, tc := range []struct {
		name     string
		supply   EpochSupply
		world    int
		dropLast bool
		want     Plan
	}{
		{"nothing yet", EpochSupply{}, 2, false, Plan{Action: StepWait}},
		{"one rank short", EpochSupply{Ready: []int{b}, Pending: 3}, 2, false, Plan{Action: StepWait}},
		{"full step, more ready", EpochSupply{Ready: []int{b, b, b}}, 2, false, Plan{Action: StepFull, Batches: 2}},
		{"full step, more pending", EpochSupply{Ready: []int{b, b}, Pending: 1}, 2, false, Plan{Action: StepFull, Batches: 2}},
		// Nothing known to follow: it could be the epoch's last step.
		{"full step held back", EpochSupply{Ready: []int{b, b}}, 2, false, Plan{Action: StepWait}},
		{"last full step", EpochSupply{Ready: []int{b, b}, Cut: true}, 2, false, Plan{Action: StepFull, Batches: 2, Last: true}},
		{"full step before the tail", EpochSupply{Ready: []int{b, b, 3}, Cut: true}, 2, false, Plan{Action: StepFull, Batches: 2}},
		{"full step before a dropped tail is last", EpochSupply{Ready: []int{b, b, b, 3}, Cut: true}, 3, true,
			Plan{Action: StepFull, Batches: 3, Last: true}},
		{"tail of full and partial", EpochSupply{Ready: []int{b, 3}, Cut: true}, 3, false,
			Plan{Action: StepTail, Batches: 2, Sizes: []int{3, 2, 2}, Last: true}},
		{"tail smaller than the world", EpochSupply{Ready: []int{2}, Cut: true}, 3, false,
			Plan{Action: StepTail, Batches: 1, Sizes: []int{1, 1, 0}, Last: true}},
		{"tail of one rank", EpochSupply{Ready: []int{3}, Cut: true}, 1, false,
			Plan{Action: StepTail, Batches: 1, Sizes: []int{3}, Last: true}},
		{"tail dropped", EpochSupply{Ready: []int{b, 3}, Cut: true}, 3, true, Plan{Action: StepDrop, Batches: 2}},
		{"epoch done", EpochSupply{Cut: true}, 2, false, Plan{Action: StepEpochDone}},
		{"one rank, full batch", EpochSupply{Ready: []int{b}, Pending: 1}, 1, false, Plan{Action: StepFull, Batches: 1}},
		// drop_last: samples that may all be dropped do not make another
		// step certain, so the step waits for the cut (the arrival order
		// once left it unmarked as last: a CI flake of TestRanksDropLast).
		{"drop_last, too few pending for another step", EpochSupply{Ready: []int{b, b, b}, Pending: 2}, 3, true, Plan{Action: StepWait}},
		{"drop_last, a full step more pending", EpochSupply{Ready: []int{b, b, b, b}, Pending: 2*b + 1}, 3, true,
			Plan{Action: StepFull, Batches: 3}},
		{"drop_last, another full step ready", EpochSupply{Ready: []int{b, b, b, b, b, b}}, 3, true, Plan{Action: StepFull, Batches: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Step(tc.supply, tc.world, b, tc.dropLast)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("planStep(%+v, world %d, drop_last %t) (-want +got):\n%s", tc.supply, tc.world, tc.dropLast, diff)
			}
		})
	}
}

// TestPlanStepServesAnEpochEvenly plays whole epochs through Step:
// every sample goes to exactly one rank, every rank takes the same number
// of steps, and a step's parts differ by at most one sample.
func TestPlanStepServesAnEpochEvenly(t *testing.T) {
	const b = 4
	for _, samples := range []int{0, 1, 3, 4, 7, 8, 11, 12, 13, 24, 25, 31} {
		for world := 1; world <= 4; world++ {
			for _, dropLast := range []bool{false, true} {
				var ready []int
				for n := samples; n > 0; n -= b {
					ready = append(ready, min(n, b))
				}
				served, dropped, steps, lasts := 0, 0, 0, 0
				for range 100 {
					plan := Step(EpochSupply{Ready: ready, Cut: true}, world, b, dropLast)
					if plan.Action == StepEpochDone {
						break
					}
					n := 0
					for _, k := range ready[:plan.Batches] {
						n += k
					}
					ready = ready[plan.Batches:]
					switch plan.Action {
					case StepFull:
						if n != world*b {
							t.Fatalf("%d samples, world %d: a full step of %d samples", samples, world, n)
						}
						served += n
						steps++
					case StepTail:
						lo, hi := plan.Sizes[0], plan.Sizes[len(plan.Sizes)-1]
						if len(plan.Sizes) != world || lo-hi > 1 || lo < hi {
							t.Fatalf("%d samples, world %d: tail sizes %v", samples, world, plan.Sizes)
						}
						served += n
						steps++
					case StepDrop:
						dropped += n
					default:
						t.Fatalf("%d samples, world %d: %v with the epoch cut", samples, world, plan.Action)
					}
					if plan.Last {
						lasts++
					}
				}
				wantSteps := (samples + world*b - 1) / (world * b)
				if dropLast {
					wantSteps = samples / (world * b)
				}
				wantDropped := 0
				if dropLast {
					wantDropped = samples % (world * b)
				}
				if served+dropped != samples || steps != wantSteps || dropped != wantDropped {
					t.Errorf("%d samples, world %d, drop_last %t: %d served, %d dropped in %d steps, want %d steps",
						samples, world, dropLast, served, dropped, steps, wantSteps)
					continue
				}
				if wantLasts := min(steps, 1); lasts != wantLasts {
					t.Errorf("%d samples, world %d, drop_last %t: %d steps marked last, want %d", samples, world, dropLast, lasts, wantLasts)
				}
			}
		}
	}
}

func TestTailSizes(t *testing.T) {
	for _, tc := range []struct {
		n, world int
		want     []int
	}{
		{0, 2, []int{0, 0}},
		{1, 3, []int{1, 0, 0}},
		{5, 3, []int{2, 2, 1}},
		{6, 3, []int{2, 2, 2}},
		{7, 1, []int{7}},
	} {
		if got := tailSizes(tc.n, tc.world); !cmp.Equal(got, tc.want) {
			t.Errorf("tailSizes(%d, %d) = %v, want %v", tc.n, tc.world, got, tc.want)
		}
	}
}
