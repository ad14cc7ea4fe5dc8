package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// TestIntegrationCancel: a job cancelled mid-epoch with `sluice job
// cancel` ends cancelled, its replicas stop, and it leaves no tasks, no
// task consumer and no dispatch plan behind; its agent, whose task
// consumer is gone, tells the trainer with 410.
func TestIntegrationCancel(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages("cancel", "train/", SmallImages(scenarioSamples, scenarioShards, 15))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})

	start := time.Now()
	c.Submit(imageJob("cancel", d, "imagenet-eval"))
	agent := c.StartAgent("agent", "cancel")
	tr := NewTrainer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trained := runTrainer(ctx, tr, agent)
	waitSamples(t, tr, scenarioSamples/2, trained)
	// The job's series exist while it runs (so that none after means released).
	if series, err := SeriesOf(ctx, ctrl.URL+"/metrics", "cancel"); err != nil || len(series) == 0 {
		t.Errorf("controller exports no series of the running job: %v", err)
	}

	c.MustSluice("job", "cancel", "cancel")
	at := tr.Samples()
	j := c.WaitJobState(js, "cancel", wire.JobCancelled, 10*time.Second)
	waitReleased(t, c, js, "cancel", wire.JobCancelled, ctrl)
	if err := consumersLeft(js, "cancel"); err != nil {
		t.Error(err)
	}
	// The agent tells the trainer the job ended: 410 Gone.
	select {
	case err := <-trained:
		if err != nil {
			t.Errorf("trainer after the cancel: %v, want 410 Gone from the agent", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the agent still serves batches (or waits) 30s after the job was cancelled; want 410 Gone")
	}
	t.Logf("scenario=cancel cancelled_after=%d samples reason=%q replicas=%d seconds=%.1f", at, j.Reason, len(c.Replicas()), time.Since(start).Seconds())
}

// consumersLeft names any consumer of the task stream that belongs to job,
// and the job's dispatch plan if it is still there: with both gone no
// agent can take or send another task of the job.
func consumersLeft(js jetstream.JetStream, job string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, wire.TaskStream)
	if err != nil {
		return err
	}
	names := s.ConsumerNames(ctx)
	for n := range names.Name() {
		if n == wire.DispatchConsumer(job) {
			return fmt.Errorf("consumer %s still on %s", n, wire.TaskStream)
		}
	}
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return err
	}
	return planGone(ctx, js, job)
}
