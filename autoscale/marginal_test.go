package autoscale

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAllocateMarginal(t *testing.T) {
	o := DefaultMarginalOptions()
	for _, tc := range []struct {
		name     string
		bids     map[string]Bid
		capacity int
		want     map[string]int
	}{
		{"fits", map[string]Bid{"a": {Claim: Claim{3, 1}}, "b": {Claim: Claim{2, 1}}}, 8, map[string]int{"a": 3, "b": 2}},
		{
			// a needs 2 replicas for its trainer, b 8: a replica is worth
			// half of a's speed and an eighth of b's; a's third (its
			// headroom) is worth nothing while b needs more.
			"the small need is covered first, headroom last",
			map[string]Bid{
				"a": {Claim: Claim{3, 1}, PerReplica: 100, Appetite: 200},
				"b": {Claim: Claim{10, 1}, PerReplica: 100, Appetite: 800},
			}, 6, map[string]int{"a": 2, "b": 4},
		},
		{
			// Fair gives 3 and 3; a keeps its minimum (1 of 3 halved, at
			// least one) and b, whose replicas are worth more, takes the rest.
			"the larger gain takes what is beyond the minimum",
			map[string]Bid{
				"a": {Claim: Claim{10, 1}, PerReplica: 10, Appetite: 1000},
				"b": {Claim: Claim{10, 1}, PerReplica: 100, Appetite: 500},
			}, 6, map[string]int{"a": 1, "b": 5},
		},
		{
			"equal gains share fairly",
			map[string]Bid{
				"a": {Claim: Claim{10, 1}, PerReplica: 100, Appetite: 1000},
				"b": {Claim: Claim{10, 1}, PerReplica: 100, Appetite: 1000},
			}, 7, map[string]int{"a": 4, "b": 3},
		},
		{
			"weight doubles the gain",
			map[string]Bid{
				"a": {Claim: Claim{10, 2}, PerReplica: 100, Appetite: 1000},
				"b": {Claim: Claim{10, 1}, PerReplica: 100, Appetite: 1000},
			}, 12, map[string]int{"a": 10, "b": 2},
		},
		{
			"replicas beyond every need still go where wanted",
			map[string]Bid{
				"a": {Claim: Claim{4, 1}, PerReplica: 100, Appetite: 100},
				"b": {Claim: Claim{4, 1}, PerReplica: 100, Appetite: 150},
			}, 6, map[string]int{"a": 3, "b": 3},
		},
		{
			"unknown rates size by want",
			map[string]Bid{"a": {Claim: Claim{2, 1}}, "b": {Claim: Claim{8, 1}}}, 6, map[string]int{"a": 2, "b": 4},
		},
		{
			"a starved job is served first",
			map[string]Bid{
				"a": {Claim: Claim{5, 1}, PerReplica: 100, Appetite: 100},
				"b": {Claim: Claim{5, 1}, PerReplica: 100, Appetite: 100},
				"c": {Claim: Claim{5, 1}, PerReplica: 100, Appetite: 100, Starved: time.Minute},
			}, 2, map[string]int{"a": 1, "b": 0, "c": 1},
		},
		{
			// a gains 1/4.8 per replica, b 1/5: without hysteresis a
			// would take one of b's (4 and 2).
			"held replicas stay for a small gain",
			map[string]Bid{
				"a": {Claim: Claim{8, 1}, PerReplica: 100, Appetite: 480, Current: 3},
				"b": {Claim: Claim{8, 1}, PerReplica: 100, Appetite: 500, Current: 3},
			}, 6, map[string]int{"a": 3, "b": 3},
		},
		{
			// a gains 1/2 per replica, b 1/8: worth the move.
			"held replicas move for a large gain",
			map[string]Bid{
				"a": {Claim: Claim{3, 1}, PerReplica: 100, Appetite: 200, Current: 1},
				"b": {Claim: Claim{8, 1}, PerReplica: 100, Appetite: 800, Current: 5},
			}, 6, map[string]int{"a": 2, "b": 4},
		},
		{"no capacity", map[string]Bid{"a": {Claim: Claim{2, 1}}}, 0, map[string]int{"a": 0}},
		{"jobs at zero stay listed", map[string]Bid{"a": {}, "b": {Claim: Claim{9, 1}}}, 4, map[string]int{"a": 0, "b": 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AllocateMarginal(tc.bids, tc.capacity, o)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("AllocateMarginal(%v, %d) (-want +got):\n%s", tc.bids, tc.capacity, diff)
			}
		})
	}
}

// randomBids draws jobs with and without learned rates, of several weights.
func randomBids(rng *rand.Rand) map[string]Bid {
	bids := map[string]Bid{}
	for j := range 1 + rng.IntN(8) {
		b := Bid{Claim: Claim{Want: rng.IntN(12), Weight: []float64{0.5, 1, 1, 2, 3.5}[rng.IntN(5)]}}
		if rng.IntN(4) > 0 {
			b.PerReplica = 10 + rng.Float64()*190
			b.Appetite = rng.Float64() * 2000
		}
		if rng.IntN(2) == 0 {
			b.Current = rng.IntN(12)
		}
		bids[fmt.Sprintf("j%d", j)] = b
	}
	return bids
}

