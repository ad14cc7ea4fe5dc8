package demand

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluice-project/sluice/wire"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestDemandOf(t *testing.T) {
	approx := cmpopts.EquateApprox(0, 1e-9)
	for _, tc := range []struct {
		name string
		w    StallWindow
		now  time.Time
		want wire.Demand
	}{
		{
			name: "rates over the interval",
			w:    StallWindow{Start: at(0), Consumed: 64, Arrived: 96, Buffered: 100, Capacity: 256, Done: 1000},
			now:  at(2000),
			want: wire.Demand{Time: at(2000), IntervalS: 2, ConsumedPerS: 32, ArrivedPerS: 48, BufferedSamples: 100, BufferCapacity: 256, SamplesDone: 1000, WaitSource: wire.WaitAgent, GPUUtilization: -1},
		},
		{
			name: "finished blocks",
			w:    StallWindow{Start: at(0), Stalled: 250 * time.Millisecond},
			now:  at(1000),
			want: wire.Demand{Time: at(1000), IntervalS: 1, StallFraction: 0.25, WaitFraction: 0.25, WaitSource: wire.WaitAgent, GPUUtilization: -1},
		},
		{
			name: "ongoing block counts up to now",
			w:    StallWindow{Start: at(0), Stalled: 100 * time.Millisecond, BlockedSince: at(600)},
			now:  at(1000),
			want: wire.Demand{Time: at(1000), IntervalS: 1, StallFraction: 0.5, WaitFraction: 0.5, WaitSource: wire.WaitAgent, GPUUtilization: -1},
		},
		{
			name: "a block that began before the window counts from the window's start",
			w:    StallWindow{Start: at(1000), BlockedSince: at(200)},
			now:  at(2000),
			want: wire.Demand{Time: at(2000), IntervalS: 1, StallFraction: 1, WaitFraction: 1, WaitSource: wire.WaitAgent, GPUUtilization: -1},
		},
		{
			name: "never more than the whole interval",
			w:    StallWindow{Start: at(0), Stalled: 3 * time.Second},
			now:  at(1000),
			want: wire.Demand{Time: at(1000), IntervalS: 1, StallFraction: 1, WaitFraction: 1, WaitSource: wire.WaitAgent, GPUUtilization: -1},
		},
		{
			name: "empty interval has no rates",
			w:    StallWindow{Start: at(1000), Consumed: 5, Buffered: 7},
			now:  at(1000),
			want: wire.Demand{Time: at(1000), BufferedSamples: 7, GPUUtilization: -1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, demandOf(tc.w, ClientWindow{}, -1, tc.now), approx); diff != "" {
				t.Errorf("demand (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStallWindowAcrossRolls(t *testing.T) {
	approx := cmpopts.EquateApprox(0, 1e-9)
	w := StallWindow{Start: at(0), Capacity: 10}
	w.Block(at(200))
	w.Unblock(at(500)) // 300 ms in window 1
	w.Consumed += 4
	w.Block(at(900)) // 100 ms in window 1, 400 ms in window 2
	w.Done = 4
	d1 := w.Roll(at(1000), ClientWindow{}, -1)
	w.Unblock(at(1400))
	w.Consumed += 8
	w.Arrived += 20
	w.Done = 12
	d2 := w.Roll(at(2000), ClientWindow{}, -1)
	d3 := w.Roll(at(3000), ClientWindow{}, -1) // idle: not waiting, nothing moved

	want := []wire.Demand{
		{Time: at(1000), IntervalS: 1, ConsumedPerS: 4, StallFraction: 0.4, WaitFraction: 0.4, BufferCapacity: 10, SamplesDone: 4},
		{Time: at(2000), IntervalS: 1, ConsumedPerS: 8, ArrivedPerS: 20, StallFraction: 0.4, WaitFraction: 0.4, BufferCapacity: 10, SamplesDone: 12},
		{Time: at(3000), IntervalS: 1, BufferCapacity: 10, SamplesDone: 12},
	}
	for i := range want {
		want[i].GPUUtilization, want[i].WaitSource = -1, wire.WaitAgent
	}
	if diff := cmp.Diff(want, []wire.Demand{d1, d2, d3}, approx); diff != "" {
		t.Errorf("demands (-want +got):\n%s", diff)
	}
}

func TestStallFraction(t *testing.T) {
	for _, tc := range []struct {
		wait, gpu, want float64
	}{
		{0.4, -1, 0.4},  // no gpu: the wait alone
		{0.4, 0.2, 0.4}, // the gpu idled longer than the trainer waited
		{0.4, 0.9, 0.1}, // busy gpu: at most its idle share
		{0, 0, 0},       // idle gpu, no wait: not the data's fault
		{1, 1.2, 0},     // a reading above 1 is full
	} {
		if got := stallFraction(tc.wait, tc.gpu); !near(got, tc.want) {
			t.Errorf("stallFraction(%v, %v) = %v, want %v", tc.wait, tc.gpu, got, tc.want)
		}
	}
}

// TestClientWaitAcrossRolls scripts a trainer whose clients report step
// times: their wait replaces the agent's blocked time, a starved window
// without reports takes the agent's, and that is not counted again when
// the late report brings it.
func TestClientWaitAcrossRolls(t *testing.T) {
	approx := cmpopts.EquateApprox(0, 1e-9)
	reported := func(wait time.Duration) ClientWindow {
		return ClientWindow{Reporting: true, Reported: true, MaxWait: wait}
	}
	silent := ClientWindow{Reporting: true}
	w := StallWindow{Start: at(0)}
	var got []wire.Demand
	// 1: the agent was blocked 600 ms (a prefetching client), the loop
	// waited 100 ms; the GPU was 50% busy.
	w.Block(at(100))
	w.Unblock(at(700))
	got = append(got, w.Roll(at(1000), reported(100*time.Millisecond), 0.5))
	// 2: the loop waited 700 ms; the GPU was 80% busy: the stall is its
	// idle 20%.
	got = append(got, w.Roll(at(2000), reported(700*time.Millisecond), 0.8))
	// 3, 4: starved from 2500 ms, no report: the agent's blocked time.
	w.Block(at(2500))
	got = append(got, w.Roll(at(3000), silent, 0))
	got = append(got, w.Roll(at(4000), silent, 0))
	// 5: the batch comes at 4200 ms; the report brings the whole 1.7 s
	// wait, of which 1.5 s were counted already.
	w.Unblock(at(4200))
	got = append(got, w.Roll(at(5000), reported(1700*time.Millisecond), -1))
	// 6: credit does not outlive a reported window.
	got = append(got, w.Roll(at(6000), reported(300*time.Millisecond), -1))

	want := []wire.Demand{
		{Time: at(1000), IntervalS: 1, WaitFraction: 0.1, StallFraction: 0.1, WaitSource: wire.WaitClient, GPUUtilization: 0.5},
		{Time: at(2000), IntervalS: 1, WaitFraction: 0.7, StallFraction: 0.2, WaitSource: wire.WaitClient, GPUUtilization: 0.8},
		{Time: at(3000), IntervalS: 1, WaitFraction: 0.5, StallFraction: 0.5, WaitSource: wire.WaitAgent, GPUUtilization: 0},
		{Time: at(4000), IntervalS: 1, WaitFraction: 1, StallFraction: 1, WaitSource: wire.WaitAgent, GPUUtilization: 0},
		{Time: at(5000), IntervalS: 1, WaitFraction: 0.2, StallFraction: 0.2, WaitSource: wire.WaitClient, GPUUtilization: -1},
		{Time: at(6000), IntervalS: 1, WaitFraction: 0.3, StallFraction: 0.3, WaitSource: wire.WaitClient, GPUUtilization: -1},
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("demands (-want +got):\n%s", diff)
	}
}

func TestDemandCarriesStepTimes(t *testing.T) {
	times := wire.StepTimes{Steps: 6, Ranks: 2, WaitS: 0.1, ComputeS: 0.3, OtherS: 0.05}
	d := demandOf(StallWindow{Start: at(0)}, ClientWindow{Reporting: true, Reported: true, Times: times}, 0.7, at(1000))
	if d.Step != times {
		t.Errorf("step times %+v, want %+v", d.Step, times)
	}
}
