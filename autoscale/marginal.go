package autoscale

import (
	"math"
	"sort"
	"time"
)

// Bid is what one job brings to AllocateMarginal: its claim (the replicas
// its decision wants, its weight) and what one more replica is worth to its
// trainer.
type Bid struct {
	Claim
	// PerReplica is one replica's learned throughput (samples/s) and
	// Appetite the trainer's unstalled appetite (samples/s, Decide's D);
	// with both known the job needs Appetite/PerReplica replicas to run its
	// trainer at full speed. Either 0: unknown, and Want is taken as what
	// the trainer needs (the policy sized it from the same figures).
	PerReplica, Appetite float64
	// Starved is how long the job has wanted replicas and been granted
	// none.
	Starved time.Duration
}

// MarginalOptions tune AllocateMarginal.
type MarginalOptions struct {
	// MinShare is the share of its weighted max-min fair grant (Allocate)
	// every job keeps whatever its gain, at least one replica where the
	// fair split gives one: the guaranteed minimum. 0 keeps one replica.
	MinShare float64
	// StarveAfter is how long a job that wants replicas may be granted
	// none before it is given one ahead of every other job's gain (0: at
	// once). Only capacity below the number of jobs, or small weights
	// against large ones, starve a job at all.
	StarveAfter time.Duration
}

// DefaultMarginalOptions keep half the fair grant and let no job wait for
// its first replica more than 10 s.
func DefaultMarginalOptions() MarginalOptions {
	return MarginalOptions{MinShare: 0.5, StarveAfter: 10 * time.Second}
}

// need is how many replicas run the job's trainer at full speed, as the
// gain model sees it.
func (b Bid) need() float64 {
	if b.PerReplica > 0 && b.Appetite > 0 && !math.IsInf(b.Appetite/b.PerReplica, 0) {
		return b.Appetite / b.PerReplica
	}
	return float64(max(b.Want, 1))
}

// Gain is the trainer progress a job makes with n replicas in the
// allocator's model: weight x min(1, n / need), the share of its full speed
// its trainer runs at, weighted. AllocateMarginal maximises its sum.
func (b Bid) Gain(n int) float64 {
	return b.weight() * min(1, float64(max(n, 0))/b.need())
}

// AllocateMarginal shares capacity between jobs by marginal gain: each
// replica beyond the guaranteed minimums goes to the job whose trainer
// gains most from it (Bid.Gain: one replica of a job needing k more is
// worth weight/k of its full speed until its need is covered, nothing
// after). Replicas of equal gain are shared between their jobs weighted
// max-min fairly (Allocate), and replicas no trainer gains from still go
// to the jobs that want them, fairly: like Allocate, the total granted is
// min(capacity, sum of wants) and no job gets more than it wants.
//
// The guaranteed minimum of a job is min(fair, max(1, floor(MinShare x
// fair))) where fair is its Allocate grant; a job starved for StarveAfter
// or more gets one replica before any (longest starved first). Because
// the gain of each job is concave in its replicas, the greedy fill is the
// most total gain of all grants at or above the minimums, and the fair
// split is one of those: so, unless a starved job was served first, the
// total gain is never below the fair split's on the same bids.
func AllocateMarginal(bids map[string]Bid, capacity int, o MarginalOptions) map[string]int {
	names := make([]string, 0, len(bids))
	claims := make(map[string]Claim, len(bids))
	total := 0
	for name, b := range bids {
		names = append(names, name)
		claims[name] = b.Claim
		total += max(b.Want, 0)
	}
	sort.Strings(names)
	fair := Allocate(claims, capacity)
	if total <= capacity {
		return fair // everyone gets what it wants
	}
	out := make(map[string]int, len(bids))
	left := max(capacity, 0)

	// Starved jobs first, the longest starved first.
	var starved []string
	for _, name := range names {
		if b := bids[name]; b.Want > 0 && b.Starved > 0 && b.Starved >= o.StarveAfter {
			starved = append(starved, name)
		}
	}
	sort.SliceStable(starved, func(i, j int) bool { return bids[starved[i]].Starved > bids[starved[j]].Starved })
	for _, name := range starved {
		if left == 0 {
			break
		}
		out[name] = 1
		left--
	}
	// Then the guaranteed minimums, as far as capacity goes.
	for _, name := range names {
		f := fair[name]
		m := min(f, max(1, int(math.Floor(o.MinShare*float64(f)))))
		add := min(max(m-out[name], 0), left)
		out[name] += add
		left -= add
	}

	// The rest by gain: each job's remaining replicas are up to three runs
	// of equal gain per replica (full ones, the one covering the rest of
	// its need, those beyond it), in decreasing gain.
	type run struct {
		name  string
		units int
		gain  float64 // per replica
	}
	var runs []run
	for _, name := range names {
		b := bids[name]
		from, to := out[name], max(b.Want, 0)
		if from >= to {
			continue
		}
		need := b.need()
		per := b.weight() / need
		full := int(math.Floor(need))
		if n := min(full, to) - from; n > 0 {
			runs = append(runs, run{name, n, per})
			from += n
		}
		if frac := need - float64(full); frac > 1e-9 && from == full && from < to {
			runs = append(runs, run{name, 1, per * frac})
			from++
		}
		if from < to {
			runs = append(runs, run{name, to - from, 0})
		}
	}
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].gain > runs[j].gain })
	for i := 0; i < len(runs) && left > 0; {
		// A group of runs of equal gain per replica.
		j, units := i, 0
		for ; j < len(runs) && sameGain(runs[j].gain, runs[i].gain); j++ {
			units += runs[j].units
		}
		if units <= left {
			for _, r := range runs[i:j] {
				out[r.name] += r.units
			}
			left -= units
		} else {
			tie := make(map[string]Claim, j-i)
			for _, r := range runs[i:j] {
				c := tie[r.name]
				tie[r.name] = Claim{Want: c.Want + r.units, Weight: bids[r.name].Weight}
			}
			for name, g := range Allocate(tie, left) {
				out[name] += g
			}
			left = 0
		}
		i = j
	}
	for _, name := range names {
		out[name] += 0 // every job is in the result
	}
	return out
}

func sameGain(a, b float64) bool {
	return math.Abs(a-b) <= 1e-12*max(math.Abs(a), math.Abs(b))
}
