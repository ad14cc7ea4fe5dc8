package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/sluice-project/sluice/internal/ready"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// TestFnServeFinishesInFlightShardOnSIGTERM is the contract Knative's
// scale-down relies on: SIGTERM while a shard is being streamed still
// gets that shard's whole output, to its end frame, and then the process
// exits 0. The replica is given S3 and nothing else.
func TestFnServeFinishesInFlightShardOnSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s3c, s3cfg := testenv.S3(t, "data")
	shards, err := synth.Images(synth.ImageOptions{Samples: 300, Shards: 1, Seed: 1, MinSide: 400, MaxSide: 600, Quality: 90, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "ds/", shards); err != nil {
		t.Fatal(err)
	}
	// Small chunks: the shard is many frames long.
	task := wire.ShardTask{Job: "drain", Epoch: 0, Shard: 0, Bucket: "data", Key: "ds/" + shards[0].Name,
		Pipeline: "imagenet-train", Seed: 1, ChunkMaxBytes: 512 << 10}
	cmd := exec.Command(os.Args[0], "fn", "serve", "--listen", "127.0.0.1:0", "--s3-endpoint", s3cfg.Endpoint, "--log-level", "warn")
	cmd.Env = append(append(os.Environ(), replicaEnv+"=1"), testenv.S3Env()...)
	url := testenv.StartReady(t, cmd)

	ev := event.New()
	ev.SetID(task.ID())
	ev.SetSource(wire.EventSource)
	ev.SetType(wire.EventTypeShardTask)
	if err := ev.SetData(event.ApplicationJSON, task); err != nil {
		t.Fatal(err)
	}
	req, err := cehttp.NewHTTPRequestFromEvent(ctx, url, ev)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != wire.ShardStreamMediaType {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	fr := wire.NewFrameReader(resp.Body, task.ChunkMaxBytes)
	f, err := fr.Next()
	if err != nil || f.Kind != wire.FrameChunk || f.Chunk != 0 {
		t.Fatalf("first frame %s %d, %v: want chunk 0", f.Kind, f.Chunk, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	chunks := 1
	var end wire.ShardEnd
	for {
		f, err := fr.Next()
		if err != nil {
			t.Fatalf("after %d chunks: %v (the stream was cut by SIGTERM)", chunks, err)
		}
		if f.Kind == wire.FrameChunk {
			if f.Chunk != chunks {
				t.Fatalf("chunk %d after %d chunks", f.Chunk, chunks)
			}
			chunks++
			continue
		}
		if f.Kind != wire.FrameEnd {
			t.Fatalf("%s frame %s after %d chunks, want the shard end", f.Kind, f.Data, chunks)
		}
		if err := json.Unmarshal(f.Data, &end); err != nil {
			t.Fatal(err)
		}
		break
	}
	if _, err := fr.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the shard end: %v, want the end of the body", err)
	}
	if end.Samples != 300 || end.FailedCount() != 0 || end.Chunks != chunks || chunks < 2 {
		t.Fatalf("in-flight shard after SIGTERM: %d chunks, end %+v; want all 300 samples", chunks, end)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("replica exit after draining: %v, want 0", err)
	}
}

// s3TestEnv gives this process's AWS SDK the keys (none when empty), no
// shared config files and no instance metadata, for one test.
func s3TestEnv(t *testing.T, accessKey, secretKey string) {
	t.Helper()
	for _, k := range []string{"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "SLUICE_CONFIG"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	if accessKey != "" {
		t.Setenv("AWS_ACCESS_KEY_ID", accessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", secretKey)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", empty)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// TestFnServeRefusesToStartWithoutWorkingServers: each problem that would
// fail every task is found at start, named, and exits 1 without a ready line.
func TestFnServeRefusesToStartWithoutWorkingServers(t *testing.T) {
	_, s3cfg := testenv.S3(t, "")
	for _, tc := range []struct {
		name       string
		key        string // AWS_ACCESS_KEY_ID; "" none
		args       []string
		wantStderr string
	}{
		{"unreachable s3", "k", []string{"--s3-endpoint", "http://127.0.0.1:1", "--s3-start-wait", "0"},
			"checking s3: s3 endpoint unreachable at http://127.0.0.1:1"},
		{"no s3 credentials", "", []string{"--s3-endpoint", s3cfg.Endpoint},
			"checking s3: no s3 credentials found for " + s3cfg.Endpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s3TestEnv(t, tc.key, "secret")
			code, stdout, stderr := runCLI(t, append([]string{"fn", "serve", "--listen", "127.0.0.1:0"}, tc.args...)...)
			if code != 1 || !strings.Contains(stderr, tc.wantStderr) || strings.Contains(stdout, ready.Prefix) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 1, no ready line, %q", code, stdout, stderr, tc.wantStderr)
			}
		})
	}
}

// TestFnServeWrongS3Credentials asks a real S3 server that checks
// signatures (versitygw; skipped where it is not installed).
func TestFnServeWrongS3Credentials(t *testing.T) {
	endpoint := testenv.Versitygw(t, "sluice-key", "sluice-secret")
	s3TestEnv(t, "sluice-key", "not-the-secret")
	code, stdout, stderr := runCLI(t, "fn", "serve", "--listen", "127.0.0.1:0", "--s3-endpoint", endpoint)
	if code != 1 || !strings.Contains(stderr, "wrong s3 credentials at "+endpoint+": SignatureDoesNotMatch") || strings.Contains(stdout, ready.Prefix) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestFnServeFlagProblemsAtOnce(t *testing.T) {
	s3TestEnv(t, "k", "s")
	code, _, stderr := runCLI(t, "fn", "serve", "--s3-endpoint", "localhost:9000", "--concurrency", "0", "--frame-write-timeout", "0s")
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	for _, want := range []string{
		`sluice fn serve: --concurrency 0: want 1..256`,
		`sluice fn serve: --frame-write-timeout 0s: want 1s..24h0m0s`,
		`sluice fn serve: --s3-endpoint "localhost:9000": want http(s)://host[:port]`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// TestFnServeTakesNoNATSSettings: a replica answers with its output and
// never reaches NATS, so it has no NATS flags to be given.
func TestFnServeTakesNoNATSSettings(t *testing.T) {
	code, _, stderr := runCLI(t, "fn", "serve", "--nats", "nats://127.0.0.1:4222")
	if code != 2 || !strings.Contains(stderr, "flag provided but not defined: -nats") {
		t.Errorf("exit %d, stderr %q; want 2 and --nats unknown", code, stderr)
	}
}
