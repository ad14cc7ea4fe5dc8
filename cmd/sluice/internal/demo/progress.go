package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-project/sluice/autoscale/local"
	"github.com/sluice-project/sluice/wire"
)

// reportProgress calls progress every 500ms until the returned stop is called.
func reportProgress(ctx context.Context, progress func(Progress), tr *trainer, act *local.Actuator, expected int64, start time.Time) (stop func()) {
	if progress == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		var lastN, lastWait int64
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				n, w := tr.delivered.Load(), tr.waitedNanos.Load()
				dt := now.Sub(last)
				c := act.Counts()
				progress(Progress{
					Elapsed: now.Sub(start), Delivered: n, Expected: expected,
					SamplesPerS:   float64(n-lastN) / dt.Seconds(),
					StallFraction: min(1, ratio(float64(w-lastWait), float64(dt))),
					Replicas:      act.Ready(jobID), Killed: c.Killed,
				})
				lastN, lastWait, last = n, w, now
			}
		}
	}()
	return func() { cancel(); <-done }
}

func waitFor(ctx context.Context, within time.Duration, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %v", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func nonNil(f []wire.FailedSample) []wire.FailedSample {
	if f == nil {
		return []wire.FailedSample{}
	}
	return f
}
