package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent"
	"github.com/sluice-project/sluice/wire"
)

// TestAShardGoneAfterSubmitEndsTheEpochWithoutIt is issue 16's
// reproduction: a job of 32 samples in 4 shards, one shard deleted after
// submit. The trainer once got 24 samples and then waited for over four
// minutes, the job running with no replica. Now the reader gets the 24,
// its epoch ends, the agent reports the shard failed under its key with
// the reason, and the job reaches its outcome listing the shard.
func TestAShardGoneAfterSubmitEndsTheEpochWithoutIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	e := newControllerEnv(t, 32, 4)
	startControllerProcess(t, e, "gone4")
	job, err := e.b.Submit(context.Background(), wire.JobSpec{ID: "gone4", Dataset: "s3://data/ds/",
		Pipeline: "imagenet-eval", BatchSize: 4, Epochs: 1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	gone := job.Shards[1]
	if _, err := e.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String("data"), Key: aws.String(gone)}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := traineragent.Open(ctx, e.js.Conn(), e.js, "gone4", traineragent.Options{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	samples, epochs := 0, map[int]bool{}
	for {
		b, err := a.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d samples: %v (the epoch did not end without the gone shard)", samples, err)
		}
		samples += len(b.Keys)
		epochs[b.Epoch] = true
	}
	if err := <-runErr; err != nil {
		t.Errorf("agent: %v", err)
	}
	if samples != 24 || len(epochs) != 1 {
		t.Errorf("reader got %d samples in %d epochs, want the 24 of the other three shards in 1", samples, len(epochs))
	}
	var reasons []string
	for _, f := range a.Stats().FailedSamples {
		if f.Key == gone {
			reasons = append(reasons, f.Reason)
		}
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "404") {
		t.Errorf("agent reports shard %s failed %q, want once with the function's 404", gone, reasons)
	}

	testenv.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
		s, err := jobStatus(e.js, "gone4")
		if err != nil {
			return err
		}
		if s.State != wire.JobSucceeded || s.Tasks.Failed != 1 || len(s.FailedShards) != 1 || s.FailedShards[0].Key != gone {
			return fmt.Errorf("job is %s, %d tasks failed, failed shards %v; want succeeded, 1 failed: %s", s.State, s.Tasks.Failed, s.FailedShards, gone)
		}
		return nil
	})
}
