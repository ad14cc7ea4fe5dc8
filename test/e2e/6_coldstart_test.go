package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/test/integration"
)

// firstBatch runs tr against url until its first batch and returns when
// that came, measured from start; the rest of the job is read in the
// background and checked by the caller through done.
func firstBatch(t *testing.T, tr *integration.Trainer, start time.Time, url string) (time.Duration, <-chan error) {
	t.Helper()
	var once sync.Once
	first := make(chan time.Duration, 1)
	tr.AfterBatch(func(int) { once.Do(func() { first <- time.Since(start) }) })
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	go func() { done <- tr.Run(ctx, func() string { return url }) }()
	select {
	case d := <-first:
		return d, done
	case err := <-done:
		t.Fatalf("trainer ended before its first batch: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("no first batch within 3 minutes")
	}
	return 0, nil
}

// TestColdStartThroughTheActivator measures, from a job's submission to
// its first batch, the function at zero pods on Knative (the request held
// by the activator while the KPA starts a pod) against the local actuator
// (`fn serve` processes the controller starts) in the same run, three
// times each, alternating; the target is on the median round.
func TestColdStartThroughTheActivator(t *testing.T) {
	e := need(t)
	const samples, shards, epochs = 240, 6, 1

	// The local actuator, on a NATS and an S3 server of its own on the node.
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	vgw, err := testenv.FindVersityGW(root)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := integration.NATSServerBinary(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	lc := integration.StartCluster(t, integration.Binaries{Sluice: e.sluice, NATSServer: ns, VersityGW: vgw}, integration.ClusterOptions{})
	ctl := lc.StartController("ctl-local", integration.ControllerOptions{MaxReplicas: 2})
	// noLocalReplicas waits until the local controller runs no replica:
	// a cold start on both sides.
	noLocalReplicas := func() {
		waitFor(t, 2*time.Minute, 200*time.Millisecond, func() error {
			n, _, err := integration.ScrapeSum(context.Background(), ctl.URL+"/metrics", "sluice_local_replicas")
			if err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("%v local replicas", n)
			}
			return nil
		})
	}
	ld := lc.UploadImages("cold", "local/", integration.SmallImages(samples, shards, 11))
	kd := e.dataset(t, "cold-"+e.suffix+"/", samples, shards)
	js := e.jetStream(t)

	var local, knative []time.Duration
	for round := range 3 {
		id := "cold-local-" + string(rune('a'+round))
		noLocalReplicas()
		start := time.Now()
		lc.Submit(integration.Spec{"id": id, "dataset": ld.URL(), "pipeline": "imagenet-eval",
			"batch_size": 16, "epochs": epochs, "seed": 7, "max_replicas": 2})
		a := lc.StartAgent("agent-"+id, id)
		tr := integration.NewTrainer()
		d, done := firstBatch(t, tr, start, a.URL)
		local = append(local, d)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := tr.Check(id, ld.Keys, epochs, ld.Corrupt, time.Since(start)).Err(); err != nil {
			t.Fatal(err)
		}

		// No pod at all, the last one's 30 s drain included: a cold start.
		e.waitScaledToZero(t, fnService)
		wctx, stopWatch := context.WithCancel(context.Background())
		tl := e.watchPods(wctx, t, fnService, time.Now())
		j := e.startJob(t, "cold-"+string(rune('a'+round)), kd, epochs, 2)
		knative = append(knative, j.firstBatch(t))
		stopWatch()
		j.finish(t, e, js)
		t.Logf("figures: round=%d first_batch_local_s=%.2f first_batch_knative_s=%.2f ratio=%.2f",
			round, local[round].Seconds(), knative[round].Seconds(), knative[round].Seconds()/local[round].Seconds())
		t.Logf("figures: round=%d knative_pod_since_submit %s first_batch=%.2fs", round, tl, knative[round].Seconds())
	}
	ratios := make([]float64, len(local))
	for i := range local {
		ratios[i] = knative[i].Seconds() / local[i].Seconds()
	}
	slices.Sort(ratios)
	// A figure, not a pass mark (the target is 1.5x): speed is measured,
	// never asserted in a test.
	t.Logf("figures: cold_start_ratio_median=%.2f (rounds %.2f)", ratios[len(ratios)/2], ratios)
}
