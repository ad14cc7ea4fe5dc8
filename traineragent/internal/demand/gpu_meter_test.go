package demand

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

// scriptedGPU returns its readings in turn (an error where err[i] is set).
type scriptedGPU struct {
	readings []float64
	errs     []error
	calls    int
}

func (s *scriptedGPU) Utilization() (float64, error) {
	i := s.calls
	s.calls++
	if i < len(s.errs) && s.errs[i] != nil {
		return 0, s.errs[i]
	}
	return s.readings[i], nil
}

func TestGPUMeter(t *testing.T) {
	broken := errors.New("gpu is lost")
	gpu := &scriptedGPU{
		readings: []float64{0.2, 0.4, 0.9, 0, 0.5, 0, 1.5, 0.7},
		errs:     []error{nil, nil, nil, broken, nil, broken, nil, nil},
	}
	g := NewGPUMeter(gpu, time.Second, slog.New(slog.DiscardHandler))
	if g.every != 250*time.Millisecond {
		t.Errorf("reading every %v, want 250ms for a 1 s window", g.every)
	}
	g.sample()
	g.sample()
	g.sample()
	g.sample() // fails: not counted
	if got := g.Take(); !near(got, 0.5) {
		t.Errorf("window 1: %v, want the mean of 0.2, 0.4 and 0.9", got)
	}
	// No reading in window 2: take reads once itself.
	if got := g.Take(); !near(got, 0.5) || gpu.calls != 5 {
		t.Errorf("window 2: %v after %d readings, want 0.5 read by take", got, gpu.calls)
	}
	// The only reading fails: no GPU figure rather than an idle GPU.
	if got := g.Take(); got != -1 {
		t.Errorf("window 3: %v, want -1 (no reading)", got)
	}
	g.sample() // 1.5 is clamped to 1
	g.sample()
	if got := g.Take(); !near(got, 0.85) {
		t.Errorf("window 4: %v, want 0.85", got)
	}
}

func TestGPUMeterWithoutGPU(t *testing.T) {
	g := NewGPUMeter(nil, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	if g.every != gpuMinSampleEvery {
		t.Errorf("reading every %v, want no faster than NVML's shortest period %v", g.every, gpuMinSampleEvery)
	}
	g.Run(t.Context()) // returns at once
	if got := g.Take(); got != -1 {
		t.Errorf("no gpu: %v, want -1", got)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
