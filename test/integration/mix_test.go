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
// source's tasks. A second job weights the same sources 1:3: the epoch's
// 8 shards are 2 of the first source's 6 (without replacement) and the
// second's 2 three times each; its windows hold 16 +- 1 of the first.
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
		seen := checkWindows(t, tr, e, 48)
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

	// 1:3 over the same shards: web is sampled, code repeated.
	c.Submit(Spec{"id": "mixrep", "pipeline": "imagenet-eval", "batch_size": 16, "epochs": scenarioEpochs, "seed": 8, "max_replicas": 2,
		"sources": []map[string]any{{"dataset": web.URL(), "weight": 1}, {"dataset": code.URL(), "weight": 3}}})
	agent = c.StartAgent("agent-rep", "mixrep")
	tr = NewTrainer()
	waitTrained(t, runTrainer(ctx, tr, agent))
	waitReleased(t, c, js, "mixrep", wire.JobSucceeded, ctrl)
	job, err := Job(ctx, js, "mixrep")
	if err != nil {
		t.Fatal(err)
	}
	if len(job.Sources) != 2 || job.Sources[0].Slots != 2 || job.Sources[1].Slots != 6 {
		t.Fatalf("mixrep's sources %+v: want 2 shards of web's 6, 6 of code's 2", job.Sources)
	}
	for e := range scenarioEpochs {
		seen := checkWindows(t, tr, e, 16)
		webSeen := 0
		for _, k := range web.Keys {
			switch n := seen["0/"+k]; n {
			case 0:
			case 1:
				webSeen++
			default:
				t.Errorf("epoch %d: web sample %s came %d times, want at most once", e, k, n)
			}
		}
		if webSeen != 160 {
			t.Errorf("epoch %d: %d web samples, want 160 (2 shards of 80)", e, webSeen)
		}
		for _, k := range code.Keys {
			if n := seen["1/"+k]; n != 3 {
				t.Errorf("epoch %d: code sample %s came %d times, want 3 (its shard repeated)", e, k, n)
			}
		}
	}
}

// checkWindows checks that epoch e brought 640 rows, each named with its
// source, every window of 64 of them holding want +- 1 of source 0 (within
// 2 points), and returns how many times each "source/key" came.
func checkWindows(t *testing.T, tr *Trainer, e, want int) map[string]int {
	t.Helper()
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
	t.Logf("epoch %d: every window of 64 samples holds %d..%d of source 0 (%.1f%%..%.1f%%; target %.0f%% +- 2 points)",
		e, lo, hi, 100*float64(lo)/64, 100*float64(hi)/64, 100*float64(want)/64)
	if lo < want-1 || hi > want+1 {
		t.Errorf("epoch %d: windows of 64 hold %d..%d of source 0, want %d..%d", e, lo, hi, want-1, want+1)
	}
	return seen
}
