package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestBenchCacheEndToEnd runs `sluice bench cache` small: three real jobs
// with real replicas behind the slow link. The job whose dataset fits the
// cache reads it from S3 once; every run delivers every sample once. (The
// speed-up is measured by the command itself, never asserted in a test.)
func TestBenchCacheEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run")
	}
	t.Setenv(replicaEnv, "1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb strings.Builder
	code := run(ctx, []string{"bench", "cache", "--samples", "600", "--shards", "6", "--s3-rate", "8MiB", "--s3-latency", "2ms", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	snakeKeys(t, out.String())
	var runs []cacheRun
	if err := json.Unmarshal([]byte(out.String()), &runs); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3", len(runs))
	}
	for _, r := range runs {
		s := r.Summary
		if s.SamplesDelivered != 1800 || s.Duplicates != 0 || s.Lost != 0 || len(s.EpochS) != 3 {
			t.Errorf("%s: %d of 1800 delivered, %d duplicates, %d lost, %d epoch times", r.Name, s.SamplesDelivered, s.Duplicates, s.Lost, len(s.EpochS))
		}
		ratio := float64(s.S3LinkBytes) / float64(s.DatasetBytes)
		t.Logf("%s: %.2fx the dataset from S3 (model %.2fx), status per epoch %v, %d hits of %d", r.Name, ratio, r.Model.S3Ratio,
			s.S3BytesPerEpoch, s.CacheHits, s.CacheHits+s.CacheMisses)
		switch r.Name {
		case "none":
			if ratio < 2.99 || s.CacheHits != 0 {
				t.Errorf("no cache: %.2fx from S3 and %d hits, want 3x and none", ratio, s.CacheHits)
			}
		case "fits":
			if ratio > 1.1 || s.CacheHits != 12 {
				t.Errorf("dataset fits: %.2fx from S3 and %d hits, want at most 1.1x and 12 (every read after epoch 0)", ratio, s.CacheHits)
			}
			if len(s.S3BytesPerEpoch) != 3 || s.S3BytesPerEpoch[1] != 0 || s.S3BytesPerEpoch[2] != 0 {
				t.Errorf("dataset fits: S3 bytes per epoch %v, want none after epoch 0", s.S3BytesPerEpoch)
			}
		case "too small":
			if ratio > 3.01 {
				t.Errorf("too small: %.2fx from S3, more than without a cache", ratio)
			}
		}
	}
}
