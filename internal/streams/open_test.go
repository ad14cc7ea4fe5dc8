package streams

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// TestOpenBucketWaitsForAQuorum: on three nodes with R3 buckets, two
// stop, so opening a bucket gets no answer, as for an agent started
// while a lost member's streams elect new leaders. OpenBucket retries
// until a node is back, then opens it.
func TestOpenBucketWaitsForAQuorum(t *testing.T) {
	cluster := testenv.NewNATSCluster(t, 3)
	for i := range 3 {
		cluster.Start(i)
	}
	js := cluster.JetStream(0)
	ctx := context.Background()
	testenv.CheckFor(t, time.Minute, 100*time.Millisecond, func() error {
		return Ensure(ctx, js, Options{Replicas: 3})
	})
	cluster.Stop(1, 2)
	// The bucket's leader, if it was node 0, answers until it finds its
	// quorum gone.
	testenv.CheckFor(t, time.Minute, 100*time.Millisecond, func() error {
		if _, err := js.KeyValue(ctx, wire.JobsBucket); err == nil {
			return errors.New("the bucket still answers with one node of three")
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := OpenBucket(ctx, js, wire.JobsBucket, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("OpenBucket returned %v with one node of three", err)
	case <-time.After(3 * time.Second):
	}
	cluster.Start(1)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("with a quorum again: %v", err)
		}
	case <-time.After(openRetryWindow):
		t.Fatal("OpenBucket did not open within its retry window of a quorum")
	}
}
