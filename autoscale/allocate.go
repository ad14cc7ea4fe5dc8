package autoscale

import (
	"math"
	"sort"
)

// Claim is what one job asks of the shared capacity: the replicas its
// decision wants, and its weight against the other jobs (<= 0 counts as 1).
type Claim struct {
	Want   int
	Weight float64
}

func (c Claim) weight() float64 {
	if !(c.Weight > 0) || math.IsInf(c.Weight, 0) {
		return 1
	}
	return c.Weight
}

// Allocate shares capacity between jobs, weighted max-min fairly: if the
// wanted counts fit they are granted; otherwise there is a level L such
// that each job gets min(want, L x weight) — a job wanting less than its
// share gets what it wants and leaves the rest to the others — rounded
// down, and the few units left by the rounding go one at a time to the
// job whose grant per weight would stay the lowest (ties in name order).
// So the total granted is min(capacity, sum of wants), no job gets more
// than it wants, and no unit could move from one job to another that
// wants more without the receiver ending above the giver per weight. With
// equal weights it is plain max-min fairness. Every job of claims is in
// the result.
func Allocate(claims map[string]Claim, capacity int) map[string]int {
	names := make([]string, 0, len(claims))
	total := 0
	out := make(map[string]int, len(claims))
	for name, c := range claims {
		names = append(names, name)
		out[name] = 0
		total += max(c.Want, 0)
	}
	sort.Strings(names)
	if total <= capacity {
		for _, name := range names {
			out[name] = max(claims[name].Want, 0)
		}
		return out
	}
	left := max(capacity, 0)
	if left == 0 {
		return out
	}
	// The level: satisfy jobs in order of want per weight while the level
	// that the rest would share stays above their want.
	var open []string
	for _, name := range names {
		if claims[name].Want > 0 {
			open = append(open, name)
		}
	}
	level := fairLevel(claims, open, left)
	var still []string
	for _, name := range open {
		c := claims[name]
		g := c.Want
		if share := math.Floor(level * c.weight()); share < float64(g) {
			g = int(share)
		}
		out[name] = g
		left -= g
		if g < c.Want {
			still = append(still, name)
		}
	}
	// The rounding's remainder, one unit at a time.
	for left > 0 && len(still) > 0 {
		best := 0
		for i := 1; i < len(still); i++ {
			a, b := claims[still[i]], claims[still[best]]
			if float64(out[still[i]]+1)/a.weight() < float64(out[still[best]]+1)/b.weight() {
				best = i
			}
		}
		name := still[best]
		out[name]++
		left--
		if out[name] >= claims[name].Want {
			still = append(still[:best:best], still[best+1:]...)
		}
	}
	return out
}

// fairLevel is the level at which the open claims share left: jobs are
// satisfied in order of want per weight while the level that the rest
// would share stays above their want (+Inf when every want fits).
func fairLevel(claims map[string]Claim, open []string, left int) float64 {
	byNeed := append([]string(nil), open...)
	sort.SliceStable(byNeed, func(i, j int) bool {
		a, b := claims[byNeed[i]], claims[byNeed[j]]
		return float64(a.Want)/a.weight() < float64(b.Want)/b.weight()
	})
	rest, weights := float64(left), 0.0
	for _, name := range byNeed {
		weights += claims[name].weight()
	}
	level := 0.0
	for i, name := range byNeed {
		c := claims[name]
		level = rest / weights
		if float64(c.Want)/c.weight() > level {
			break
		}
		rest -= float64(c.Want)
		weights -= c.weight()
		if i == len(byNeed)-1 {
			level = math.Inf(1)
		}
	}
	return level
}
