package connect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/internal/testenv"
)

func TestRetryRefusal(t *testing.T) {
	for _, c := range []struct {
		took, since time.Duration
		want        bool
	}{
		{10 * time.Millisecond, 0, false},  // the controllers answered: a real refusal
		{999 * time.Millisecond, 0, false}, // still quicker than any server's callout wait
		{2 * time.Second, 2 * time.Second, true},
		{2 * time.Second, authRetryWindow - time.Millisecond, true},
		{2 * time.Second, authRetryWindow, false}, // bounded
		{2 * time.Second, time.Hour, false},
	} {
		if got := retryRefusal(c.took, c.since); got != c.want {
			t.Errorf("retryRefusal(%v, %v) = %v, want %v", c.took, c.since, got, c.want)
		}
	}
}

func TestPingedInHandshake(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("nats: expected 'PONG', got 'PING'"), true},
		{fmt.Errorf("connecting to nats at x: %w", errors.New("nats: expected 'PONG', got 'PING'")), true},
		{errors.New("nats: expected 'PONG', got '+OK'"), false},
		{ErrNATSAuthorization, false},
	} {
		if got := pingedInHandshake(c.err); got != c.want {
			t.Errorf("pingedInHandshake(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestConnectNATSRetryAuthEndsWithCtx: a callout-authenticated client
// whose callout nobody answers retries, logging each retry, and gives up
// when its context ends, with the refusal and the cause.
func TestConnectNATSRetryAuthEndsWithCtx(t *testing.T) {
	c := Config{NATS: NATS{URLs: []string{testenv.NewSecureNATS(t).URL()}, User: "sluice-job-a", Password: "pw", RetryAuth: true}}
	logger, logs := logbuf.Logger(0)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() {
		nc, _, err := c.ConnectNATS(ctx, "t", logger)
		if nc != nil {
			nc.Close()
		}
		done <- err
	}()
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if !strings.Contains(logs.String(), "auth callout was not answered in time: not ready yet; retrying") {
			return fmt.Errorf("no retry logged yet:\n%s", logs)
		}
		return nil
	})
	stop := errors.New("the test stops it")
	cancel(stop)
	err := <-done
	if !errors.Is(err, ErrNATSAuthorization) || !errors.Is(err, stop) {
		t.Fatalf("err %v, want ErrNATSAuthorization and the context's cause", err)
	}
	if !strings.Contains(err.Error(), "as when no auth callout answers in time") {
		t.Errorf("err %v does not say the callout may not have answered", err)
	}
}

// TestConnectNATSWithoutRetryAuthFailsAtOnce: a client not let in by the
// callout (a static user's, RetryAuth unset) is not retried, late refusal
// or not.
func TestConnectNATSWithoutRetryAuthFailsAtOnce(t *testing.T) {
	c := Config{NATS: NATS{URLs: []string{testenv.NewSecureNATS(t).URL()}, User: "sluice-job-a", Password: "pw"}}
	logger, logs := logbuf.Logger(0)
	_, _, err := c.ConnectNATS(context.Background(), "t", logger)
	if !errors.Is(err, ErrNATSAuthorization) {
		t.Fatalf("err %v, want ErrNATSAuthorization", err)
	}
	if strings.Contains(logs.String(), "retrying") {
		t.Errorf("retried:\n%s", logs)
	}
}
