package wire

import (
	"math"
	"strings"
	"testing"
)

// schedule runs MixNext for n slots with every source open.
func schedule(seed uint64, weights []float64, n int) []int {
	drawn := make([]int, len(weights))
	open := make([]bool, len(weights))
	for i := range open {
		open[i] = true
	}
	out := make([]int, n)
	for k := range out {
		s := MixNext(seed, weights, drawn, open)
		drawn[s]++
		out[k] = s
	}
	return out
}

func TestMixNextValues(t *testing.T) {
	// 3:1 is A A A B over and over, whatever the seed's tie-breaks.
	for _, seed := range []uint64{0, 1, 42} {
		got := schedule(seed, []float64{3, 1}, 12)
		var b strings.Builder
		for _, s := range got {
			b.WriteByte("AB"[s])
		}
		if g := b.String(); strings.Count(g, "B") != 3 || !strings.Contains("AAABAAABAAABAAAB", g[:4]) {
			t.Errorf("seed %d: 3:1 schedule %s: want three A per B, evenly", seed, g)
		}
	}
	// 1:1 alternates; which comes first is the seed's.
	first := map[int]bool{}
	for seed := range uint64(16) {
		got := schedule(seed, []float64{1, 1}, 6)
		for k := 1; k < len(got); k++ {
			if got[k] == got[k-1] {
				t.Fatalf("seed %d: 1:1 schedule %v: want alternation", seed, got)
			}
		}
		first[got[0]] = true
	}
	if len(first) != 2 {
		t.Errorf("1:1 schedules over 16 seeds all start with source %v: the seed should break the tie", first)
	}
	// The same inputs give the same slot.
	if a, b := schedule(7, []float64{2, 5, 1}, 50), schedule(7, []float64{2, 5, 1}, 50); !equalInts(a, b) {
		t.Errorf("not deterministic: %v vs %v", a, b)
	}
	// Closed sources are skipped; none open is -1.
	if s := MixNext(0, []float64{3, 1}, []int{0, 0}, []bool{false, true}); s != 1 {
		t.Errorf("A closed: got %d, want 1", s)
	}
	if s := MixNext(0, []float64{3, 1}, []int{5, 1}, []bool{false, false}); s != -1 {
		t.Errorf("none open: got %d, want -1", s)
	}
}

