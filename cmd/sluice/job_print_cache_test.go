package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

func TestPrintStatusShowsS3BytesPerEpoch(t *testing.T) {
	job := wire.Job{Spec: wire.JobSpec{ID: "j", Dataset: "s3://b/p/", Epochs: 3}, State: wire.JobRunning, Shards: make([]string, 24)}
	st := wire.JobStatus{Job: "j", State: wire.JobRunning, Updated: time.Now(), Tasks: wire.TaskCounts{Total: 72},
		S3BytesPerEpoch: []int64{4404019, 0, 0}, CacheBytesPerEpoch: []int64{0, 4404019, 4404019},
		CacheHits: 48, CacheMisses: 24, CacheMemoryHits: 36}
	var b strings.Builder
	printStatus(&b, job, st)
	for _, want := range []string{
		"  s3 read   0: 4.2 MiB, 1: 0 B, 2: 0 B\n",
		"  cache     48 of 72 shard reads hit (67%; 36 in a replica's memory), 8.4 MiB from the replicas' caches\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}
