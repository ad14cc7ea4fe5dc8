package streams

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// TestOpenBucketWaitsForJetStream: JetStream does not answer (as while
// a lost member's leaders are elected) until the test turns it on.
// OpenBucket retries until then, and opens the bucket.
func TestOpenBucketWaitsForJetStream(t *testing.T) {
	ctx := context.Background()
	js, turnOn := testenv.JetStreamOff(t, func(js jetstream.JetStream) {
		if err := Ensure(ctx, js, Options{}); err != nil {
			t.Fatal(err)
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := OpenBucket(ctx, js, wire.JobsBucket, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("OpenBucket returned %v without JetStream", err)
	case <-time.After(2 * time.Second):
	}
	turnOn()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("with JetStream on: %v", err)
		}
	case <-time.After(openRetryWindow):
		t.Fatal("OpenBucket did not open within its retry window")
	}
}
