package itest

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
	jobs := []struct{ id, pipeline string }{{"train", "imagenet-train"}, {"eval", "imagenet-eval"}}
	trainers := make([]*Trainer, len(jobs))
	done := make([]<-chan error, len(jobs))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, j := range jobs {
		spec := imageJob(j.id, d, j.pipeline)
		spec["max_replicas"] = capacity // each may take it all: the controller shares it
		c.Submit(spec)
		trainers[i] = NewTrainer()
		done[i] = runTrainer(ctx, trainers[i], c.StartAgent("agent-"+j.id, j.id, ""))
	}
	for i, j := range jobs {
		waitTrained(t, done[i])
		logReport(t, trainers[i].Check("two-jobs/"+j.id, d.Keys, scenarioEpochs, nil, time.Since(start)))
	}
	stopWatching()
	<-watched
	for _, j := range jobs {
		waitReleased(t, c, js, j.id, wire.JobSucceeded, ctrl)
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
