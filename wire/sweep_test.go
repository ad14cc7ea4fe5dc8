package wire

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Trials that would be fed the same samples share a job, one reader each;
// a different seed, pipeline, dataset or epoch count makes another job.
func TestSweepGroupsTrialsBySamples(t *testing.T) {
	seed := func(v uint64) *uint64 { return &v }
	s := SweepSpec{ID: "lr", Dataset: "s3://d/x/", Pipeline: "p", BatchSize: 8, Epochs: 2, Seed: 1, MaxReplicas: 4,
		Trials: []Trial{
			{Name: "a"},
			{Name: "b", Seed: seed(2)},
			{Name: "c", Seed: seed(1)}, // the sweep's seed: shares with a
			{Name: "d", Pipeline: "q"},
			{Name: "e", Epochs: 3},
			{Name: "f", Seed: seed(2)},
		}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, j := range s.Jobs() {
		got = append(got, append([]string{j.ID}, j.Readers...))
		if j.BatchSize != 8 || j.MaxReplicas != 4 {
			t.Errorf("job %s: batch %d max %d; want the sweep's 8 and 4", j.ID, j.BatchSize, j.MaxReplicas)
		}
	}
	want := [][]string{{"lr-0", "a", "c"}, {"lr-1", "b", "f"}, {"lr-2", "d"}, {"lr-3", "e"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
}

func TestSweepCountMakesIdenticalTrials(t *testing.T) {
	s := SweepSpec{ID: "n", Dataset: "s3://d/x/", Pipeline: "p", BatchSize: 8, Epochs: 1, Count: 3}
	jobs := s.Jobs()
	if len(jobs) != 1 || !cmp.Equal(jobs[0].Readers, []string{"t0", "t1", "t2"}) {
		t.Errorf("jobs %+v: want one job read by t0, t1, t2", jobs)
	}
}

func TestSweepProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    SweepSpec
		want string
	}{
		{"no trials", SweepSpec{ID: "x"}, "count"},
		{"both", SweepSpec{ID: "x", Count: 2, Trials: []Trial{{Name: "a"}}}, "not both"},
		{"twice", SweepSpec{ID: "x", Trials: []Trial{{Name: "a"}, {Name: "a"}}}, "named twice"},
		{"bad name", SweepSpec{ID: "x", Trials: []Trial{{Name: "a.b"}}}, `"a.b"`},
		{"bad id", SweepSpec{ID: "x y", Count: 1}, "id"},
		{"too many", SweepSpec{ID: "x", Count: 65}, "at most 64"},
	} {
		err := tc.s.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// Trials that read the same mixture share a job; another weight or
// another source's pipeline is another mixture, another job.
func TestSweepGroupsTrialsByMixture(t *testing.T) {
	mix := []SourceSpec{{Dataset: "s3://d/a/", Weight: 3}, {Dataset: "s3://d/b/", Weight: 1}}
	other := []SourceSpec{{Dataset: "s3://d/a/", Weight: 1}, {Dataset: "s3://d/b/", Weight: 1}}
	piped := []SourceSpec{{Dataset: "s3://d/a/", Weight: 3}, {Dataset: "s3://d/b/", Weight: 1, Pipeline: "q"}}
	s := SweepSpec{ID: "m", Sources: mix, EpochShards: 8, Pipeline: "p", BatchSize: 8, Epochs: 1,
		Trials: []Trial{{Name: "a"}, {Name: "b", Sources: other}, {Name: "c", Sources: mix}, {Name: "d", Sources: piped}, {Name: "e", Dataset: "s3://d/a/"}}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, j := range s.Jobs() {
		got = append(got, append([]string{j.ID}, j.Readers...))
		if err := j.WithDefaults().Validate(); err != nil {
			t.Errorf("job %s: %v", j.ID, err)
		}
	}
	want := [][]string{{"m-0", "a", "c"}, {"m-1", "b"}, {"m-2", "d"}, {"m-3", "e"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	if j := s.Jobs()[0]; !cmp.Equal(j.Sources, mix) || j.EpochShards != 8 || j.Dataset != "" {
		t.Errorf("job m-0 reads %+v (epoch_shards %d, dataset %q): want the sweep's mixture", j.Sources, j.EpochShards, j.Dataset)
	}
}
