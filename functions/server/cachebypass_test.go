package server

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
)

// TestCacheTooSmallSaysSoWithTheJob: a replica whose shard cache has no
// room for the job's shards says so once, naming the task's job, and
// counts every read it did not cache.
func TestCacheTooSmallSaysSoWithTheJob(t *testing.T) {
	s3c, _ := testenv.S3(t, bucket)
	shards, err := synth.Images(synth.ImageOptions{Samples: 4, Shards: 1, Seed: 9, MinSide: 48, MaxSide: 64, Quality: 85, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(context.Background(), s3c, bucket, "train/", shards); err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	reg := prometheus.NewRegistry()
	srv, err := New(Config{Cache: shardcache.Config{Dir: t.TempDir(), DiskBytes: 1 << 10}}, s3c, slog.New(slog.NewTextHandler(logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	for range 3 {
		if out := complete(t, post(t, hs.URL, taskEvent(t, task(0)))); out.end.Cache != string(shardcache.OutcomeBypass) {
			t.Fatalf("shard end says cache %q, want bypass", out.end.Cache)
		}
	}
	if n := strings.Count(logs.String(), "does not cache this job's shards"); n != 1 {
		t.Errorf("%d lines say why the cache does not cache, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "job="+job) || !strings.Contains(logs.String(), "reason=no_room") {
		t.Errorf("the line does not name the job and the reason:\n%s", logs)
	}
	if n := metricValue(t, reg, "sluice_cache_bypass_total", "reason", "no_room"); n != 3 {
		t.Errorf("%v reads counted as not cached for no room, want 3", n)
	}
}
