package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
)

// TestNewWaitsForTheTaskConsumer: on three nodes with R3 streams, two
// stop, so the task consumer has no leader and binding to it times out,
// as for an agent started while a lost member's consumers elect new
// leaders. New retries until a node is back, then binds.
func TestNewWaitsForTheTaskConsumer(t *testing.T) {
	cluster := testenv.NewNATSCluster(t, 3)
	for i := range 3 {
		cluster.Start(i)
	}
	js := cluster.JetStream(0)
	ctx := context.Background()
	job := testJob("bind", 2, 1)
	testenv.CheckFor(t, time.Minute, 100*time.Millisecond, func() error {
		return streams.Ensure(ctx, js, streams.Options{Replicas: 3})
	})
	if _, err := js.CreateConsumer(ctx, "SLUICE_TASKS", streams.Dispatch(job.Spec.ID, 0)); err != nil {
		t.Fatal(err)
	}
	cluster.Stop(1, 2)
	// The consumer's leader, if it was node 0, answers until it finds its
	// quorum gone.
	testenv.CheckFor(t, time.Minute, 100*time.Millisecond, func() error {
		if _, err := js.Consumer(ctx, "SLUICE_TASKS", streams.Dispatch(job.Spec.ID, 0).Durable); err == nil {
			return errors.New("the consumer still answers with one node of three")
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := New(ctx, js.Conn(), js, job, newRecSink(t), Options{Agent: "a"}, nil, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("New returned %v with one node of three", err)
	case <-time.After(3 * time.Second):
	}
	cluster.Start(1)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("with a quorum again: %v", err)
		}
	case <-time.After(bindRetryWindow):
		t.Fatal("New did not bind within its retry window of a quorum")
	}
}