// TestAllocateMarginalProperties checks on random bids that the marginal
// allocator grants what Allocate grants in all, no job more than it wants
// nor less than its guaranteed minimum, and never less total trainer
// progress (Bid.Gain) than the fair split, and that the greedy fill is the
// best possible (against exhaustive search on small cases).
func TestAllocateMarginalProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	o := DefaultMarginalOptions()
	for i := range 2000 {
		bids := randomBids(rng)
		capacity := rng.IntN(40)
		got := AllocateMarginal(bids, capacity, o)
		claims := map[string]Claim{}
		for n, b := range bids {
			claims[n] = b.Claim
		}
		fair := Allocate(claims, capacity)
		sum, wants := 0, 0
		for name, b := range bids {
			g, ok := got[name]
			if !ok {
				t.Fatalf("case %d: job %s missing", i, name)
			}
			if g < 0 || g > max(b.Want, 0) {
				t.Fatalf("case %d: job %s granted %d, wants %d", i, name, g, b.Want)
			}
			if f := fair[name]; f > 0 && g < 1 {
				t.Fatalf("case %d: job %s granted none, fair split gives %d", i, name, f)
			}
			sum += g
			wants += max(b.Want, 0)
		}
		if want := min(capacity, wants); sum != want {
			t.Fatalf("case %d: granted %d in all, want %d", i, sum, want)
		}
		if gm, gf := totalGain(bids, got), totalGain(bids, fair); gm < gf-1e-9 {
			t.Fatalf("case %d: marginal progress %.4f < fair %.4f\nbids %v cap %d\nmarginal %v\nfair %v", i, gm, gf, bids, capacity, got, fair)
		}
		if len(bids) <= 3 && capacity <= 12 {
			// Without hysteresis the fill is the best there is.
			greedy := o
			greedy.Hysteresis = 0
			g := AllocateMarginal(bids, capacity, greedy)
			if best := bestGain(bids, capacity, o); totalGain(bids, g) < best-1e-9 {
				t.Fatalf("case %d: marginal progress %.4f below the best %.4f with the same minimums", i, totalGain(bids, g), best)
			}
		}
	}
}

// bestGain searches every grant at or above the guaranteed minimums.
func bestGain(bids map[string]Bid, capacity int, o MarginalOptions) float64 {
	claims := map[string]Claim{}
	var names []string
	for n, b := range bids {
		claims[n] = b.Claim
		names = append(names, n)
	}
	fair := Allocate(claims, capacity)
	best := 0.0
	cur := map[string]int{}
	var walk func(i, left int)
	walk = func(i, left int) {
		if i == len(names) {
			best = max(best, totalGain(bids, cur))
			return
		}
		n := names[i]
		f := fair[n]
		lo := min(f, max(1, int(o.MinShare*float64(f))))
		for g := lo; g <= min(bids[n].Want, left); g++ {
			cur[n] = g
			walk(i+1, left-g)
		}
	}
	walk(0, capacity)
	return best
}

// TestAllocateMarginalNoStarvation scripts ticks of a runner's loop with
// less capacity than jobs: every job that wants replicas gets one within
// StarveAfter plus a tick.
func TestAllocateMarginalNoStarvation(t *testing.T) {
	o := DefaultMarginalOptions()
	const tick = time.Second
	bids := map[string]Bid{
		"big":   {Claim: Claim{8, 4}, PerReplica: 100, Appetite: 800},
		"mid":   {Claim: Claim{4, 1}, PerReplica: 100, Appetite: 400},
		"small": {Claim: Claim{2, 1}, PerReplica: 100, Appetite: 100},
		"slow":  {Claim: Claim{8, 0.5}, PerReplica: 5, Appetite: 800},
		"late":  {Claim: Claim{3, 1}, PerReplica: 100, Appetite: 300},
	}
	zeroSince := map[string]time.Time{}
	now := time.Unix(0, 0)
	worst := map[string]time.Duration{}
	for range 120 {
		for name, b := range bids {
			if z, ok := zeroSince[name]; ok {
				b.Starved = now.Sub(z)
			} else {
				b.Starved = 0
			}
			bids[name] = b
		}
		got := AllocateMarginal(bids, 3, o)
		for name := range bids {
			if got[name] > 0 {
				delete(zeroSince, name)
				continue
			}
			if _, ok := zeroSince[name]; !ok {
				zeroSince[name] = now
			}
			worst[name] = max(worst[name], now.Sub(zeroSince[name]))
		}
		now = now.Add(tick)
	}
	for name, w := range worst {
		if w > o.StarveAfter+tick {
			t.Errorf("job %s waited %v at zero, want at most %v", name, w, o.StarveAfter+tick)
		}
	}
}
