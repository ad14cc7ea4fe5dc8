package traineragent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReplaySet(t *testing.T) {
	end := func(n int) *int { return &n }
	const epochs, shards = 3, 6
	for _, tc := range []struct {
		name string
		h, p position
		want map[int][]int
	}{
		{"same position", position{Epochs: map[int]epochPosition{0: {Complete: "0-1",
			Shards: map[int]shardPosition{2: {Chunks: "0", Rows: map[int]int{1: 3}}}}}},
			position{Epochs: map[int]epochPosition{0: {Complete: "0-1",
				Shards: map[int]shardPosition{2: {Chunks: "0", Rows: map[int]int{1: 3}}}}}},
			map[int][]int{}},
		{"from the start", position{Epochs: map[int]epochPosition{0: {Complete: "0,3",
			Shards: map[int]shardPosition{4: {End: end(2)}, 5: {Rows: map[int]int{0: 1}}}}}},
			position{},
			// Shard 4 had only its end, shard 5 rows of a held chunk: both
			// carried over by the rewind, not replayed.
			map[int][]int{0: {0, 3}}},
		{"completed past the state", position{Epochs: map[int]epochPosition{0: {Complete: "0-2"}}},
			position{Epochs: map[int]epochPosition{0: {Complete: "0",
				Shards: map[int]shardPosition{1: {Chunks: "0-3"}, 2: {Rows: map[int]int{0: 2}}}}}},
			map[int][]int{0: {1, 2}}},
		{"a chunk handed out in full past the state", position{Epochs: map[int]epochPosition{1: {
			Shards: map[int]shardPosition{0: {Chunks: "0-2"}, 1: {Chunks: "0", Rows: map[int]int{1: 4}}}}}},
			position{Epochs: map[int]epochPosition{1: {
				Shards: map[int]shardPosition{0: {Chunks: "0-1", Rows: map[int]int{2: 1}}, 1: {Chunks: "0"}}}}},
			map[int][]int{1: {0}}},
		{"a shard end seen past the state (carried over, not replayed)", position{Epochs: map[int]epochPosition{0: {
			Shards: map[int]shardPosition{3: {End: end(1)}}}}},
			position{},
			map[int][]int{}},
		{"epochs finished past the state", position{Finished: 2, Epochs: map[int]epochPosition{2: {Complete: "5"}}},
			position{Finished: 1, Epochs: map[int]epochPosition{1: {Complete: "0-3"}}},
			map[int][]int{1: {4, 5}, 2: {5}}},
		{"epochs the state finished are left out", position{Finished: 2},
			position{Finished: 2},
			map[int][]int{}},
		{"replayed by an earlier resume", position{Epochs: map[int]epochPosition{0: {Complete: "0", Replayed: "1-2"}}},
			position{Epochs: map[int]epochPosition{0: {Complete: "0-1"}}},
			map[int][]int{0: {2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := replaySet(tc.h, tc.p, epochs, shards)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("replaySet (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := replaySet(position{}, position{Epochs: map[int]epochPosition{0: {Complete: "9"}}}, epochs, shards); err == nil {
		t.Error("replaySet with a shard out of range succeeded")
	}
}
