package broker

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestShardOrderIsASeededPermutationPerEpoch(t *testing.T) {
	for _, n := range []int{1, 2, 7, 100, 1000} {
		for epoch := range 3 {
			got := ShardOrder(42, epoch, n)
			sorted := slices.Sorted(slices.Values(got))
			want := make([]int, n)
			for i := range want {
				want[i] = i
			}
			if diff := cmp.Diff(want, sorted); diff != "" {
				t.Fatalf("n=%d epoch=%d: not a permutation of 0..n-1 (-want +sorted):\n%s", n, epoch, diff)
			}
			if again := ShardOrder(42, epoch, n); !slices.Equal(got, again) {
				t.Fatalf("n=%d epoch=%d: two calls differ: %v vs %v", n, epoch, got, again)
			}
		}
	}
}

func TestShardOrderDiffersByEpochAndSeed(t *testing.T) {
	const n = 100
	base := ShardOrder(7, 0, n)
	identity := make([]int, n)
	for i := range identity {
		identity[i] = i
	}
	if slices.Equal(base, identity) {
		t.Fatal("epoch 0 is not shuffled")
	}
	for epoch := 1; epoch < 10; epoch++ {
		if slices.Equal(base, ShardOrder(7, epoch, n)) {
			t.Errorf("epoch %d has epoch 0's order", epoch)
		}
	}
	if slices.Equal(base, ShardOrder(8, 0, n)) {
		t.Error("seeds 7 and 8 give the same order")
	}
	// Swapping seed and epoch must not replay an order.
	if slices.Equal(ShardOrder(3, 5, n), ShardOrder(5, 3, n)) {
		t.Error("(seed 3, epoch 5) and (seed 5, epoch 3) give the same order")
	}
}

// A job's order must not change under it between releases: pin a few.
func TestShardOrderIsStable(t *testing.T) {
	got := [][]int{ShardOrder(1, 0, 8), ShardOrder(1, 1, 8), ShardOrder(1, 0, 0)}
	want := [][]int{{5, 1, 3, 6, 0, 4, 7, 2}, {6, 5, 3, 7, 1, 4, 0, 2}, {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("shard orders changed (-pinned +now):\n%s", diff)
	}
}

func TestShardOrderIsRoughlyUniform(t *testing.T) {
	// Over many epochs, each shard lands first about equally often.
	const n, epochs = 4, 4000
	first := make([]int, n)
	for e := range epochs {
		first[ShardOrder(99, e, n)[0]]++
	}
	for s, c := range first {
		if c < epochs/n*8/10 || c > epochs/n*12/10 {
			t.Errorf("shard %d first in %d of %d epochs, want about %d", s, c, epochs, epochs/n)
		}
	}
}
