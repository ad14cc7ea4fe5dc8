package demand

import (
	"time"

	"github.com/sluice-project/sluice/wire"
)

// StallWindow accumulates what happens between two demand signals.
type StallWindow struct {
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
	// Credit is blocked time that earlier windows counted as the trainer's
	// wait while its clients report step times but sent no report in
	// those windows (see waitOf); it carries over rolls.
	Credit time.Duration
}

// blockedIn is the agent-measured blocked time in [w.Start, now], an
// ongoing block included.
func (w StallWindow) blockedIn(now time.Time) time.Duration {
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
	return stalled
}

// waitOf is the trainer's wait in the window [w.Start, now], where it was
// measured, and the credit the next window starts with.
//
// Where clients report step times their wait is the trainer's: the agent's
// blocked time also counts a client's prefetching while its loop computes,
// and misses the time a batch spends on the wire and in decoding. A
// client reports a wait only with its next request, though, so a trainer
// starved for longer than a window sends nothing while it starves: a
// window without a report takes the agent's blocked time, and the wait the
// next report brings is counted less that credit, not twice. (Credit is
// kept for the agent, not per rank; DDP ranks starve together.)
func waitOf(w StallWindow, c ClientWindow, now time.Time) (wait time.Duration, source string, credit time.Duration) {
	blocked := w.blockedIn(now)
	switch {
	case !c.Reporting:
		return blocked, wire.WaitAgent, 0
	case !c.Reported:
		return blocked, wire.WaitAgent, w.Credit + blocked
	default:
		return max(c.MaxWait-w.Credit, 0), wire.WaitClient, 0
	}
}

// stallFraction is the share of a window the trainer stalled for want of
// data, from the share it waited and the GPU's mean utilisation (negative:
// no GPU read).
//
// Waiting alone overstates the stall: CUDA runs asynchronously, so while
// the loop waits for a batch the GPU may still be working through kernels
// queued by the last step, and a prefetching loop waits with work in
// hand. GPU idleness alone overstates it the other way: the GPU also idles
// for host work (logging, checkpoints, syncs) when data is plentiful. The
// stall is the time both held, waiting while the GPU idled, and
// min(wait, 1 - utilisation) is the most that can be: it never blames the
// data for a GPU that was busy, nor for idleness while the trainer had its
// batch. More data replicas can remove at most that much idleness.
func stallFraction(wait, gpu float64) float64 {
	if gpu < 0 {
		return wait
	}
	return min(wait, 1-min(gpu, 1))
}

// demandOf turns a window into the demand signal for the interval
// [w.Start, now], with what the clients reported of it and the GPU's mean
// utilisation in it (negative: no GPU read). It is a pure function so the
// arithmetic can be tested with scripted time.
func demandOf(w StallWindow, c ClientWindow, gpu float64, now time.Time) wire.Demand {
	d := wire.Demand{
		Time:            now,
		BufferedSamples: w.Buffered,
		BufferCapacity:  w.Capacity,
		SamplesDone:     w.Done,
		GPUUtilization:  gpu,
		Step:            c.Times,
	}
	if gpu < 0 {
		d.GPUUtilization = -1
	}
	interval := now.Sub(w.Start)
	if interval <= 0 {
		return d
	}
	wait, source, _ := waitOf(w, c, now)
	secs := interval.Seconds()
	d.IntervalS = secs
	d.ConsumedPerS = float64(w.Consumed) / secs
	d.ArrivedPerS = float64(w.Arrived) / secs
	d.WaitSource = source
	d.WaitFraction = min(max(wait.Seconds()/secs, 0), 1)
	d.StallFraction = stallFraction(d.WaitFraction, d.GPUUtilization)
	return d
}

// Block records that the trainer started waiting at t.
func (w *StallWindow) Block(t time.Time) { w.BlockedSince = t }

// Unblock records that the trainer stopped waiting at t.
func (w *StallWindow) Unblock(t time.Time) {
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

// Roll closes the window at now, returns its demand and starts the next
// window at now (an ongoing block and the credit carry over).
func (w *StallWindow) Roll(now time.Time, c ClientWindow, gpu float64) wire.Demand {
	d := demandOf(*w, c, gpu, now)
	credit := w.Credit
	if now.After(w.Start) {
		_, _, credit = waitOf(*w, c, now)
	}
	*w = StallWindow{Start: now, BlockedSince: w.BlockedSince, Capacity: w.Capacity, Done: w.Done, Credit: credit}
	return d
}
