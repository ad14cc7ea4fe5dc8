package stepplan

import (
	"maps"
	"slices"
)

// The team policy: how the global steps of a reader are formed when its
// ranks are served by several agents (a team, one agent per node; see
// readerstate's team.go), each holding the rows of the shards it took from the job's
// queue. A rank's rows should come from its own agent (bytes do not cross
// nodes), every rank still takes the same number of steps per epoch, and
// the epoch's last step still splits the rest evenly: near the end of an
// epoch one agent may hold rows another agent's ranks need, and those are
// produced again there (functions are deterministic).

// TeamBatch is one ready batch as the team policy sees it: which agent
// holds its rows and how many there are.
type TeamBatch struct {
	Holder string
	Rows   int
}

// TeamSupply is what the team policy knows of the epoch the ranks are in.
type TeamSupply struct {
	// Ready are the epoch's ready batches in order: full (batchSize) but,
	// once the epoch is cut, each holder's last.
	Ready []TeamBatch
	// Pending are the samples waiting in partial batches, every holder's.
	Pending int
	// Cut says every chunk of the epoch arrived.
	Cut bool
}

// TeamPlan is TeamStep's decision.
type TeamPlan struct {
	// Action is StepWait, StepFull (Take), StepRest (the epoch is cut:
	// Rest plans all that is left of it) or StepEpochDone.
	Action Action
	// Take is, per rank, the index in Ready of its batch (StepFull).
	Take []int
}

// TeamStep decides the epoch's next step for ranks whose agents are
// holders[r], of batchSize samples each. Before the epoch is cut a step
// is full: each rank gets the next full batch its own agent holds, and it
// is formed only if every agent has one for each of its ranks and another
// step is known to follow (as Step). Once the epoch is cut, all that
// is left of it is planned at once (Rest).
func TeamStep(s TeamSupply, holders []string, batchSize int, dropLast bool) TeamPlan {
	world := len(holders)
	if s.Cut {
		if len(s.Ready) == 0 {
			return TeamPlan{Action: StepEpochDone}
		}
		return TeamPlan{Action: StepRest}
	}
	full := map[string][]int{} // per holder, its full batches in order
	rows := s.Pending
	for i, b := range s.Ready {
		rows += b.Rows
		if b.Rows == batchSize {
			full[b.Holder] = append(full[b.Holder], i)
		}
	}
	take := make([]int, world)
	for r, h := range holders {
		if len(full[h]) == 0 {
			return TeamPlan{Action: StepWait}
		}
		take[r], full[h] = full[h][0], full[h][1:]
		rows -= batchSize
	}
	more := rows > 0
	if dropLast {
		more = rows >= world*batchSize
	}
	if !more {
		return TeamPlan{Action: StepWait}
	}
	return TeamPlan{Action: StepFull, Take: take}
}

// Draw says that a rank's part takes the next n rows of holder's rows.
type Draw struct {
	Holder string
	N      int
}

// Rest plans every step left of a cut epoch whose holders hold rows[h]
// samples (each in order): steps[j][r] are the draws of rank r in step j,
// and dropped[h] the rows of h that drop_last leaves out (the last of each
// holder's). The steps are full but the last, which splits the rest by
// tailSizes (or is dropped, with dropLast). Each rank takes its own
// agent's rows while that agent has rows its ranks need; an agent short of
// rows takes, for its ranks, the surplus of others. Every holder's rows
// are drawn from the front, step by step and rank by rank, so the rows of
// each chunk are handed out in order (a position records leading rows).
func Rest(rows map[string]int, holders []string, batchSize int, dropLast bool) (steps [][][]Draw, dropped map[string]int) {
	world := len(holders)
	total := 0
	for _, n := range rows {
		total += n
	}
	full := total / (world * batchSize)
	var tail []int
	if rest := total - full*world*batchSize; rest > 0 && !dropLast {
		tail = tailSizes(rest, world)
	}
	sizes := func(j, r int) int {
		if j < full {
			return batchSize
		}
		return tail[r]
	}
	nSteps := full
	if tail != nil {
		nSteps++
	}
	// own[h]: rows of h its own ranks take; surplus[h]: rows it gives.
	need := map[string]int{}
	for r, h := range holders {
		for j := range nSteps {
			need[h] += sizes(j, r)
		}
	}
	own, surplus := map[string]int{}, map[string]int{}
	deficit := 0
	for h, n := range need {
		deficit += max(n-rows[h], 0)
	}
	for h, n := range rows {
		own[h] = min(n, need[h])
		surplus[h] = n - own[h]
	}
	givers := slices.Sorted(maps.Keys(surplus))
	if dropLast {
		// What no rank takes is dropped: the givers' surplus beyond the
		// others' deficits, the last rows of each.
		dropped = map[string]int{}
		for _, g := range givers {
			give := min(surplus[g], deficit)
			deficit -= give
			if surplus[g] > give {
				dropped[g] = surplus[g] - give
			}
		}
	}
	for j := range nSteps {
		step := make([][]Draw, world)
		for r, h := range holders {
			q := sizes(j, r)
			if k := min(q, own[h]); k > 0 {
				step[r] = append(step[r], Draw{h, k})
				own[h] -= k
				q -= k
			}
			for _, g := range givers {
				if q == 0 {
					break
				}
				if k := min(q, surplus[g]-dropped[g]); k > 0 {
					step[r] = append(step[r], Draw{g, k})
					surplus[g] -= k
					q -= k
				}
			}
		}
		steps = append(steps, step)
	}
	return steps, dropped
}
