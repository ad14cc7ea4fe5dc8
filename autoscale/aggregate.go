package autoscale

import (
	"slices"
	"time"

	"github.com/sluice-project/sluice/internal/sat"
	"github.com/sluice-project/sluice/wire"
)

// Signal is a reader's latest demand signal and when it arrived.
type Signal struct {
	Demand wire.Demand
	At     time.Time
}

// bufferFill is how full a signal's buffer is (buffered / capacity).
func bufferFill(d wire.Demand) float64 {
	if d.BufferCapacity <= 0 {
		return 0
	}
	return float64(d.BufferedSamples) / float64(d.BufferCapacity)
}

// Aggregate reduces the latest signals of a job's readers (by reader name)
// to the one signal the policy reads. readers are the job's declared
// readers; signals of others are ignored (none declared: all count).
//
//   - Once every declared reader's signal says Done, the job's demand is
//     done (the latest of them is returned).
//   - Otherwise the most stalled reader among those not done with a signal
//     fresher than stale drives the job (ties: the emptier buffer, then
//     name order): replicas must keep up with the slowest-fed consumer,
//     because the output is kept until every reader took it.
//   - No fresh signal: nil.
//
// The step times of the returned signal are those of every fresh reader
// not done, merged (MergeSteps): the job's mean step, where the rest of
// the signal is the driving reader's.
func Aggregate(signals map[string]Signal, readers []string, now time.Time, stale time.Duration) (*wire.Demand, time.Time) {
	declared := func(r string) bool { return len(readers) == 0 || slices.Contains(readers, r) }
	names := make([]string, 0, len(signals))
	for r := range signals {
		if declared(r) {
			names = append(names, r)
		}
	}
	slices.Sort(names)

	expect := readers
	if len(expect) == 0 {
		expect = names
	}
	allDone := len(expect) > 0
	var last Signal
	for _, r := range expect {
		s, ok := signals[r]
		if !ok || !s.Demand.Done {
			allDone = false
			break
		}
		if s.At.After(last.At) {
			last = s
		}
	}
	if allDone {
		d := last.Demand
		return &d, last.At
	}

	var best *Signal
	var steps []wire.StepTimes
	for _, r := range names {
		s := signals[r]
		if s.Demand.Done || s.At.IsZero() || now.Sub(s.At) > stale {
			continue
		}
		steps = append(steps, s.Demand.Step)
		if best == nil || s.Demand.StallFraction > best.Demand.StallFraction ||
			(s.Demand.StallFraction == best.Demand.StallFraction && bufferFill(s.Demand) < bufferFill(best.Demand)) {
			best = &s
		}
	}
	if best == nil {
		return nil, time.Time{}
	}
	d := best.Demand
	d.Done = false
	d.Step = MergeSteps(steps...)
	return &d, best.At
}

// MergeSteps combines step times of several readers (or windows) into one:
// the means weighted by the steps each covers, the steps and ranks added.
// Readers are separate trainers, so their ranks add up.
func MergeSteps(times ...wire.StepTimes) wire.StepTimes {
	var out wire.StepTimes
	var wait, compute, other float64
	for _, t := range times {
		if t.Steps <= 0 {
			continue
		}
		n := float64(t.Steps)
		out.Steps = sat.Add64(out.Steps, t.Steps)
		out.Ranks = sat.Sum(out.Ranks, t.Ranks)
		wait += t.WaitS * n
		compute += t.ComputeS * n
		other += t.OtherS * n
	}
	if out.Steps > 0 {
		n := float64(out.Steps)
		out.WaitS, out.ComputeS, out.OtherS = wait/n, compute/n, other/n
	}
	return out
}
