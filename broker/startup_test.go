package broker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
)

// TestSubmitWaitsForAFormingCluster: `job submit` on a 3-node JetStream
// cluster with stream replicas 3, started while the cluster is still
// forming (one node up: no meta leader), exited with "creating stream
// SLUICE_TASKS: context deadline exceeded". It now retries with a Warn
// line each time, and submits once the cluster has formed.
func TestSubmitWaitsForAFormingCluster(t *testing.T) {
	cluster := testenv.NewNATSCluster(t, 3)
	cluster.Start(0)
	js := cluster.JetStream(0)
	s3c, _ := testenv.S3(t, "")
	imgs, err := synth.Images(synth.ImageOptions{Samples: 2, Shards: 2, Seed: 1, MinSide: 8, MaxSide: 8, Quality: 50, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(context.Background(), s3c, "data", "ds/", imgs); err != nil {
		t.Fatal(err)
	}
	logger, logs := logbuf.Logger(slog.LevelWarn)
	b := New(js, s3c, streams.Options{Replicas: 3}, logger)

	done := make(chan error, 1)
	go func() {
		_, err := b.Submit(context.Background(), testSpec("early", 1))
		done <- err
	}()
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		select {
		case err := <-done:
			t.Fatalf("submit returned %v with one node of three up", err)
		default:
		}
		if !strings.Contains(logs.String(), "not ready yet; retrying") {
			return errors.New("no retry logged yet")
		}
		return nil
	})
	cluster.Start(1)
	cluster.Start(2)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("submit once the cluster formed: %v\n%s", err, logs)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("submit not done within 90s of the cluster forming\n%s", logs)
	}
	info, err := js.Stream(context.Background(), "SLUICE_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if r := info.CachedInfo().Config.Replicas; r != 3 {
		t.Errorf("task stream has %d replicas, want 3", r)
	}
	t.Logf("first retry line: %s", strings.SplitN(logs.String(), "\n", 2)[0])
}