// Any window of 64 slots holds each source's share to within a slot
// (two sources) or two (more), for weights of every kind.
func TestMixNextWindows(t *testing.T) {
	for _, weights := range [][]float64{{3, 1}, {1, 1}, {0.7, 0.3}, {5, 3, 2}, {1, 1, 1, 1, 1}, {100, 1}, {math.Pi, math.E, 1}} {
		var total float64
		for _, w := range weights {
			total += w
		}
		tol := 1.0
		if len(weights) > 2 {
			tol = 2
		}
		got := schedule(3, weights, 5000)
		for lo := 0; lo+64 <= len(got); lo++ {
			counts := make([]int, len(weights))
			for _, s := range got[lo : lo+64] {
				counts[s]++
			}
			for i, c := range counts {
				if want := 64 * weights[i] / total; math.Abs(float64(c)-want) > tol {
					t.Fatalf("weights %v: window at %d has %d of source %d, want %.2f +- %v", weights, lo, c, i, want, tol)
				}
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSourceProblemsNameTheField(t *testing.T) {
	base := func() JobSpec {
		return JobSpec{ID: "j", Pipeline: "p", BatchSize: 8, Epochs: 1, Sources: []SourceSpec{
			{Dataset: "s3://b/a/", Weight: 3}, {Dataset: "s3://b/c/", Weight: 1},
		}}.WithDefaults()
	}
	if ps := base().Problems(); len(ps) != 0 {
		t.Fatalf("a valid mixed spec: %v", ps)
	}
	for _, tc := range []struct {
		name, field string
		edit        func(*JobSpec)
	}{
		{"weight 0", "sources[1].weight", func(s *JobSpec) { s.Sources[1].Weight = 0 }},
		{"weight < 0", "sources[0].weight", func(s *JobSpec) { s.Sources[0].Weight = -1 }},
		{"weight NaN", "sources[0].weight", func(s *JobSpec) { s.Sources[0].Weight = math.NaN() }},
		{"no sources, no dataset", "dataset", func(s *JobSpec) { s.Sources = nil }},
		{"empty sources list", "dataset", func(s *JobSpec) { s.Sources = []SourceSpec{} }},
		{"both", "dataset", func(s *JobSpec) { s.Dataset = "s3://b/x/" }},
		{"bad source dataset", "sources[1].dataset", func(s *JobSpec) { s.Sources[1].Dataset = "/tmp/x" }},
		{"same dataset twice", "sources[1].dataset", func(s *JobSpec) { s.Sources[1].Dataset = s.Sources[0].Dataset }},
		{"no pipeline anywhere", "sources[0].pipeline", func(s *JobSpec) { s.Pipeline = ""; s.Sources[1].Pipeline = "q" }},
		{"repeat and choose", "sources[0].repeat", func(s *JobSpec) { s.Sources[0].Repeat, s.Sources[0].Choose = 2, 3 }},
		{"repeat < 0", "sources[0].repeat", func(s *JobSpec) { s.Sources[0].Repeat = -1 }},
		{"choose < 0", "sources[1].choose", func(s *JobSpec) { s.Sources[1].Choose = -2 }},
		{"epoch_shards with repeat", "epoch_shards", func(s *JobSpec) { s.EpochShards = 10; s.Sources[0].Repeat = 2 }},
		{"epoch_shards < 0", "epoch_shards", func(s *JobSpec) { s.EpochShards = -1 }},
		{"epoch_shards without sources", "epoch_shards", func(s *JobSpec) { s.Sources = nil; s.Dataset = "s3://b/a/"; s.EpochShards = 4 }},
		{"too many sources", "sources", func(s *JobSpec) {
			s.Sources = nil
			for i := range MaxSources + 1 {
				s.Sources = append(s.Sources, SourceSpec{Dataset: "s3://b/" + string(rune('a'+i%26)) + strings.Repeat("x", i) + "/", Weight: 1})
			}
		}},
	} {
		s := base()
		tc.edit(&s)
		ps := s.Problems()
		found := false
		for _, p := range ps {
			found = found || p.Field == tc.field
		}
		if !found {
			t.Errorf("%s: problems %v: want one naming %s", tc.name, ps, tc.field)
		}
	}
	// A source's own pipeline is enough without the job's.
	s := base()
	s.Pipeline = ""
	s.Sources[0].Pipeline, s.Sources[1].Pipeline = "a", "b"
	if ps := s.Problems(); len(ps) != 0 {
		t.Errorf("every source with its pipeline: %v", ps)
	}
	if s.PipelineOf(0) != "a" || base().PipelineOf(1) != "p" {
		t.Errorf("PipelineOf: %q, %q", s.PipelineOf(0), base().PipelineOf(1))
	}
}

func TestMixedJobTaskUsesItsSource(t *testing.T) {
	spec := JobSpec{ID: "j", Pipeline: "p", BatchSize: 8, Epochs: 1, Seed: 9, Sources: []SourceSpec{
		{Dataset: "s3://b1/a/", Weight: 3}, {Dataset: "s3://b2/c/", Weight: 1, Pipeline: "q"},
	}}.WithDefaults()
	j := Job{Spec: spec, Shards: []string{"a/0.tar", "a/1.tar", "c/0.jsonl", "c/0.jsonl"},
		Sources: []JobSource{{Bucket: "b1", Listed: 2, First: 0, Slots: 2}, {Bucket: "b2", Listed: 1, First: 2, Slots: 2}}}
	for shard, want := range []struct {
		src            int
		bucket, key, p string
	}{{0, "b1", "a/0.tar", "p"}, {0, "b1", "a/1.tar", "p"}, {1, "b2", "c/0.jsonl", "q"}, {1, "b2", "c/0.jsonl", "q"}} {
		task := j.Task(0, shard)
		if j.SourceOf(shard) != want.src || task.Bucket != want.bucket || task.Key != want.key || task.Pipeline != want.p {
			t.Errorf("shard %d: source %d, task %+v: want %+v", shard, j.SourceOf(shard), task, want)
		}
	}
}

// A stream whose schedule starts again (a resume forms the rest of an
// epoch afresh) keeps two sources' windows of 64 within 2 points for
// these weights: the rows before the restart followed by a new schedule.
// (Not for every weight: at 9:1 a window across the restart can hold
// 59 of 64, 2.2 points off; docs/mixing.md says so.)
func TestMixNextRestartKeepsWindows(t *testing.T) {
	for _, weights := range [][]float64{{3, 1}, {1, 1}, {0.7, 0.3}, {5, 3}, {2, 1}} {
		share := weights[0] / (weights[0] + weights[1])
		base := schedule(5, weights, 400)
		for cut := range 200 {
			got := append(append([]int(nil), base[:cut]...), schedule(5, weights, 300)...)
			for lo := 0; lo+64 <= len(got); lo++ {
				n := 0
				for _, s := range got[lo : lo+64] {
					if s == 0 {
						n++
					}
				}
				if d := math.Abs(float64(n)/64 - share); d > 0.02 {
					t.Fatalf("weights %v, restart at %d: window at %d has %d of source 0 (%.1f%%), want within 2 points of %.1f%%",
						weights, cut, lo, n, 100*float64(n)/64, 100*share)
				}
			}
		}
	}
}

func TestMixResumeValues(t *testing.T) {
	for _, tc := range []struct {
		weights []float64
		counts  []int
		want    []int
	}{
		{[]float64{3, 1}, []int{0, 0}, []int{0, 0}},
		{[]float64{3, 1}, []int{7, 2}, []int{7, 2}},   // 6.75, 2.25: a state of the schedule
		{[]float64{3, 1}, []int{9, 1}, []int{0, 0}},   // 7.5: 1.5 off, afresh
		{[]float64{9, 1}, []int{14, 1}, []int{14, 1}}, // 13.5, 1.5
		{[]float64{1, 1, 1}, []int{4, 2, 3}, []int{0, 0, 0}},
	} {
		if got := MixResume(tc.weights, tc.counts); !equalInts(got, tc.want) {
			t.Errorf("MixResume(%v, %v) = %v, want %v", tc.weights, tc.counts, got, tc.want)
		}
	}
	// Any count the schedule reaches goes on unchanged.
	weights := []float64{0.7, 0.2, 0.1}
	got := schedule(1, weights, 500)
	drawn := make([]int, 3)
	for k, s := range got {
		if r := MixResume(weights, drawn); !equalInts(r, drawn) {
			t.Fatalf("after %d slots: MixResume(%v) = %v, want them unchanged", k, drawn, r)
		}
		drawn[s]++
	}
}
