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

func TestPrintStatusShowsEachSource(t *testing.T) {
	job := wire.Job{Spec: wire.JobSpec{ID: "j", Epochs: 2, Sources: []wire.SourceSpec{{Dataset: "s3://d/web/", Weight: 3}, {Dataset: "s3://d/code/", Weight: 1}}},
		State: wire.JobRunning, Shards: make([]string, 8), Sources: []wire.JobSource{{Listed: 4, First: 0, Slots: 6}, {Listed: 4, First: 6, Slots: 2}}}
	st := wire.JobStatus{Job: "j", State: wire.JobRunning, Updated: time.Now(), Tasks: wire.TaskCounts{Total: 16, Done: 9},
		Sources: []wire.SourceProgress{{Dataset: "s3://d/web/", Tasks: 12, TasksDone: 7, SamplesProcessed: 700}, {Dataset: "s3://d/code/", Tasks: 4, TasksDone: 2, SamplesProcessed: 210}}}
	var b strings.Builder
	printStatus(&b, job, st)
	for _, want := range []string{
		"  source 0  s3://d/web/, weight 3: 6 shards of an epoch (4 listed)\n",
		"  source 1  s3://d/code/, weight 1: 2 shards of an epoch (4 listed)\n",
		"  source 0  7/12 tasks done, 700 samples processed\n",
		"  source 1  2/4 tasks done, 210 samples processed\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "dataset") {
		t.Errorf("a mixed job's status names a dataset line:\n%s", b.String())
	}
}
