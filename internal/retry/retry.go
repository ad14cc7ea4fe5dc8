package retry

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Do calls fn until it succeeds, fails in a way transient does not call
// transient, or ctx ends, waiting b.Delay(attempt) between calls and
// logging a Warn line naming what per retry. It returns fn's last error,
// wrapped with the number of attempts once there was more than one.
func Do(ctx context.Context, logger *slog.Logger, b Backoff, what string, transient func(error) bool, fn func(context.Context) error) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			if attempt > 1 {
				logger.Info(what+": done after retrying", "attempts", attempt)
			}
			return nil
		}
		if !transient(err) {
			if attempt > 1 {
				return fmt.Errorf("%w (after %d attempts)", err, attempt)
			}
			return err
		}
		giveUp := func() error {
			return fmt.Errorf("%w (after %d attempts; gave up: %w)", err, attempt, context.Cause(ctx))
		}
		if ctx.Err() != nil {
			return giveUp()
		}
		d := b.Delay(attempt, rand.Float64())
		logger.Warn(what+": not ready yet; retrying", "attempt", attempt, "in", d.Round(time.Millisecond), "err", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return giveUp()
		case <-t.C:
		}
	}
}
