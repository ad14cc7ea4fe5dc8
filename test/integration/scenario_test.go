package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"

	"github.com/sluice-project/sluice/internal/testenv"
)

// The scenarios' common sizes: 400 small JPEGs in 10 shards, 2 epochs.
const (
	scenarioSamples = 400
	scenarioShards  = 10
	scenarioEpochs  = 2
	scenarioBatch   = 16
)

// jobTimeout bounds one scenario's job, from submission to success.
const jobTimeout = 3 * time.Minute

// imageJob is a spec over d with the scenarios' sizes.
func imageJob(id string, d Dataset, pipeline string) Spec {
	return Spec{
		"id": id, "dataset": d.URL(), "pipeline": pipeline,
		"batch_size": scenarioBatch, "epochs": scenarioEpochs, "seed": 7,
		"max_replicas": 2,
	}
}

// runTrainer reads batches from the agent in the background; the channel
// gets Run's result.
func runTrainer(ctx context.Context, tr *Trainer, agent *Agent) <-chan error {
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx, func() string { return agent.URL }) }()
	return done
}

// waitSamples waits until the trainer has received at least n samples
// (the "mid-epoch" moment of a scenario) or failed.
func waitSamples(t *testing.T, tr *Trainer, n int, trained <-chan error) {
	t.Helper()
	deadline := time.Now().Add(jobTimeout)
	for tr.Samples() < n {
		select {
		case err := <-trained:
			t.Fatalf("trainer ended after %d samples, before %d: %v", tr.Samples(), n, err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("trainer has %d samples after %v, want %d", tr.Samples(), jobTimeout, n)
		}
	}
}

// waitTrained waits for the trainer to get 410 Gone.
func waitTrained(t *testing.T, trained <-chan error) {
	t.Helper()
	select {
	case err := <-trained:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(jobTimeout):
		t.Fatalf("trainer not done after %v", jobTimeout)
	}
}

// waitReleased waits until the job is in state want and its replicas are
// gone, and checks that its tasks, its task consumer and its dispatch plan
// were removed and that no running controller still exports a series of it.
func waitReleased(t *testing.T, c *Cluster, js jetstream.JetStream, job string, want wire.JobState, ctrls ...*Controller) {
	t.Helper()
	c.WaitJobState(js, job, want, time.Minute)
	testenv.CheckFor(t, time.Minute, 200*time.Millisecond, func() error {
		if pids := c.Replicas(); len(pids) > 0 {
			return fmt.Errorf("replicas still running after job %s ended: pids %v", job, pids)
		}
		return nil
	})
	testenv.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error { return jobLeftovers(js, job) })
	testenv.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		for _, ctrl := range ctrls {
			if !ctrl.Running() {
				continue
			}
			series, err := SeriesOf(context.Background(), ctrl.URL+"/metrics", job)
			if err != nil {
				return err
			}
			if len(series) > 0 {
				return fmt.Errorf("%s still exports %d series of job %s after it ended, e.g. %s", ctrl.Name, len(series), job, series[0])
			}
		}
		return nil
	})
}

// jobLeftovers names what job left behind in JetStream: tasks in the task
// stream, its task consumer (the queue its agents pull from), its dispatch
// plan. (The output stream and its reader consumers of the old data path
// are gone: no output passes through JetStream to be left behind.)
func jobLeftovers(js jetstream.JetStream, job string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tasks, err := js.Stream(ctx, wire.TaskStream)
	if err != nil {
		return fmt.Errorf("task stream: %w", err)
	}
	info, err := tasks.Info(ctx, jetstream.WithSubjectFilter(wire.TaskSubject(job)))
	if err != nil {
		return fmt.Errorf("task stream info: %w", err)
	}
	if n := info.State.Subjects[wire.TaskSubject(job)]; n > 0 {
		return fmt.Errorf("job %s: %d tasks left in %s", job, n, wire.TaskStream)
	}
	if _, err := tasks.Consumer(ctx, wire.DispatchConsumer(job)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("job %s: task consumer %s: %v, want it deleted", job, wire.DispatchConsumer(job), err)
	}
	return planGone(ctx, js, job)
}

// planGone checks that job's dispatch plan was deleted from
// wire.DispatchBucket (a missing bucket holds no plan either).
func planGone(ctx context.Context, js jetstream.JetStream, job string) error {
	kv, err := js.KeyValue(ctx, wire.DispatchBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening %s: %w", wire.DispatchBucket, err)
	}
	if e, err := kv.Get(ctx, job); !errors.Is(err, jetstream.ErrKeyNotFound) {
		if err == nil {
			return fmt.Errorf("job %s: dispatch plan left in %s (revision %d): %s", job, wire.DispatchBucket, e.Revision(), e.Value())
		}
		return fmt.Errorf("job %s: dispatch plan: %v, want it deleted", job, err)
	}
	return nil
}
