package retry

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/logbuf"
)

// quick keeps the tests' waits short; the policy is Delay's, tested apart.
var quick = Backoff{Base: time.Millisecond, Cap: 2 * time.Millisecond}

func newLog() (*slog.Logger, *logbuf.Buffer) { return logbuf.Logger(slog.LevelWarn) }

var errFlaky = errors.New("not yet")

func TestDoRetriesTransientErrorsAndLogsEach(t *testing.T) {
	logger, logs := newLog()
	calls := 0
	err := Do(context.Background(), logger, quick, "creating things", func(err error) bool { return errors.Is(err, errFlaky) },
		func(context.Context) error {
			if calls++; calls < 4 {
				return errFlaky
			}
			return nil
		})
	if err != nil || calls != 4 {
		t.Fatalf("Do: %v after %d calls, want success on the 4th", err, calls)
	}
	if n := strings.Count(logs.String(), "creating things: not ready yet; retrying"); n != 3 {
		t.Errorf("%d retry lines, want 3:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "attempt=3") {
		t.Errorf("log lacks Warn lines counting attempts:\n%s", logs)
	}
}

func TestDoStopsAtAPermanentError(t *testing.T) {
	logger, logs := newLog()
	calls := 0
	bad := errors.New("refused")
	err := Do(context.Background(), logger, quick, "x", func(err error) bool { return errors.Is(err, errFlaky) },
		func(context.Context) error {
			if calls++; calls == 1 {
				return errFlaky
			}
			return bad
		})
	if !errors.Is(err, bad) || calls != 2 || !strings.Contains(err.Error(), "after 2 attempts") {
		t.Errorf("Do: %v after %d calls; want the permanent error at the 2nd, counting attempts", err, calls)
	}
	if n := strings.Count(logs.String(), "retrying"); n != 1 {
		t.Errorf("%d retry lines, want 1", n)
	}
}

func TestDoEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("shutting down")
	calls := 0
	err := Do(ctx, nil, Backoff{Base: time.Hour, Cap: time.Hour}, "x", func(error) bool { return true },
		func(context.Context) error {
			calls++
			cancel(stop) // the wait after this failure ends with ctx
			return errFlaky
		})
	if !errors.Is(err, errFlaky) || !errors.Is(err, stop) || calls != 1 {
		t.Errorf("Do: %v after %d calls; want the last error and the cause, at once", err, calls)
	}
}
