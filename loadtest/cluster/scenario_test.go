package cluster

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/loadtest/trace"
)

func TestDrawIsDeterministicAndWithinTheScenario(t *testing.T) {
	s := DefaultScenario()
	a, b := s.Draw(), s.Draw()
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("two draws of one scenario differ:\n%s", diff)
	}
	if len(a) != s.Sweeps {
		t.Fatalf("%d sweeps, want %d", len(a), s.Sweeps)
	}
	window, spread := s.Window.Seconds(), s.BurstSpread.Seconds()+s.TrialSpread.Seconds()
	for _, sw := range a {
		if n := len(sw.Arrivals); n < s.TrialsMin || n > s.TrialsMax {
			t.Errorf("%s: %d trials, want %d..%d", sw.Name, n, s.TrialsMin, s.TrialsMax)
		}
		first, last := sw.Arrivals[0], sw.Arrivals[len(sw.Arrivals)-1]
		if first < 0 || last > window+spread || last-first > s.TrialSpread.Seconds() {
			t.Errorf("%s: trials arrive %.0f..%.0f s, want within the window and %v of each other", sw.Name, first, last, s.TrialSpread)
		}
		if sw.TrainS < s.TrialMin.Seconds() || sw.TrainS > s.TrialMax.Seconds() || !(sw.TrainerRate > 0) || !(sw.CPUPerSample > 0) {
			t.Errorf("%s: trains %.0f s at %.0f samples/s, %.4f cpu-s each", sw.Name, sw.TrainS, sw.TrainerRate, sw.CPUPerSample)
		}
	}
	s.Seed++
	if cmp.Equal(a, s.Draw()) {
		t.Error("another seed drew the same sweeps")
	}
}

// TestBurstsCrowdArrivals: with every sweep in one burst, they all arrive
// within the burst's spread; with none, they spread over the window.
func TestBurstsCrowdArrivals(t *testing.T) {
	s := DefaultScenario()
	s.BurstShare, s.Bursts = 1, 1
	span := func(sweeps []Sweep) float64 {
		lo, hi := sweeps[0].Arrivals[0], sweeps[0].Arrivals[0]
		for _, sw := range sweeps {
			lo, hi = min(lo, sw.Arrivals[0]), max(hi, sw.Arrivals[0])
		}
		return hi - lo
	}
	if got := span(s.Draw()); got > s.BurstSpread.Seconds() {
		t.Errorf("one burst: sweeps arrive over %.0f s, want within %v", got, s.BurstSpread)
	}
	s.BurstShare = 0
	if got := span(s.Draw()); got < s.Window.Seconds()/2 {
		t.Errorf("no bursts: sweeps arrive over %.0f s of a %v window", got, s.Window)
	}
}

func TestValidateNamesWhatIsWrong(t *testing.T) {
	s := DefaultScenario()
	s.Nodes, s.TrialsMax, s.BurstShare, s.TrialMax = 0, 2, 1.5, time.Minute
	err := s.Validate()
	for _, want := range []string{"nodes 0", "trials max 2", "burst share 1.5", "trial max 1m0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want it to name %q", err, want)
		}
	}
	if err := DefaultScenario().Validate(); err != nil {
		t.Errorf("default scenario: %v", err)
	}
}

// TestSharedAndIndependentTraceTheSameTrials: a shared sweep is one job
// with a reader per trial, an independent one a job per trial; both hold
// the same GPUs and train the same samples per trial.
func TestSharedAndIndependentTraceTheSameTrials(t *testing.T) {
	s := DefaultScenario()
	s.Sweeps = 5
	sweeps := s.Draw()
	shared, indep := s.Trace(sweeps, Run{Sharing: Shared}), s.Trace(sweeps, Run{Policy: trace.Static, Sharing: Independent, StaticCores: 3})
	if len(shared.Tasks) != 5 || len(indep.Tasks) != Trials(sweeps) {
		t.Fatalf("%d shared and %d independent jobs, want 5 and %d", len(shared.Tasks), len(indep.Tasks), Trials(sweeps))
	}
	readers, perTrial := 0, 0.0
	for _, j := range shared.Tasks {
		readers += j.Readers
		perTrial += j.Samples * float64(j.Readers)
		if j.Cores != j.HostCores {
			t.Errorf("%s: pooled policies ask no data loader cores, got %v beside %v", j.Name, j.Cores, j.HostCores)
		}
	}
	indepSamples := 0.0
	for _, j := range indep.Tasks {
		indepSamples += j.Samples
		if j.Readers != 1 || j.Cores-j.HostCores != 3 {
			t.Errorf("%s: %d readers, %v data loader cores; want 1 and 3", j.Name, j.Readers, j.Cores-j.HostCores)
		}
	}
	if readers != len(indep.Tasks) || math.Abs(perTrial-indepSamples) > 1e-9*indepSamples {
		t.Errorf("shared: %d readers and %.0f samples per trial in all; independent: %d trials, %.0f", readers, perTrial, len(indep.Tasks), indepSamples)
	}
	if shared.Cluster.GPUs != 512 || shared.Cluster.Cores != 64*96 {
		t.Errorf("cluster %+v, want 512 GPUs and %d cores", shared.Cluster, 64*96)
	}
}
