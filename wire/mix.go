package wire

import (
	"fmt"
	"math"
	"net/url"
	"strings"
)

// SourceSpec is one dataset of a mixed job (JobSpec.Sources): its prefix,
// its weight (its share of every window of samples the trainer gets) and,
// where it differs from the job's, its pipeline. A shard's format is chosen
// by its key's suffix, as for a job of one dataset.
//
// How much of the source an epoch holds (see docs/mixing.md), counted in
// shards (a shard's sample count is known only once it was read): by
// default the sources' weights split the epoch's shards (JobSpec.EpochShards,
// or every shard listed), a source smaller than its share repeated and a
// larger one sampled without replacement; Repeat or Choose set it for the
// source instead (MosaicML Streaming's proportion, repeat and choose).
type SourceSpec struct {
	Dataset  string  `json:"dataset"`
	Weight   float64 `json:"weight"`
	Pipeline string  `json:"pipeline,omitempty"`
	// Repeat is how many times over the source's shards an epoch holds
	// (1.5: each shard once, half of them twice); Choose is how many of
	// its shards (with repeats where it has fewer). At most one is set;
	// once one source sets either, the others default to Repeat 1.
	Repeat float64 `json:"repeat,omitempty"`
	Choose int     `json:"choose,omitempty"`
}

// MaxSources bounds a job's sources: its status keeps each one's progress.
const MaxSources = 64

// MaxEpochShards bounds the shards an epoch of a mixed job holds (repeats
// included), as MaxJobTasks bounds them over the job at the broker.
const MaxEpochShards = 1 << 22

// PipelineOf is the pipeline of source i of s (the job's unless the
// source has its own).
func (s JobSpec) PipelineOf(i int) string {
	if i >= 0 && i < len(s.Sources) && strings.TrimSpace(s.Sources[i].Pipeline) != "" {
		return s.Sources[i].Pipeline
	}
	return s.Pipeline
}

// sourceProblems checks the dataset, pipeline and sources fields together:
// a job reads one dataset or mixes sources, never both.
func (s JobSpec) sourceProblems(add func(field, format string, args ...any)) {
	if len(s.Sources) == 0 {
		if u, err := url.Parse(s.Dataset); err != nil || u.Scheme != "s3" || u.Host == "" {
			add("dataset", "%q: want an s3://bucket/prefix/ URL", s.Dataset)
		}
		if s.EpochShards != 0 {
			add("epoch_shards", "%d: only for a job with sources", s.EpochShards)
		}
		if strings.TrimSpace(s.Pipeline) == "" {
			add("pipeline", "want a built-in pipeline name or an inline pipeline spec")
		}
		return
	}
	if s.Dataset != "" {
		add("dataset", "%q: give dataset or sources, not both", s.Dataset)
	}
	if len(s.Sources) > MaxSources {
		add("sources", "%d sources: want at most %d", len(s.Sources), MaxSources)
	}
	counted := false
	seen := map[string]int{}
	for i, src := range s.Sources {
		f := fmt.Sprintf("sources[%d].", i)
		if u, err := url.Parse(src.Dataset); err != nil || u.Scheme != "s3" || u.Host == "" {
			add(f+"dataset", "%q: want an s3://bucket/prefix/ URL", src.Dataset)
		} else if j, ok := seen[src.Dataset]; ok {
			add(f+"dataset", "%q: also sources[%d]'s (give it one source, with the weight of both)", src.Dataset, j)
		}
		seen[src.Dataset] = i
		if !(src.Weight > 0 && src.Weight <= 1e6) {
			add(f+"weight", "%v: want > 0 and <= 1000000", src.Weight)
		}
		if strings.TrimSpace(src.Pipeline) == "" && strings.TrimSpace(s.Pipeline) == "" {
			add(f+"pipeline", "none, and the job has none: want a built-in pipeline name or an inline pipeline spec here or in pipeline")
		}
		switch {
		case src.Repeat != 0 && src.Choose != 0:
			add(f+"repeat", "%v: give repeat or choose, not both", src.Repeat)
		case src.Repeat < 0 || src.Repeat > 1e4 || math.IsNaN(src.Repeat):
			add(f+"repeat", "%v: want > 0 and <= 10000 (0: see docs/mixing.md)", src.Repeat)
		case src.Choose < 0 || src.Choose > MaxEpochShards:
			add(f+"choose", "%d: want 1..%d shards (0: see docs/mixing.md)", src.Choose, MaxEpochShards)
		}
		counted = counted || src.Repeat != 0 || src.Choose != 0
	}
	switch {
	case s.EpochShards < 0 || s.EpochShards > MaxEpochShards:
		add("epoch_shards", "%d: want 0..%d (0: every shard listed)", s.EpochShards, MaxEpochShards)
	case s.EpochShards > 0 && counted:
		add("epoch_shards", "%d: not with a source's repeat or choose (they set its shards themselves)", s.EpochShards)
	}
}

