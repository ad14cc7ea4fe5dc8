package integration

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// TestIntegrationNATSRestart: the nats-server process is stopped and
// started again mid-epoch, on the same port with the same store; the
// controller, replicas and agent reconnect and the job completes.
func TestIntegrationNATSRestart(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages("natsrestart", "train/", SmallImages(scenarioSamples, scenarioShards, 12))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})

	start := time.Now()
	c.Submit(imageJob("natsrestart", d, "imagenet-eval"))
	agent := c.StartAgent("agent", "natsrestart")
	tr := NewTrainer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trained := runTrainer(ctx, tr, agent)

	waitSamples(t, tr, scenarioSamples/2, trained)
	if err := c.NATS.Restart(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.NATS.WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted nats-server after %d samples", tr.Samples())

	waitTrained(t, trained)
	took := time.Since(start)
	waitReleased(t, c, js, "natsrestart", wire.JobSucceeded, ctrl)
	logReport(t, tr.Check("nats-restart", d.Keys, scenarioEpochs, nil, took))
}
