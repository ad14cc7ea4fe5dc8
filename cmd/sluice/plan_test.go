package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/planner"
)

func TestPlan(t *testing.T) {
	code, stdout, stderr := runCLI(t, "plan", "--dataset-bytes", "100GiB", "--samples", "1000000", "--shards", "1000",
		"--epochs", "3", "--replicas", "10", "--cache-bytes", "50GiB", "--s3-rate", "100MiB", "--decode-rate", "1000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"keeps 50% of the dataset", "1-2    50.0 GiB   50.0 GiB", "S3 in all: 200.0 GiB, 2.00x the dataset (3x without a cache)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runCLI(t, "plan", "--dataset-bytes", "100GiB", "--samples", "1000000", "--shards", "1000",
		"--epochs", "3", "--replicas", "10", "--cache-bytes", "50GiB", "--s3-rate", "100MiB", "--decode-rate", "1000", "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	snakeKeys(t, stdout)
	code, _, stderr = runCLI(t, "plan", "--dataset-bytes", "lots", "--shards", "0")
	if code != 2 || !strings.Contains(stderr, "--dataset-bytes") || !strings.Contains(stderr, "--shards 0") {
		t.Errorf("bad flags: exit %d, stderr %q", code, stderr)
	}
}

func TestPlanReplicas(t *testing.T) {
	code, stdout, stderr := runCLI(t, "plan", "--trainer-rate", "2000", "--per-replica-rate", "311")
	if code != 0 || !strings.Contains(stdout, "2000 samples/s: 7 (ceil(2000 / 311.0 per replica))") || !strings.Contains(stdout, "from --per-replica-rate") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "plan", "--trainer-rate", "2000", "--per-replica-rate", "311", "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	snakeKeys(t, stdout)
	code, _, stderr = runCLI(t, "plan", "--trainer-rate", "2000")
	if code != 2 || !strings.Contains(stderr, "want --pipeline") {
		t.Errorf("no rate: exit %d, stderr %q", code, stderr)
	}

	// A rate the controllers learned.
	srv, _, js := agentTestNATS(t)
	ctx := context.Background()
	store, err := planner.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Record(ctx, "imagenet-train", "s3://b/train/", planner.Observation{Job: "j1", PerReplica: 250, ReplicaSeconds: 120, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, "plan", "--nats", srv.URL(), "--pipeline", "imagenet-train", "--dataset", "s3://b/val/", "--trainer-rate", "1000")
	if code != 0 || !strings.Contains(stdout, "1000 samples/s: 4") || !strings.Contains(stdout, "over every dataset") || !strings.Contains(stdout, "job j1") {
		t.Fatalf("learned rate: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "plan", "--nats", srv.URL(), "--pipeline", "imagenet-eval", "--trainer-rate", "1000")
	if code != 1 || !strings.Contains(stderr, "no job of it has run long enough") {
		t.Errorf("nothing learned: exit %d\n%s%s", code, stdout, stderr)
	}
}