// JobSource is one source of a mixed job's record: the bucket its shards
// are in, how many shards were listed under its prefix, and its part of
// the epoch, Job.Shards[First:First+Slots] (a key may be there more than
// once: a source repeated).
type JobSource struct {
	Bucket string `json:"bucket"`
	Listed int    `json:"listed"`
	First  int    `json:"first"`
	Slots  int    `json:"slots"`
}

// SourceOf is the source (an index into Spec.Sources) of shard, an index
// into Shards; 0 for a job of one dataset.
func (j Job) SourceOf(shard int) int {
	for i, s := range j.Sources {
		if shard >= s.First && shard < s.First+s.Slots {
			return i
		}
	}
	return 0
}

// SourceWeights are the weights of the job's sources (one weight of 1 for
// a job of one dataset).
func (j Job) SourceWeights() []float64 {
	if len(j.Spec.Sources) == 0 {
		return []float64{1}
	}
	w := make([]float64, len(j.Spec.Sources))
	for i, s := range j.Spec.Sources {
		w[i] = s.Weight
	}
	return w
}

// MixNext is the mixing schedule: the source the next slot of a stream
// draws from, given the sources' weights, how many slots each filled so
// far (drawn), and which may still fill one (open). It is the open source
// furthest behind its share of the slots so far plus this one,
// weight/sum(weights) of them, ties going to the one seed ranks first:
// a source's count stays within about a slot of its share while every
// source is open, so any window of n slots holds each source's share of
// n to within one slot for two sources, two for more
// (TestMixNextWindows). A closed source's share goes
// to the open ones, each still by its weight. It returns -1 if none is
// open.
func MixNext(seed uint64, weights []float64, drawn []int, open []bool) int {
	var total float64
	n := 0
	for i, w := range weights {
		total += w
		n += drawn[i]
	}
	best, bestGap, bestRank := -1, 0.0, uint64(0)
	for i, w := range weights {
		if !open[i] {
			continue
		}
		gap := w*float64(n+1)/total - float64(drawn[i])
		rank := splitmix(seed ^ uint64(i)*0x9e3779b97f4a7c15)
		switch {
		case best < 0, gap > bestGap+1e-9:
		case gap > bestGap-1e-9 && rank < bestRank:
		default:
			continue
		}
		best, bestGap, bestRank = i, gap, rank
	}
	return best
}

// MixResume is where a stream's schedule starts again from counts, the
// slots each source filled before (a resume's position records them):
// the counts themselves if they are a state MixNext could have reached,
// each within a slot of its share, so that the schedule goes on as if
// never stopped; else none (it starts afresh), since catching up with a
// share more than a slot off would draw one source several times in a
// row.
func MixResume(weights []float64, counts []int) []int {
	var total float64
	n := 0
	for i, w := range weights {
		total += w
		n += counts[i]
	}
	for i, w := range weights {
		if d := float64(counts[i]) - w*float64(n)/total; d <= -1 || d >= 1 {
			return make([]int, len(weights))
		}
	}
	return append([]int(nil), counts...)
}

// splitmix is SplitMix64's finaliser: a fixed mixing of x.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
