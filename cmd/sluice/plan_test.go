package main

import (
	"strings"
	"testing"
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
	code, _, stderr = runCLI(t, "plan", "--dataset-bytes", "lots", "--shards", "0")
	if code != 2 || !strings.Contains(stderr, "--dataset-bytes") || !strings.Contains(stderr, "--shards 0") {
		t.Errorf("bad flags: exit %d, stderr %q", code, stderr)
	}
}
