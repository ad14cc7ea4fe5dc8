package autoscale

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// equal turns plain wants into claims of weight 1.
func equal(wants map[string]int) map[string]Claim {
	out := map[string]Claim{}
	for k, v := range wants {
		out[k] = Claim{Want: v, Weight: 1}
	}
	return out
}

func TestAllocate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		claims   map[string]Claim
		capacity int
		want     map[string]int
	}{
		{"fits", equal(map[string]int{"a": 3, "b": 2}), 8, map[string]int{"a": 3, "b": 2}},
		{"small jobs leave their share to the others", equal(map[string]int{"a": 6, "b": 2, "c": 6}), 10, map[string]int{"a": 4, "b": 2, "c": 4}},
		{"remainder in name order", equal(map[string]int{"c": 5, "a": 5, "b": 5}), 7, map[string]int{"a": 3, "b": 2, "c": 2}},
		{"fewer units than jobs", equal(map[string]int{"c": 2, "b": 2, "a": 2}), 2, map[string]int{"a": 1, "b": 1, "c": 0}},
		{"jobs at zero stay listed", equal(map[string]int{"a": 0, "b": 9}), 4, map[string]int{"a": 0, "b": 4}},
		{"no capacity", equal(map[string]int{"a": 1}), 0, map[string]int{"a": 0}},
		{"nothing desired", map[string]Claim{}, 4, map[string]int{}},
		{"weight 2 gets twice the share", map[string]Claim{"a": {10, 2}, "b": {10, 1}}, 9, map[string]int{"a": 6, "b": 3}},
		{"a heavy job wanting little leaves the rest", map[string]Claim{"a": {2, 5}, "b": {10, 1}}, 9, map[string]int{"a": 2, "b": 7}},
		{"units go where grant per weight stays lowest", map[string]Claim{"a": {5, 3}, "b": {5, 1}}, 2, map[string]int{"a": 2, "b": 0}},
		{"units to the lighter job once the heavy is ahead", map[string]Claim{"a": {5, 3}, "b": {5, 1}}, 4, map[string]int{"a": 3, "b": 1}},
		{"zero weight counts as one", map[string]Claim{"a": {4, 0}, "b": {4, 1}}, 4, map[string]int{"a": 2, "b": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Allocate(tc.claims, tc.capacity)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Allocate(%v, %d) (-want +got):\n%s", tc.claims, tc.capacity, diff)
			}
			checkFair(t, tc.claims, tc.capacity, got)
		})
	}
}

// TestAllocateProperties checks Allocate's promises on random claims: the
// total granted is min(capacity, sum of wants), no job gets more than it
// wants, and no unit could move to a job wanting more without leaving the
// receiver above the giver per weight.
func TestAllocateProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		claims := map[string]Claim{}
		for j := range 1 + rng.IntN(8) {
			claims[fmt.Sprintf("j%d", j)] = Claim{Want: rng.IntN(12), Weight: []float64{0.5, 1, 1, 2, 3.5}[rng.IntN(5)]}
		}
		capacity := rng.IntN(40)
		got := Allocate(claims, capacity)
		if t.Failed() {
			return
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkFair(t, claims, capacity, got) })
	}
}

func checkFair(t *testing.T, claims map[string]Claim, capacity int, got map[string]int) {
	t.Helper()
	sum, wants := 0, 0
	for name, c := range claims {
		g, ok := got[name]
		if !ok {
			t.Errorf("job %s missing from the result", name)
		}
		if g < 0 || g > max(c.Want, 0) {
			t.Errorf("job %s granted %d, wants %d", name, g, c.Want)
		}
		sum += g
		wants += max(c.Want, 0)
	}
	if want := min(max(capacity, 0), wants); sum != want {
		t.Errorf("granted %d in all, want min(capacity %d, wants %d) = %d", sum, capacity, wants, want)
	}
	for a, ca := range claims {
		for b, cb := range claims {
			if a == b || got[a] >= ca.Want || got[b] == 0 {
				continue
			}
			// Moving one unit from b to a must not make a better off than
			// b was, per weight: (got[a]+1)/w_a >= got[b]/w_b.
			if float64(got[a]+1)/ca.weight() < float64(got[b])/cb.weight()-1e-9 {
				t.Errorf("unfair: %s has %d (weight %v, wants %d) while %s has %d (weight %v)",
					a, got[a], ca.weight(), ca.Want, b, got[b], cb.weight())
			}
		}
	}
}
