package traineragent

import (
	"time"

	"github.com/sluice-project/sluice/wire"
)

// stallWindow accumulates what happens between two demand signals.
type stallWindow struct {
	Start    time.Time
	Consumed int64 // samples handed to the trainer in the window
	Arrived  int64 // samples received from functions in the window
	// Stalled is the blocked time of blocks that ended in the window,
	// clipped to the window.
	Stalled time.Duration
	// BlockedSince is when the ongoing block began (zero when the trainer
	// is not waiting); it may be before Start.
	BlockedSince time.Time
	Buffered     int
	Capacity     int
	Done         int64 // samples delivered since the start of the job
}

// demandOf turns a window into the demand signal for the interval
// [w.Start, now]. It is a pure function so the arithmetic can be tested
// with scripted time.
func demandOf(w stallWindow, now time.Time) wire.Demand {
	d := wire.Demand{
		Time:            now,
		BufferedSamples: w.Buffered,
		BufferCapacity:  w.Capacity,
		SamplesDone:     w.Done,
	}
	interval := now.Sub(w.Start)
	if interval <= 0 {
		return d
	}
	stalled := w.Stalled
	if !w.BlockedSince.IsZero() {
		from := w.BlockedSince
		if from.Before(w.Start) {
			from = w.Start
		}
		if now.After(from) {
			stalled += now.Sub(from)
		}
	}
	secs := interval.Seconds()
	d.IntervalS = secs
	d.ConsumedPerS = float64(w.Consumed) / secs
	d.ArrivedPerS = float64(w.Arrived) / secs
	d.StallFraction = min(max(stalled.Seconds()/secs, 0), 1)
	return d
}

// block records that the trainer started waiting at t.
func (w *stallWindow) block(t time.Time) { w.BlockedSince = t }

// unblock records that the trainer stopped waiting at t.
func (w *stallWindow) unblock(t time.Time) {
	if w.BlockedSince.IsZero() {
		return
	}
	from := w.BlockedSince
	if from.Before(w.Start) {
		from = w.Start
	}
	if t.After(from) {
		w.Stalled += t.Sub(from)
	}
	w.BlockedSince = time.Time{}
}

// roll closes the window at now, returns its demand and starts the next
// window at now (an ongoing block carries over).
func (w *stallWindow) roll(now time.Time) wire.Demand {
	d := demandOf(*w, now)
	*w = stallWindow{Start: now, BlockedSince: w.BlockedSince, Capacity: w.Capacity, Done: w.Done}
	return d
}
