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
