package imagejob

import (
	"context"
	"os/exec"
	"testing"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// Options are the job's: its id and its shard's images.
type Options struct {
	ID               string
	Samples          int
	MinSide, MaxSide int
}

// Job is a one-shard image job's task, its shard in S3 on loopback.
type Job struct {
	// Task is the shard's task as an agent sends it.
	Task wire.ShardTask

	s3Endpoint string
}

// chunkMaxBytes is the job's chunk cap: small, so that a shard makes
// several chunks.
const chunkMaxBytes = 512 << 10

// New starts S3 for the test and puts the shard there (pipeline
// imagenet-train, epoch 0, seed 1).
func New(ctx context.Context, t testing.TB, o Options) Job {
	t.Helper()
	s3c, s3cfg := testenv.S3(t, "")
	imgs, err := synth.Images(synth.ImageOptions{Samples: o.Samples, Shards: 1, Seed: 1,
		MinSide: o.MinSide, MaxSide: o.MaxSide, Quality: 90, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "ds/", imgs); err != nil {
		t.Fatal(err)
	}
	return Job{s3Endpoint: s3cfg.Endpoint,
		Task: wire.ShardTask{Job: o.ID, Epoch: 0, Shard: 0, Bucket: "data", Key: "ds/" + imgs[0].Name,
			Pipeline: "imagenet-train", Seed: 1, ChunkMaxBytes: chunkMaxBytes}}
}

// Serve starts cmd, a `sluice fn serve` command line to which it adds a
// loopback listener and the job's S3 endpoint, and returns the base URL of
// the replica's ready line. cmd's environment is the caller's to set
// (S3 keys included: testenv.S3Env); the replica is killed, if still
// running, when the test ends.
func (j Job) Serve(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	cmd.Args = append(cmd.Args, "--listen", "127.0.0.1:0", "--s3-endpoint", j.s3Endpoint, "--log-level", "warn")
	return testenv.StartReady(t, cmd)
}
