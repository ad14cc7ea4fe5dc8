package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// TestIntegrationMixedSources: a job mixing two JPEG datasets weighted
// 3:1 (6 and 2 shards of 80 samples), read by one trainer through a
// `sluice agent`, its tasks queued by `sluice job submit` and its
// samples made by `sluice fn serve` replicas from versitygw. In each
// epoch every window of 64 consecutive samples holds 48 +- 1 of the
// first source (within 2 points of 75%), every sample of each source
// comes once, each named with its source, and `job status` counts each
// source's tasks.
func TestIntegrationMixedSources(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	web := c.UploadImages("mix", "web/", SmallImages(480, 6, 31))
	code := c.UploadImages("mix", "code/", SmallImages(160, 2, 32))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})

	c.Submit(Spec{"id": "mix", "pipeline": "imagenet-eval", "batch_size": 16, "epochs": scenarioEpochs, "seed": 7, "max_replicas": 2,
		"sources": []map[string]any{{"dataset": web.URL(), "weight": 3}, {"dataset": code.URL(), "weight": 1}}})
	agent := c.StartAgent("agent", "mix")
	tr := NewTrainer()
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	waitTrained(t, runTrainer(ctx, tr, agent))
	waitReleased(t, c, js, "mix", wire.JobSucceeded, ctrl)

	for e := range scenarioEpochs {
		sources, seen := tr.Sources(e)
		if len(sources) != 640 {
			t.Fatalf("epoch %d: %d rows named with their source, want 640", e, len(sources))
		}
		lo, hi := 64, 0
		for i := 0; i+64 <= len(sources); i++ {
			n := 0
			for _, s := range sources[i : i+64] {
				if s == 0 {
					n++
				}
			}
			lo, hi = min(lo, n), max(hi, n)
		}
		t.Logf("epoch %d: every window of 64 samples holds %d..%d of source 0 (%.1f%%..%.1f%%; target 75%% +- 2 points)",
			e, lo, hi, 100*float64(lo)/64, 100*float64(hi)/64)
		if lo < 47 || hi > 49 {
			t.Errorf("epoch %d: windows of 64 hold %d..%d of source 0, want 47..49", e, lo, hi)
		}
		for src, d := range []Dataset{web, code} {
			for _, k := range d.Keys {
				if n := seen[fmt.Sprintf("%d/%s", src, k)]; n != 1 {
					t.Errorf("epoch %d: source %d sample %s came %d times, want once", e, src, k, n)
				}
			}
		}
	}
	st, err := JobStatus(ctx, js, "mix")
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.SourceProgress{
		{Dataset: web.URL(), Tasks: 6 * scenarioEpochs, TasksDone: 6 * scenarioEpochs, SamplesProcessed: 480 * scenarioEpochs},
		{Dataset: code.URL(), Tasks: 2 * scenarioEpochs, TasksDone: 2 * scenarioEpochs, SamplesProcessed: 160 * scenarioEpochs},
	}
	deadline := time.Now().Add(10 * time.Second)
	for fmt.Sprint(st.Sources) != fmt.Sprint(want) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if st, err = JobStatus(ctx, js, "mix"); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(st.Sources) != fmt.Sprint(want) {
		t.Errorf("job status sources %+v, want %+v", st.Sources, want)
	}
	out := c.MustSluice("job", "status", "mix")
	t.Logf("sluice job status mix:\n%s", out.Stdout)
}
