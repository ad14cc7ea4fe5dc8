package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
)

// TestNewWaitsForTheTaskConsumer: JetStream does not answer (as while a
// lost member's consumers elect new leaders, for an agent started then)
// until the test turns it on. New retries until then, and binds.
func TestNewWaitsForTheTaskConsumer(t *testing.T) {
	ctx := context.Background()
	job := testJob("bind", 2, 1)
	js, turnOn := testenv.JetStreamOff(t, func(js jetstream.JetStream) {
		if err := streams.Ensure(ctx, js, streams.Options{}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateConsumer(ctx, "SLUICE_TASKS", streams.Dispatch(job.Spec.ID, 0)); err != nil {
			t.Fatal(err)
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := New(ctx, js.Conn(), js, job, newRecSink(t), Options{Agent: "a"}, nil, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("New returned %v without JetStream", err)
	case <-time.After(2 * time.Second):
	}
	turnOn()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("with JetStream on: %v", err)
		}
	case <-time.After(bindRetryWindow):
		t.Fatal("New did not bind within its retry window")
	}
}
