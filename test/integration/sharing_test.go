package integration

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// TestIntegrationTwoJobs: two jobs with different pipelines (imagenet-train
// and imagenet-eval) over one dataset run at once under a controller
// capped at 2 replicas: both get replicas, never more than 2 run at a
// time, and each trainer gets every sample of every epoch exactly once.
// The eval job has two readers (as a sweep's trials of one seed), served
// by its one agent: each of its two trainers reads at /r/READER and gets
// every sample of every epoch exactly once, and each of the job's shards
// was sent to a replica once per epoch for both readers: the job's final
// status (from the agent's shard results) has every task done with no
// send beyond its first, and its replicas processed no more shards than
// that (sluice_function_shards_total, outcome ok, scraped from their
// /metrics while they run: a scrape may miss the last shards of a replica
// stopped right after them, never add any).
func TestIntegrationTwoJobs(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages("twojobs", "shared/", SmallImages(scenarioSamples, scenarioShards, 14))
	_, js := c.JetStream()
	const capacity = 2
	ctrl := c.StartController("controller", ControllerOptions{MaxReplicas: capacity})

	// Count the live replicas while the jobs run.
	var mu sync.Mutex
	most := 0
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopWatching := func() { stopOnce.Do(func() { close(stop) }) }
	t.Cleanup(stopWatching)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			n := len(c.Replicas())
			mu.Lock()
			most = max(most, n)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	start := time.Now()
	jobs := []struct {
		id, pipeline string
		readers      []string // none: the default reader
	}{{"train", "imagenet-train", nil}, {"eval", "imagenet-eval", []string{"eval-a", "eval-b"}}}
	type read struct {
		name    string
		tr      *Trainer
		trained <-chan error
	}
	var reads []read
	// The two-reader job's shards processed by its replicas.
	shards := ScrapeJobReplicas("eval", "sluice_function_shards_total", []string{`outcome="ok"`}, ctrl.Process)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, j := range jobs {
		spec := imageJob(j.id, d, j.pipeline)
		spec["max_replicas"] = capacity // each may take it all: the controller shares it
		if j.readers != nil {
			spec["readers"] = j.readers
		}
		c.Submit(spec)
		agent := c.StartAgent("agent-"+j.id, j.id)
		if j.readers == nil {
			tr := NewTrainer()
			reads = append(reads, read{j.id, tr, runTrainer(ctx, tr, agent)})
			continue
		}
		for _, r := range j.readers {
			tr := NewTrainer()
			trained := make(chan error, 1)
			go func() { trained <- tr.Run(ctx, func() string { return agent.ReaderURL(r) }) }()
			reads = append(reads, read{j.id + "/" + r, tr, trained})
		}
	}
	for _, r := range reads {
		waitTrained(t, r.trained)
		logReport(t, r.tr.Check("two-jobs/"+r.name, d.Keys, scenarioEpochs, nil, time.Since(start)))
	}
	stopWatching()
	<-watched
	for _, j := range jobs {
		waitReleased(t, c, js, j.id, wire.JobSucceeded, ctrl)
	}
	// One agent fed both readers of the eval job from one send per task.
	shards.Stop()
	want := d.Shards * scenarioEpochs
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if st, err := JobStatus(sctx, js, "eval"); err != nil {
		t.Error(err)
	} else if st.Tasks.Done != want || st.Tasks.Failed != 0 || st.Tasks.Redeliveries != 0 {
		t.Errorf("eval job's final status: tasks %+v; want %d done, none failed and no send beyond a task's first (each shard once per epoch, fanned out to both readers)", st.Tasks, want)
	}
	switch n, replicas, exposing := shards.Total(); {
	case replicas == 0 || exposing == 0:
		t.Errorf("eval job: %d replicas scraped, %d exposing sluice_function_shards_total{outcome=\"ok\"}", replicas, exposing)
	case n == 0 || int(n) > want:
		t.Errorf("eval job: its replicas processed %v shards for its 2 readers, want at most %d (each shard once per epoch, fanned out to both readers)", n, want)
	default:
		t.Logf("eval job: %d tasks for 2 readers (%d shards x %d epochs), each sent once; its %d replicas were seen processing %v of them", want, d.Shards, scenarioEpochs, replicas, n)
	}

	mu.Lock()
	defer mu.Unlock()
	t.Logf("replicas at once: at most %d (cap %d)", most, capacity)
	if most > capacity {
		t.Errorf("%d replicas ran at once, over the controller's --max-replicas %d", most, capacity)
	}
	for _, j := range jobs {
		if !regexp.MustCompile(`replica ready.*\bjob"?[=:]"?` + j.id + `\b`).MatchString(ctrl.Log()) {
			t.Errorf("job %s: no replica started for it (no \"replica ready\" line with job=%s in the controller's log)", j.id, j.id)
		}
	}
}
