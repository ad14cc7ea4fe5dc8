package broker

import (
	"math/bits"
	"math/rand/v2"
)

// ShardOrder is the order in which epoch's tasks are queued: a permutation
// of 0..n-1 drawn from (seed, epoch), so every epoch visits shards in a
// different order and a resubmitted job with the same seed replays it.
//
// It runs Fisher-Yates on PCG output with its own bounded draw rather than
// rand.Perm, whose algorithm the standard library does not promise to keep
// across Go releases; the order must not change under a job.
func ShardOrder(seed uint64, epoch int, n int) []int {
	if n <= 0 {
		return []int{}
	}
	// The odd constant keeps (seed, epoch) and (epoch, seed) from colliding.
	return permute(rand.NewPCG(seed, uint64(epoch)*0x9e3779b97f4a7c15+0x5eed), n)
}

// boundedDraw returns a uniform value in [0, n) (Lemire's multiply-shift
// with rejection, so no modulo bias).
func boundedDraw(src *rand.PCG, n uint64) uint64 {
	for {
		hi, lo := bits.Mul64(src.Uint64(), n)
		if lo >= n || lo >= (-n)%n {
			return hi
		}
	}
}
