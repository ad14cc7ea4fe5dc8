package imagejob

import (
	"context"
	"os/exec"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/autoscale/local"
	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/synth"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// Options are the job's: its id, and its shard's images and batches.
type Options struct {
	ID               string
	Samples          int
	MinSide, MaxSide int
	BatchSize        int
}

// Job is a submitted one-shard image job on its own servers.
type Job struct {
	// Conn is a connection to the job's NATS server.
	Conn *nats.Conn
	// Task is the shard's task as the dispatcher sends it.
	Task wire.ShardTask

	natsURL, s3Endpoint string
}

// chunkMaxBytes is the job's chunk cap: small, so that a shard makes
// several chunks.
const chunkMaxBytes = 512 << 10

// Submit starts NATS and S3 for the test, puts the shard in S3 and
// submits the job (pipeline imagenet-train, one epoch, seed 1).
func Submit(ctx context.Context, t testing.TB, o Options) Job {
	t.Helper()
	srv, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s3c, s3cfg := testenv.S3(t, "")
	imgs, err := synth.Images(synth.ImageOptions{Samples: o.Samples, Shards: 1, Seed: 1,
		MinSide: o.MinSide, MaxSide: o.MaxSide, Quality: 90, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "ds/", imgs); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	const pipeline = "imagenet-train"
	job, err := broker.New(js, s3c, streams.Options{}, nil).Submit(ctx, wire.JobSpec{ID: o.ID, Dataset: "s3://data/ds/",
		Pipeline: pipeline, BatchSize: o.BatchSize, Epochs: 1, Seed: 1, ChunkMaxBytes: chunkMaxBytes})
	if err != nil {
		t.Fatal(err)
	}
	return Job{Conn: nc, natsURL: srv.URL(), s3Endpoint: s3cfg.Endpoint,
		Task: wire.ShardTask{Job: o.ID, Epoch: 0, Shard: 0, Bucket: job.Bucket, Key: job.Shards[0],
			Pipeline: pipeline, Seed: 1, ChunkMaxBytes: chunkMaxBytes, OutputSubject: wire.OutputSubject(o.ID)}}
}

// Serve starts cmd, a `sluice fn serve` command line to which it adds a
// loopback listener and the job's servers, and returns the base URL of
// the replica's ready line. cmd's environment is the caller's to set
// (S3 keys included: testenv.S3Env); the replica is killed, if still
// running, when the test ends.
func (j Job) Serve(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	cmd.Args = append(cmd.Args, "--listen", "127.0.0.1:0", "--nats", j.natsURL,
		"--s3-endpoint", j.s3Endpoint, "--log-level", "warn")
	return testenv.StartReady(t, cmd, local.ReadyPrefix)
}
