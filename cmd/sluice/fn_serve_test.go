package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/autoscale/local"
	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/synth"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// TestFnServeFinishesInFlightShardOnSIGTERM is the contract Knative's
// scale-down relies on: SIGTERM while a shard is being processed still
// gets that shard's full result, and then the process exits 0.
func TestFnServeFinishesInFlightShardOnSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s3c, s3cfg := testenv.S3(t, "")
	imgs, err := synth.Images(synth.ImageOptions{Samples: 300, Shards: 1, Seed: 1, MinSide: 400, MaxSide: 600, Quality: 90, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "ds/", imgs); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	job, err := broker.New(js, s3c, streams.Options{}, nil).Submit(ctx, wire.JobSpec{ID: "drain", Dataset: "s3://data/ds/",
		Pipeline: "imagenet-train", BatchSize: 8, Epochs: 1, Seed: 1, ChunkMaxBytes: 512 << 10})
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "fn", "serve", "--listen", "127.0.0.1:0", "--nats", srv.URL(),
		"--s3-endpoint", s3cfg.Endpoint, "--log-level", "warn")
	cmd.Env = append(os.Environ(), replicaEnv+"=1", "AWS_ACCESS_KEY_ID="+s3cfg.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3cfg.SecretKey)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, local.ReadyPrefix) {
		t.Fatalf("replica's first line %q, %v: want %q", line, err, local.ReadyPrefix+"URL")
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, local.ReadyPrefix))

	var once sync.Once
	firstChunk := make(chan struct{})
	sub, err := nc.Subscribe(wire.OutputSubject("drain"), func(*nats.Msg) { once.Do(func() { close(firstChunk) }) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	task := wire.ShardTask{Job: "drain", Epoch: 0, Shard: 0, Bucket: job.Bucket, Key: job.Shards[0],
		Pipeline: "imagenet-train", Seed: 1, ChunkMaxBytes: 512 << 10, OutputSubject: wire.OutputSubject("drain")}
	target := broker.NewCloudEventsTarget("", broker.StaticEndpoints{url}, http.DefaultClient)
	type reply struct {
		res wire.ShardResult
		err error
	}
	replies := make(chan reply, 1)
	go func() {
		res, err := target.Send(ctx, task)
		replies <- reply{res, err}
	}()
	select {
	case <-firstChunk:
	case <-ctx.Done():
		t.Fatal("the replica published nothing")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-replies
	if r.err != nil || r.res.Samples != 300 || len(r.res.Failed) != 0 {
		t.Fatalf("in-flight shard after SIGTERM: %+v, %v; want all 300 samples", r.res, r.err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("replica exit after draining: %v, want 0", err)
	}
}
