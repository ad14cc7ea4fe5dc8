package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/autoscale/local"
	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/internal/testenv/imagejob"
	"github.com/sluice-project/sluice/wire"
)

// TestFnServeFinishesInFlightShardOnSIGTERM is the contract Knative's
// scale-down relies on: SIGTERM while a shard is being processed still
// gets that shard's full result, and then the process exits 0.
func TestFnServeFinishesInFlightShardOnSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	job := imagejob.Submit(ctx, t, imagejob.Options{ID: "drain", Samples: 300, MinSide: 400, MaxSide: 600, BatchSize: 8})
	cmd := exec.Command(os.Args[0], "fn", "serve")
	cmd.Env = append(append(os.Environ(), replicaEnv+"=1"), testenv.S3Env()...)
	url := job.Serve(t, cmd)

	var once sync.Once
	firstChunk := make(chan struct{})
	sub, err := job.Conn.Subscribe(job.Task.OutputSubject, func(*nats.Msg) { once.Do(func() { close(firstChunk) }) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	target := broker.NewCloudEventsTarget("", broker.StaticEndpoints{url}, http.DefaultClient)
	type reply struct {
		res wire.ShardResult
		err error
	}
	replies := make(chan reply, 1)
	go func() {
		res, err := target.Send(ctx, job.Task)
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
	nsrv, _ := testenv.NATS(t)
	_, s3cfg := testenv.S3(t, "")
	for _, tc := range []struct {
		name       string
		key        string // AWS_ACCESS_KEY_ID; "" none
		args       []string
		wantStderr string
	}{
		{"unreachable nats", "k", []string{"--nats", "nats://127.0.0.1:1,nats://127.0.0.1:2", "--s3-endpoint", s3cfg.Endpoint},
			"connecting to nats at nats://127.0.0.1:1,nats://127.0.0.1:2: nats server unreachable"},
		{"unreachable s3", "k", []string{"--nats", nsrv.URL(), "--s3-endpoint", "http://127.0.0.1:1"},
			"checking s3: s3 endpoint unreachable at http://127.0.0.1:1"},
		{"no s3 credentials", "", []string{"--nats", nsrv.URL(), "--s3-endpoint", s3cfg.Endpoint},
			"checking s3: no s3 credentials found for " + s3cfg.Endpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s3TestEnv(t, tc.key, "secret")
			code, stdout, stderr := runCLI(t, append([]string{"fn", "serve", "--listen", "127.0.0.1:0"}, tc.args...)...)
			if code != 1 || !strings.Contains(stderr, tc.wantStderr) || strings.Contains(stdout, local.ReadyPrefix) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 1, no ready line, %q", code, stdout, stderr, tc.wantStderr)
			}
		})
	}
}

// TestFnServeWrongS3Credentials asks a real S3 server that checks
// signatures (versitygw; skipped where it is not installed).
func TestFnServeWrongS3Credentials(t *testing.T) {
	endpoint := testenv.Versitygw(t, "sluice-key", "sluice-secret")
	nsrv, _ := testenv.NATS(t)
	s3TestEnv(t, "sluice-key", "not-the-secret")
	code, stdout, stderr := runCLI(t, "fn", "serve", "--listen", "127.0.0.1:0", "--nats", nsrv.URL(), "--s3-endpoint", endpoint)
	if code != 1 || !strings.Contains(stderr, "wrong s3 credentials at "+endpoint+": SignatureDoesNotMatch") || strings.Contains(stdout, local.ReadyPrefix) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestFnServeConnectionFlagProblemsAtOnce(t *testing.T) {
	s3TestEnv(t, "k", "s")
	code, _, stderr := runCLI(t, "fn", "serve", "--nats", "http://x", "--nats-tls-cert", "/c.pem", "--nats-token", "t", "--nats-user", "u",
		"--s3-endpoint", "localhost:9000", "--concurrency", "0")
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	for _, want := range []string{
		`sluice fn serve: --concurrency 0: want 1..256`,
		`sluice fn serve: --nats "http://x": want nats://host:port`,
		`sluice fn serve: --nats-user and --nats-token: give one way to authenticate to NATS, not 2`,
		`sluice fn serve: --nats-tls-cert given without its key`,
		`sluice fn serve: --s3-endpoint "localhost:9000": want http(s)://host[:port]`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// TestFnServeReadyOnlyWhileNATSIsConnected: /readyz answers 503 while the
// NATS server is away and 200 again once the replica has reconnected.
func TestFnServeReadyOnlyWhileNATSIsConnected(t *testing.T) {
	store := t.TempDir()
	nsrv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	port := nsrv.Server.Addr().(*net.TCPAddr).Port
	_, s3cfg := testenv.S3(t, "")
	s3TestEnv(t, testenv.S3AccessKey, testenv.S3SecretKey)

	ctx, cancel := context.WithCancel(context.Background())
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"fn", "serve", "--listen", "127.0.0.1:0", "--nats", nsrv.URL(),
			"--s3-endpoint", s3cfg.Endpoint, "--log-level", "warn"}, outW, io.Discard)
		outW.Close()
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d after cancel, want 0", code)
		}
	}()
	out := bufio.NewReader(outR)
	line, err := out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, local.ReadyPrefix) {
		nsrv.Shutdown()
		t.Fatalf("first line %q, %v", line, err)
	}
	go io.Copy(io.Discard, out)
	readyz := strings.TrimSpace(strings.TrimPrefix(line, local.ReadyPrefix)) + "/readyz"
	status := func(want int) func() error {
		return func() error {
			resp, err := http.Get(readyz)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				return fmt.Errorf("/readyz %d, want %d", resp.StatusCode, want)
			}
			return nil
		}
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, status(http.StatusOK))
	nsrv.Shutdown()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, status(http.StatusServiceUnavailable))
	nsrv, err = embedded.StartNATS(embedded.NATSOptions{StoreDir: store, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer nsrv.Shutdown()
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, status(http.StatusOK))
}
