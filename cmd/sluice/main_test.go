package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/cmd/sluice/internal/demo"
	"github.com/sluice-project/sluice/wire"
)

// replicaEnv makes the test binary act as `sluice`, so the demo's local
// actuator can start it as a function replica.
const replicaEnv = "SLUICE_TEST_AS_SLUICE"

func TestMain(m *testing.M) {
	if os.Getenv(replicaEnv) == "1" {
		ctx, stop := signalContext()
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	// `job submit` writes team keys: into a directory of the tests' own,
	// not the user's config directory.
	if os.Getenv(wire.TeamKeyDirEnv) == "" {
		dir, err := os.MkdirTemp("", "sluice-teamkeys-")
		if err != nil {
			panic(err)
		}
		os.Setenv(wire.TeamKeyDirEnv, dir)
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrorsNameTheFlagAndRange(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"demo", "--epochs", "0"}, []string{"--epochs 0: want 1..1000"}},
		{[]string{"demo", "--bogus"}, []string{"flag provided but not defined: -bogus"}},
		{[]string{"demo", "--samples", "10", "--shards", "50", "--max-replicas", "0"},
			[]string{"--shards 50: want 1..10", "--max-replicas 0: want 1..64"}},
		{[]string{"demo", "--log-level", "loud"}, []string{`--log-level "loud": want one of debug, info, warn, error`}},
		{[]string{"fn", "serve", "--concurrency", "0"}, []string{"--concurrency 0: want 1..256"}},
		{[]string{"nonsense"}, []string{`unknown command "nonsense"`}},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, stderr, w)
			}
		}
	}
}

func TestAgentUnreachableNATSIsOneClearError(t *testing.T) {
	done := make(chan struct{})
	var code int
	var stderr string
	go func() {
		code, _, stderr = runCLI(t, "agent", "--job", "j", "--listen", "127.0.0.1:0", "--nats", "nats://127.0.0.1:1")
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("agent hung on an unreachable NATS server")
	}
	if code != 1 || !strings.Contains(stderr, "connecting to nats at nats://127.0.0.1:1") || strings.Contains(stderr, "goroutine ") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// TestDemoEndToEndWithReplicaKills runs a small demo with real replica
// processes, SIGKILLing the replica twice mid-shard, and checks that every
// sample of every epoch arrived exactly once.
func TestDemoEndToEndWithReplicaKills(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run")
	}
	t.Setenv(replicaEnv, "1")
	o := demo.DefaultOptions()
	o.Samples, o.Shards, o.Epochs, o.BatchSize = 480, 6, 2, 16
	o.Corrupt = 3
	o.StepTime = 20 * time.Millisecond
	o.MaxReplicas = 1
	// Small chunks (a few samples each) make a shard many publications
	// long, so a kill at its first chunk lands while the shard is being
	// processed, however fast the decoder; with one replica, the killed
	// one is the one processing it.
	o.ChunkMaxBytes = 512 << 10
	o.ChaosKillMidShard = 2
	o.ReplicaCommand = []string{os.Args[0], "fn", "serve"}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := demo.Run(ctx, o, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(s)
	t.Logf("summary: %s", js)
	if s.SamplesExpected != 960 || s.SamplesDelivered != 960-6 || len(s.FailedSamples) != 6 {
		t.Errorf("expected %d, delivered %d, failed %d; want 960, 954, 6", s.SamplesExpected, s.SamplesDelivered, len(s.FailedSamples))
	}
	if s.Lost != 0 || s.Duplicates != 0 {
		t.Errorf("lost %d, duplicates %d; want 0, 0", s.Lost, s.Duplicates)
	}
	if s.ReplicasKilled != 2 || s.TaskRedeliveries < 2 {
		t.Errorf("killed %d, redeliveries %d; want 2 kills mid-shard, each forcing a redelivery", s.ReplicasKilled, s.TaskRedeliveries)
	}
	if s.ReplicasFinal != 0 || s.Epochs != 2 {
		t.Errorf("replicas final %d, epochs %d; want 0, 2", s.ReplicasFinal, s.Epochs)
	}
	for _, f := range s.FailedSamples {
		if f.Key == "" || !strings.Contains(f.Reason, "jpeg") {
			t.Errorf("failed sample %+v: want its key and a jpeg reason", f)
		}
	}
}

// TestDemoTextAndTabular runs the other two synthetic datasets end to end
// through their built-in pipelines, with real replicas.
func TestDemoTextAndTabular(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run")
	}
	t.Setenv(replicaEnv, "1")
	for _, ds := range []string{"text", "tabular"} {
		t.Run(ds, func(t *testing.T) {
			o := demo.DatasetDefaults(ds)
			o.Samples, o.Shards, o.Epochs, o.StepTime = 3000, 4, 2, time.Millisecond
			o.ReplicaCommand = []string{os.Args[0], "fn", "serve"}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			s, err := demo.Run(ctx, o, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.SamplesDelivered != 6000 || s.Lost != 0 || s.Duplicates != 0 || len(s.FailedSamples) != 0 || s.ReplicasFinal != 0 {
				js, _ := json.Marshal(s)
				t.Fatalf("summary %s: want 6000 delivered, none lost, failed or duplicated, 0 replicas at the end", js)
			}
		})
	}
}
