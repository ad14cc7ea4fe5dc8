package broker

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/sluice-project/sluice/wire"
)

// EpochSlots says which of its listed shards fill each source's part of a
// mixed job's epoch: for source i (listed[i] shards), indices into its
// listing, one per slot. A source's slots are Choose, or Repeat times its
// shards (default 1) once any source sets either; otherwise the weights
// split EpochShards (or every shard listed) by largest remainder. A
// source given more slots than it has shards repeats them all (each
// copy a slot of its own), the rest drawn without replacement from seed;
// one given fewer is such a draw. The slots hold whole copies in listing
// order, then the drawn rest sorted. It refuses a source with no shards or
// none in the epoch, naming it.
func EpochSlots(seed uint64, spec wire.JobSpec, listed []int) ([][]int, error) {
	n := len(spec.Sources)
	if len(listed) != n {
		return nil, fmt.Errorf("%d listings for %d sources", len(listed), n)
	}
	counts := make([]int, n)
	counted, total := false, 0
	for i, src := range spec.Sources {
		if listed[i] == 0 {
			return nil, fmt.Errorf("sources[%d].dataset %q: no shards under it", i, src.Dataset)
		}
		counted = counted || src.Repeat != 0 || src.Choose != 0
		total += listed[i]
	}
	if counted {
		for i, src := range spec.Sources {
			switch {
			case src.Choose > 0:
				counts[i] = src.Choose
			case src.Repeat > 0:
				counts[i] = int(math.Round(src.Repeat * float64(listed[i])))
			default:
				counts[i] = listed[i]
			}
		}
	} else {
		if spec.EpochShards > 0 {
			total = spec.EpochShards
		}
		counts = apportion(total, spec.Sources)
	}
	sum := 0
	for i, k := range counts {
		if k < 1 {
			return nil, fmt.Errorf("sources[%d]: no shard of an epoch is its (raise its weight, repeat or choose, or epoch_shards)", i)
		}
		sum += k
	}
	if sum > wire.MaxEpochShards {
		return nil, fmt.Errorf("sources: %d shards an epoch, over the %d an epoch may hold", sum, wire.MaxEpochShards)
	}
	out := make([][]int, n)
	for i, k := range counts {
		m := listed[i]
		slots := make([]int, 0, k)
		for range k / m {
			for s := range m {
				slots = append(slots, s)
			}
		}
		// The rest, without replacement: its own stream per source.
		src := rand.NewPCG(seed, uint64(i)*0x9e3779b97f4a7c15+0xc4005e)
		rest := slices.Clone(permute(src, m)[:k%m])
		slices.Sort(rest)
		out[i] = append(slots, rest...)
	}
	return out, nil
}

// apportion splits total slots by the sources' weights, by largest
// remainder (ties to the earlier source).
func apportion(total int, sources []wire.SourceSpec) []int {
	var w float64
	for _, s := range sources {
		w += s.Weight
	}
	counts := make([]int, len(sources))
	rem := make([]float64, len(sources))
	left := total
	for i, s := range sources {
		q := float64(total) * s.Weight / w
		counts[i] = int(math.Floor(q))
		rem[i] = q - float64(counts[i])
		left -= counts[i]
	}
	order := make([]int, len(sources))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rem[a] > rem[b]:
			return -1
		case rem[a] < rem[b]:
			return 1
		}
		return 0
	})
	for _, i := range order[:max(min(left, len(order)), 0)] {
		counts[i]++
	}
	return counts
}

// permute is a Fisher-Yates permutation of 0..n-1 from src.
func permute(src *rand.PCG, n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := int(boundedDraw(src, uint64(i+1)))
		order[i], order[j] = order[j], order[i]
	}
	return order
}

// MixedOrder is the order in which a mixed job's epoch's tasks are
// queued: each source's slots shuffled from (seed, epoch), merged by the
// sources' weights (wire.MixNext over shards), so that shards of every
// source arrive all through the epoch in about their proportions. The
// agents mix samples within that (see docs/mixing.md).
func MixedOrder(job wire.Job, epoch int) []int {
	n := len(job.Sources)
	perms := make([][]int, n)
	drawn := make([]int, n)
	open := make([]bool, n)
	for i, s := range job.Sources {
		src := rand.NewPCG(job.Spec.Seed, uint64(epoch)*0x9e3779b97f4a7c15+uint64(i)*0xbf58476d1ce4e5b9+0x5eed)
		perms[i] = permute(src, s.Slots)
		open[i] = s.Slots > 0
	}
	weights := job.SourceWeights()
	out := make([]int, 0, len(job.Shards))
	for {
		i := wire.MixNext(job.Spec.Seed, weights, drawn, open)
		if i < 0 {
			return out
		}
		out = append(out, job.Sources[i].First+perms[i][drawn[i]])
		drawn[i]++
		open[i] = drawn[i] < job.Sources[i].Slots
	}
}

// epochOrder is the order epoch's tasks are queued in.
func epochOrder(job wire.Job, epoch int) []int {
	if len(job.Sources) > 0 {
		return MixedOrder(job, epoch)
	}
	return ShardOrder(job.Spec.Seed, epoch, len(job.Shards))
}
