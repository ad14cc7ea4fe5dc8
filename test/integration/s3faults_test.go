package integration

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// retriesMetric counts S3 requests retried (the connect package's metric).
const retriesMetric = "sluice_s3_retries_total"

// TestIntegrationS3Faults: every S3 request of the sluice processes goes
// through a proxy that answers about a quarter of them with 503 SlowDown,
// 500 InternalError, a reset connection or a slow body. Nothing is lost,
// and the replicas count their retries in sluice_s3_retries_total.
//
// It also measures the data path's NATS traffic: the bytes nats-server
// moved (its /varz in_bytes + out_bytes) from the submit to the trainer's
// last batch, per byte of batches the trainer received, must stay within
// natsBytesTarget: the output goes from the replicas to the agent in HTTP
// responses, not through NATS. (The faults only slow the job down, which
// leaves more time for the periodic control traffic: a conservative
// figure.)
func TestIntegrationS3Faults(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{Faults: &FaultOptions{
		Seed: 3, SlowDown: 0.08, Internal: 0.06, Reset: 0.06, SlowBody: 0.05,
	}})
	// More, smaller shards than the other scenarios: more requests to fault.
	d := c.UploadImages("s3faults", "train/", SmallImages(scenarioSamples, 2*scenarioShards, 13))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})
	retries := ScrapeReplicas(retriesMetric, ctrl.Process)

	start := time.Now()
	nb := c.MeasureNATSBytes()
	c.Submit(imageJob("s3faults", d, "imagenet-eval"))
	agent := c.StartAgent("agent", "s3faults")
	tr := NewTrainer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitTrained(t, runTrainer(ctx, tr, agent))
	took := time.Since(start)
	// Before waitReleased, whose polling is the test's own traffic.
	nb.Check(t, "s3-faults/nats-bytes", tr.Bytes())
	retries.Stop()
	waitReleased(t, c, js, "s3faults", wire.JobSucceeded, ctrl)
	logReport(t, tr.Check("s3-faults", d.Keys, scenarioEpochs, nil, took))

	total, replicas, exposing := retries.Total()
	t.Logf("fault proxy: %s; %s over %d replicas (%d exposing it): %.0f", c.Proxy.Summary(), retriesMetric, replicas, exposing, total)
	if c.Proxy.InjectedTotal() == 0 {
		t.Errorf("the proxy injected no fault: %s", c.Proxy.Summary())
	}
	if replicas == 0 {
		t.Errorf("no replica scraped (no \"replica ready ... url=\" line in the controller's log)")
	} else if exposing == 0 {
		t.Errorf("no replica exposes %s", retriesMetric)
	} else if total == 0 {
		t.Errorf("%s is 0 on every replica although the proxy injected %s", retriesMetric, c.Proxy.Summary())
	}
}
