package autoscale

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluice-project/sluice/wire"
)

func TestAggregate(t *testing.T) {
	stale := 5 * time.Second
	sig := func(reader string, stall float64, buffered int, done bool, at float64) Signal {
		return Signal{wire.Demand{Job: "j", Reader: reader, StallFraction: stall, BufferedSamples: buffered, BufferCapacity: 100, Done: done}, sec(at)}
	}
	for _, tc := range []struct {
		name    string
		signals []Signal
		readers []string
		now     float64
		want    string // reader of the chosen signal, "" for none
		done    bool
	}{
		{"no signal", nil, []string{"a"}, 10, "", false},
		{"one reader", []Signal{sig("a", 0.3, 10, false, 9)}, []string{"a"}, 10, "a", false},
		{"the most stalled reader drives", []Signal{sig("a", 0.1, 10, false, 9), sig("b", 0.6, 90, false, 9), sig("c", 0.2, 0, false, 9)}, []string{"a", "b", "c"}, 10, "b", false},
		{"equal stall: the emptier buffer", []Signal{sig("a", 0.5, 60, false, 9), sig("b", 0.5, 20, false, 9)}, []string{"a", "b"}, 10, "b", false},
		{"stale signals are ignored", []Signal{sig("a", 0.9, 0, false, 1), sig("b", 0.1, 0, false, 9)}, []string{"a", "b"}, 10, "b", false},
		{"all stale", []Signal{sig("a", 0.9, 0, false, 1)}, []string{"a"}, 10, "", false},
		{"a done reader does not drive", []Signal{sig("a", 1, 0, true, 9), sig("b", 0.2, 0, false, 9)}, []string{"a", "b"}, 10, "b", false},
		{"done only once every declared reader is", []Signal{sig("a", 0, 0, true, 9)}, []string{"a", "b"}, 10, "", false},
		{"every reader done", []Signal{sig("a", 0, 0, true, 3), sig("b", 0, 0, true, 4)}, []string{"a", "b"}, 10, "b", true},
		{"undeclared readers are ignored", []Signal{sig("x", 1, 0, false, 9), sig("a", 0.1, 0, false, 9)}, []string{"a"}, 10, "a", false},
		{"no declared readers: every signal counts", []Signal{sig("x", 1, 0, false, 9), sig("a", 0.1, 0, false, 9)}, nil, 10, "x", false},
		{"the default reader's empty name", []Signal{{wire.Demand{Job: "j", StallFraction: 0.4}, sec(9)}}, []string{wire.DefaultReader}, 10, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]Signal{}
			for _, s := range tc.signals {
				m[s.Demand.ReaderName()] = s
			}
			d, at := Aggregate(m, tc.readers, sec(tc.now), stale)
			got := ""
			if d != nil {
				got = d.Reader
				if at != m[d.ReaderName()].At {
					t.Errorf("at %v, want the chosen signal's %v", at, m[d.ReaderName()].At)
				}
				if d.Done != tc.done {
					t.Errorf("done %v, want %v", d.Done, tc.done)
				}
			}
			if tc.name == "the default reader's empty name" {
				if d == nil || d.StallFraction != 0.4 {
					t.Errorf("got %+v, want the default reader's signal", d)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("chosen reader (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigForJob(t *testing.T) {
	cfg := DefaultConfig() // max 8
	cfg.ClusterCapacity = 6
	for _, tc := range []struct {
		min, max         int
		wantMin, wantMax int
	}{
		{0, 0, 0, 6},  // the controller's cap, never above the cluster
		{2, 4, 2, 4},  // the job's own bounds
		{0, 50, 0, 6}, // a job's max above the cluster's capacity
		{9, 3, 3, 3},  // min clamped to max
	} {
		got := cfg.ForJob(tc.min, tc.max)
		if got.MinReplicas != tc.wantMin || got.MaxReplicas != tc.wantMax {
			t.Errorf("ForJob(%d, %d) = min %d max %d, want %d %d", tc.min, tc.max, got.MinReplicas, got.MaxReplicas, tc.wantMin, tc.wantMax)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("ForJob(%d, %d): %v", tc.min, tc.max, err)
		}
	}
}

func TestMergeSteps(t *testing.T) {
	approx := cmpopts.EquateApprox(0, 1e-9)
	for _, tc := range []struct {
		name  string
		times []wire.StepTimes
		want  wire.StepTimes
	}{
		{"none", nil, wire.StepTimes{}},
		{"windows without steps are left out", []wire.StepTimes{{}, {Steps: 2, Ranks: 2, WaitS: 0.1, ComputeS: 0.3, OtherS: 0.1}, {}},
			wire.StepTimes{Steps: 2, Ranks: 2, WaitS: 0.1, ComputeS: 0.3, OtherS: 0.1}},
		{"means weighted by steps", []wire.StepTimes{
			{Steps: 3, Ranks: 1, WaitS: 0.4, ComputeS: 0.2, OtherS: 0},
			{Steps: 1, Ranks: 4, WaitS: 0, ComputeS: 1, OtherS: 0.4},
		}, wire.StepTimes{Steps: 4, Ranks: 5, WaitS: 0.3, ComputeS: 0.4, OtherS: 0.1}},
	} {
		if diff := cmp.Diff(tc.want, MergeSteps(tc.times...), approx); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestAggregateMergesStepTimes: the most stalled reader drives the job's
// signal, and its step times are those of every fresh reader not done.
func TestAggregateMergesStepTimes(t *testing.T) {
	approx := cmpopts.EquateApprox(0, 1e-9)
	sig := func(reader string, stall float64, steps wire.StepTimes, done bool, at float64) Signal {
		return Signal{wire.Demand{Job: "j", Reader: reader, StallFraction: stall, Step: steps, Done: done}, sec(at)}
	}
	m := map[string]Signal{
		"a": sig("a", 0.6, wire.StepTimes{Steps: 1, Ranks: 1, WaitS: 0.5, ComputeS: 0.5}, false, 9),
		"b": sig("b", 0.1, wire.StepTimes{Steps: 3, Ranks: 2, WaitS: 0.1, ComputeS: 0.5, OtherS: 0.2}, false, 9),
		"c": sig("c", 0.9, wire.StepTimes{Steps: 100, Ranks: 8, WaitS: 9}, false, 1), // stale
		"d": sig("d", 0, wire.StepTimes{Steps: 100, Ranks: 8, WaitS: 9}, true, 9),    // done
	}
	d, _ := Aggregate(m, nil, sec(10), 5*time.Second)
	if d == nil || d.Reader != "a" {
		t.Fatalf("got %+v, want reader a to drive", d)
	}
	want := wire.StepTimes{Steps: 4, Ranks: 3, WaitS: 0.2, ComputeS: 0.5, OtherS: 0.15}
	if diff := cmp.Diff(want, d.Step, approx); diff != "" {
		t.Errorf("step times (-want +got):\n%s", diff)
	}
}
