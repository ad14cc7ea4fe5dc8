package autoscale

import (
	"math"
	"sort"
	"time"

	"github.com/sluice-project/sluice/wire"
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
	// Current is how many replicas the job holds now (for Hysteresis).
	Current int
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
	// Hysteresis weighs a replica a job holds now (Bid.Current) 1 +
	// Hysteresis times its gain, so that replicas move between jobs only
	// for a clear gain: a moved replica idles through its cold start, and
	// gains that differ by a rounding of the learned rates would otherwise
	// move replicas back and forth every tick. The sticky grant is used
	// only while it makes at least the fair split's progress.
	Hysteresis float64
}

// DefaultMarginalOptions keep half the fair grant, let no job wait for
// its first replica more than 10 s, and move a replica only for a gain
// 25% above what it makes where it is.
func DefaultMarginalOptions() MarginalOptions {
	return MarginalOptions{MinShare: 0.5, StarveAfter: 10 * time.Second, Hysteresis: 0.25}
}

// maxReadableStall is the stall above which a demand signal only bounds
// the trainer's appetite from below: Decide's D divides by at most 1/0.1.
const maxReadableStall = 0.9

// NextAppetite is the trainer's appetite (samples/s at full speed) to bid
// with after signal d, given the one kept from earlier signals (0: none).
// A signal with the trainer stalled under 90% of the time reads it:
// ConsumedPerS / (1 - StallFraction). A more stalled trainer's signal only
// says it is at least ConsumedPerS / 0.1, and the kept appetite stays if
// higher: otherwise a starved job would look as if it needed fewer
// replicas than it does, win replicas for it, look hungrier once fed,
// lose them again, and replicas would swing between starved jobs.
func NextAppetite(kept float64, d wire.Demand) float64 {
	stall := min(max(d.StallFraction, 0), 1)
	if stall < maxReadableStall {
		return d.ConsumedPerS / (1 - stall)
	}
	return max(kept, d.ConsumedPerS/(1-maxReadableStall))
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

	greedy := fill(bids, names, out, left, 0)
	if o.Hysteresis > 0 {
		// Moving a replica costs its cold start: prefer the jobs that
		// hold one already, unless that makes less progress than the
		// fair split would.
		sticky := fill(bids, names, out, left, o.Hysteresis)
		if totalGain(bids, sticky) >= totalGain(bids, fair)-1e-12 {
			return sticky
		}
	}
	return greedy
}

// totalGain is the trainers' progress of a grant, Bid.Gain summed.
func totalGain(bids map[string]Bid, grant map[string]int) float64 {
	g := 0.0
	for name, b := range bids {
		g += b.Gain(grant[name])
	}
	return g
}

// fill grants left more replicas on top of base by decreasing gain per
// replica; a replica a job holds now (Bid.Current) counts 1+sticky times
// its gain. Each job's gain per replica is a few runs of equal value
// (held ones, full ones, the one covering the rest of its need, those
// beyond it), never increasing, so filling the best runs first is the
// most total (sticky) gain.
func fill(bids map[string]Bid, names []string, base map[string]int, left int, sticky float64) map[string]int {
	out := make(map[string]int, len(base))
	for _, name := range names {
		out[name] = base[name]
	}
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
		frac := need - float64(full)
		gain := func(k int) float64 { // of the k-th replica, from 1
			g := 0.0
			switch {
			case k <= full:
				g = per
			case k == full+1 && frac > 1e-9:
				g = per * frac
			}
			if k <= b.Current {
				g *= 1 + sticky
			}
			return g
		}
		// The units where the gain may change: past the held ones, the
		// full ones and the partial one.
		cuts := []int{b.Current, full, full + 1, to}
		sort.Ints(cuts)
		for _, c := range cuts {
			c = min(c, to)
			if c > from {
				runs = append(runs, run{name, c - from, gain(from + 1)})
				from = c
			}
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
	return out
}

func sameGain(a, b float64) bool {
	return math.Abs(a-b) <= 1e-12*max(math.Abs(a), math.Abs(b))
}
