package broker

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

func mixSpec(sources ...wire.SourceSpec) wire.JobSpec {
	return wire.JobSpec{ID: "m", Pipeline: "imagenet-train", BatchSize: 4, Epochs: 1, Seed: 11, Sources: sources}.WithDefaults()
}

func TestEpochSlotsValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   wire.JobSpec
		listed []int
		counts []int
	}{
		// Proportions split every shard listed: A's 4 become 12 (each 3
		// times), B's 12 become 4 (a third of them).
		{"proportion", mixSpec(wire.SourceSpec{Dataset: "s3://d/a/", Weight: 3}, wire.SourceSpec{Dataset: "s3://d/b/", Weight: 1}), []int{4, 12}, []int{12, 4}},
		{"epoch_shards", func() wire.JobSpec {
			s := mixSpec(wire.SourceSpec{Dataset: "s3://d/a/", Weight: 1}, wire.SourceSpec{Dataset: "s3://d/b/", Weight: 1}, wire.SourceSpec{Dataset: "s3://d/c/", Weight: 1})
			s.EpochShards = 10
			return s
		}(), []int{5, 5, 5}, []int{4, 3, 3}},
		{"repeat and choose", mixSpec(wire.SourceSpec{Dataset: "s3://d/a/", Weight: 1, Repeat: 2.5}, wire.SourceSpec{Dataset: "s3://d/b/", Weight: 1, Choose: 3},
			wire.SourceSpec{Dataset: "s3://d/c/", Weight: 1}), []int{2, 10, 7}, []int{5, 3, 7}},
	} {
		got, err := EpochSlots(7, tc.spec, tc.listed)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, slots := range got {
			if len(slots) != tc.counts[i] {
				t.Errorf("%s: source %d has %d slots %v, want %d", tc.name, i, len(slots), slots, tc.counts[i])
			}
			// Whole copies first, then distinct draws: no shard more
			// than once beyond its copies.
			m := tc.listed[i]
			seen := map[int]int{}
			for _, s := range slots {
				if s < 0 || s >= m {
					t.Fatalf("%s: source %d: slot shard %d of %d", tc.name, i, s, m)
				}
				seen[s]++
			}
			for s, n := range seen {
				if n != tc.counts[i]/m && n != tc.counts[i]/m+1 {
					t.Errorf("%s: source %d: shard %d %d times of %d slots over %d shards", tc.name, i, s, n, tc.counts[i], m)
				}
			}
		}
		again, _ := EpochSlots(7, tc.spec, tc.listed)
		if diff := cmp.Diff(got, again); diff != "" {
			t.Errorf("%s: not deterministic for the seed:\n%s", tc.name, diff)
		}
	}
	// A source with no shards, or none in the epoch, is named.
	s := mixSpec(wire.SourceSpec{Dataset: "s3://d/a/", Weight: 1}, wire.SourceSpec{Dataset: "s3://d/b/", Weight: 1})
	if _, err := EpochSlots(1, s, []int{3, 0}); err == nil || !strings.Contains(err.Error(), "sources[1].dataset") {
		t.Errorf("an empty source: %v, want an error naming sources[1].dataset", err)
	}
	s.Sources[1].Weight = 0.001
	if _, err := EpochSlots(1, s, []int{3, 3}); err == nil || !strings.Contains(err.Error(), "sources[1]") {
		t.Errorf("a source with no slot: %v, want an error naming sources[1]", err)
	}
}

func TestMixedOrderInterleavesByWeight(t *testing.T) {
	job := wire.Job{Spec: mixSpec(wire.SourceSpec{Dataset: "s3://d/a/", Weight: 3}, wire.SourceSpec{Dataset: "s3://d/b/", Weight: 1}),
		Shards: make([]string, 16), Sources: []wire.JobSource{{First: 0, Slots: 12}, {First: 12, Slots: 4}}}
	for epoch := range 3 {
		order := MixedOrder(job, epoch)
		if sorted := slices.Sorted(slices.Values(order)); !slices.Equal(sorted, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
			t.Fatalf("epoch %d: order %v: want each slot once", epoch, order)
		}
		for k := 0; k+4 <= len(order); k += 4 {
			b := 0
			for _, s := range order[k : k+4] {
				if s >= 12 {
					b++
				}
			}
			if b != 1 {
				t.Errorf("epoch %d: order %v: tasks %d..%d hold %d of B's, want 1", epoch, order, k, k+3, b)
			}
		}
	}
	if slices.Equal(MixedOrder(job, 0), MixedOrder(job, 1)) {
		t.Error("epochs 0 and 1 queue in the same order")
	}
}

// A mixed job's record lists each source's part of the epoch and its
// tasks name their source's bucket and pipeline; CheckRecord takes it.
func TestSubmitMixedJob(t *testing.T) {
	e := newEnv(t, 4) // s3://data/ds/: 4 shards
	ctx := context.Background()
	o := synth.ImageOptions{Samples: 4, Shards: 2, Seed: 2, MinSide: 8, MaxSide: 16, Quality: 50, Classes: 2}
	imgs, err := synth.Images(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, e.s3, "data", "other/", imgs); err != nil {
		t.Fatal(err)
	}
	spec := mixSpec(wire.SourceSpec{Dataset: "s3://data/ds/", Weight: 1}, wire.SourceSpec{Dataset: "s3://data/other/", Weight: 1, Pipeline: "imagenet-eval"})
	job := e.submit(t, spec)
	if len(job.Sources) != 2 || job.Sources[0].Slots != 3 || job.Sources[1].Slots != 3 || job.Sources[1].First != 3 || len(job.Shards) != 6 {
		t.Fatalf("sources %+v, shards %v: want 3 slots each (6 listed, 1:1)", job.Sources, job.Shards)
	}
	if err := CheckRecord("m", job); err != nil {
		t.Errorf("CheckRecord of the submitted record: %v", err)
	}
	for _, st := range storedTasks(t, e.js, "m") {
		src := job.SourceOf(st.task.Shard)
		prefix, pipeline := []string{"ds/", "other/"}[src], []string{"imagenet-train", "imagenet-eval"}[src]
		if st.task.Bucket != "data" || !strings.HasPrefix(st.task.Key, prefix) || st.task.Pipeline != pipeline {
			t.Errorf("task %+v of source %d: want a key under %s, pipeline %s", st.task, src, prefix, pipeline)
		}
	}
	// A record whose shard is out of its source's prefix is refused.
	bad := job
	bad.Shards = slices.Clone(job.Shards)
	bad.Shards[4] = job.Shards[0]
	if err := CheckRecord("m", bad); err == nil || !strings.Contains(err.Error(), "shards[4]") {
		t.Errorf("a shard of another source's prefix: %v, want an error naming shards[4]", err)
	}
	// Both dataset and sources is refused at submit, naming the field.
	spec.ID, spec.Dataset = "m2", "s3://data/ds/"
	if _, err := e.b.Submit(ctx, spec); err == nil || !strings.Contains(err.Error(), "dataset") {
		t.Errorf("dataset and sources: %v", err)
	}
}
