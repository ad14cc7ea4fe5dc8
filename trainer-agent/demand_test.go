package traineragent

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
		w    stallWindow
		now  time.Time
		want wire.Demand
	}{
		{
			name: "rates over the interval",
			w:    stallWindow{Start: at(0), Consumed: 64, Arrived: 96, Buffered: 100, Capacity: 256, Done: 1000},
			now:  at(2000),
			want: wire.Demand{Time: at(2000), IntervalS: 2, ConsumedPerS: 32, ArrivedPerS: 48, BufferedSamples: 100, BufferCapacity: 256, SamplesDone: 1000},
		},
		{
			name: "finished blocks",
			w:    stallWindow{Start: at(0), Stalled: 250 * time.Millisecond},
			now:  at(1000),
			want: wire.Demand{Time: at(1000), IntervalS: 1, StallFraction: 0.25},
		},
		{
			name: "ongoing block counts up to now",
			w:    stallWindow{Start: at(0), Stalled: 100 * time.Millisecond, BlockedSince: at(600)},
			now:  at(1000),
			want: wire.Demand{Time: at(1000), IntervalS: 1, StallFraction: 0.5},
		},
		{
			name: "a block that began before the window counts from the window's start",
			w:    stallWindow{Start: at(1000), BlockedSince: at(200)},
			now:  at(2000),
			want: wire.Demand{Time: at(2000), IntervalS: 1, StallFraction: 1},
		},
		{
			name: "never more than the whole interval",
			w:    stallWindow{Start: at(0), Stalled: 3 * time.Second},
			now:  at(1000),
			want: wire.Demand{Time: at(1000), IntervalS: 1, StallFraction: 1},
		},
		{
			name: "empty interval has no rates",
			w:    stallWindow{Start: at(1000), Consumed: 5, Buffered: 7},
			now:  at(1000),
			want: wire.Demand{Time: at(1000), BufferedSamples: 7},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, demandOf(tc.w, tc.now), approx); diff != "" {
				t.Errorf("demand (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStallWindowAcrossRolls(t *testing.T) {
	approx := cmpopts.EquateApprox(0, 1e-9)
	w := stallWindow{Start: at(0), Capacity: 10}
	w.block(at(200))
	w.unblock(at(500)) // 300 ms in window 1
	w.Consumed += 4
	w.block(at(900)) // 100 ms in window 1, 400 ms in window 2
	w.Done = 4
	d1 := w.roll(at(1000))
	w.unblock(at(1400))
	w.Consumed += 8
	w.Arrived += 20
	w.Done = 12
	d2 := w.roll(at(2000))
	d3 := w.roll(at(3000)) // idle: not waiting, nothing moved

	want := []wire.Demand{
		{Time: at(1000), IntervalS: 1, ConsumedPerS: 4, StallFraction: 0.4, BufferCapacity: 10, SamplesDone: 4},
		{Time: at(2000), IntervalS: 1, ConsumedPerS: 8, ArrivedPerS: 20, StallFraction: 0.4, BufferCapacity: 10, SamplesDone: 12},
		{Time: at(3000), IntervalS: 1, BufferCapacity: 10, SamplesDone: 12},
	}
	if diff := cmp.Diff(want, []wire.Demand{d1, d2, d3}, approx); diff != "" {
		t.Errorf("demands (-want +got):\n%s", diff)
	}
}
