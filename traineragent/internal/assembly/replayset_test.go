package assembly

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReplaySet(t *testing.T) {
	end := func(n int) *int { return &n }
	const epochs, shards = 3, 6
	for _, tc := range []struct {
		name string
		h, p Position
		want map[int][]int
	}{
		{"same position", Position{Epochs: map[int]EpochPosition{0: {Complete: "0-1",
			Shards: map[int]ShardPosition{2: {Chunks: "0", Rows: map[int]int{1: 3}}}}}},
			Position{Epochs: map[int]EpochPosition{0: {Complete: "0-1",
				Shards: map[int]ShardPosition{2: {Chunks: "0", Rows: map[int]int{1: 3}}}}}},
			map[int][]int{}},
		{"from the start", Position{Epochs: map[int]EpochPosition{0: {Complete: "0,3",
			Shards: map[int]ShardPosition{4: {End: end(2)}, 5: {Rows: map[int]int{0: 1}}}}}},
			Position{},
			// Shard 4 had only its end, shard 5 rows of a held chunk: both
			// carried over by the rewind, not replayed.
			map[int][]int{0: {0, 3}}},
		{"completed past the state", Position{Epochs: map[int]EpochPosition{0: {Complete: "0-2"}}},
			Position{Epochs: map[int]EpochPosition{0: {Complete: "0",
				Shards: map[int]ShardPosition{1: {Chunks: "0-3"}, 2: {Rows: map[int]int{0: 2}}}}}},
			map[int][]int{0: {1, 2}}},
		{"a chunk handed out in full past the state", Position{Epochs: map[int]EpochPosition{1: {
			Shards: map[int]ShardPosition{0: {Chunks: "0-2"}, 1: {Chunks: "0", Rows: map[int]int{1: 4}}}}}},
			Position{Epochs: map[int]EpochPosition{1: {
				Shards: map[int]ShardPosition{0: {Chunks: "0-1", Rows: map[int]int{2: 1}}, 1: {Chunks: "0"}}}}},
			map[int][]int{1: {0}}},
		{"a shard end seen past the state (carried over, not replayed)", Position{Epochs: map[int]EpochPosition{0: {
			Shards: map[int]ShardPosition{3: {End: end(1)}}}}},
			Position{},
			map[int][]int{}},
		{"epochs finished past the state", Position{Finished: 2, Epochs: map[int]EpochPosition{2: {Complete: "5"}}},
			Position{Finished: 1, Epochs: map[int]EpochPosition{1: {Complete: "0-3"}}},
			map[int][]int{1: {4, 5}, 2: {5}}},
		{"epochs the state finished are left out", Position{Finished: 2},
			Position{Finished: 2},
			map[int][]int{}},
		{"replayed by an earlier resume", Position{Epochs: map[int]EpochPosition{0: {Complete: "0", Replayed: "1-2"}}},
			Position{Epochs: map[int]EpochPosition{0: {Complete: "0-1"}}},
			map[int][]int{0: {2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReplaySet(tc.h, tc.p, epochs, shards)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("replaySet (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := ReplaySet(Position{}, Position{Epochs: map[int]EpochPosition{0: {Complete: "9"}}}, epochs, shards); err == nil {
		t.Error("replaySet with a shard out of range succeeded")
	}
}
