package integration

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// TestIntegrationAgentRestart: the agent is SIGKILLed mid-epoch and
// started again on the same address; it resumes where its delivered
// batches end, so the trainer gets every sample exactly once.
//
// The kill comes between the trainer's requests: right after it received a
// batch and before it asks for the next. An agent killed while writing a
// response loses or repeats that batch (the trainer cannot tell whether it
// arrived whole); that case is out of this scope.
func TestIntegrationAgentRestart(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages("agentrestart", "train/", SmallImages(scenarioSamples, scenarioShards, 16))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})

	start := time.Now()
	c.Submit(imageJob("agentrestart", d, "imagenet-eval"))
	agent := c.StartAgent("agent", "agentrestart")
	tr := NewTrainer()
	// Mid epoch 0, and again mid epoch 1.
	killAt := map[int]bool{scenarioSamples / scenarioBatch / 2: true, 3 * scenarioSamples / scenarioBatch / 2: true}
	tr.AfterBatch(func(n int) {
		if !killAt[n] {
			return
		}
		url, err := agent.Restart()
		if err != nil {
			t.Errorf("restarting the agent after batch %d: %v", n, err)
			return
		}
		t.Logf("SIGKILLed and restarted the agent after batch %d (%d samples); serving again at %s", n, tr.Samples(), url)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitTrained(t, runTrainer(ctx, tr, agent))
	took := time.Since(start)
	waitReleased(t, c, js, "agentrestart", wire.JobSucceeded, ctrl)
	logReport(t, tr.Check("agent-restart", d.Keys, scenarioEpochs, nil, took))
}
