package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent"
	"github.com/sluice-project/sluice/wire"
)

// startAgent runs `sluice agent` as a child process and returns its URL.
func startAgent(t *testing.T, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"agent", "--listen", "127.0.0.1:0", "--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), replicaEnv+"=1")
	return cmd, testenv.StartReady(t, cmd)
}

// agentTestNATS is an embedded NATS with Sluice's streams and buckets,
// as a deployment's agents find it.
func agentTestNATS(t *testing.T) (*embedded.NATS, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(context.Background(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return srv, nc, js
}

// waitExit waits for cmd and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			return 0
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not exit within 30s")
	}
	return -1
}

// TestAgentCommandServesBatchesUntil410 starts `sluice agent` before the
// job exists, then submits it (record, task consumer and tasks, as the
// broker does) with a function replica on loopback in its dispatch plan:
// the agent sends the tasks there, and the trainer's GET /v1/batch gets
// every sample of every epoch once, then 410, and the agent exits 0.
func TestAgentCommandServesBatchesUntil410(t *testing.T) {
	srv, nc, js := agentTestNATS(t)
	cmd, url := startAgent(t, "--job", "cli", "--nats", srv.URL(), "--linger", "20s")

	resp, err := http.Get(url + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err := http.Get(url + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /readyz before the job exists: %v %v, want 503", resp, err)
	}

	want := submitAgentTestJob(t, nc, js, "cli")

	got := map[string]bool{}
	getBatches(t, url, got, -1)
	if len(got) != len(want) {
		t.Errorf("delivered %d samples, want %d", len(got), len(want))
	}
	for id := range want {
		if !got[id] {
			t.Errorf("sample %s not delivered", id)
		}
	}
	// The 410 ends the linger at once.
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("agent exit %d after delivering everything, want 0", code)
	}
}

// TestAgentCommandSidecarStaysUntilSIGTERM: with --sidecar the agent
// does not exit after the trainer's 410 (a native sidecar that exits is
// restarted by the kubelet): it answers 410 again until SIGTERM, then
// exits 0.
func TestAgentCommandSidecarStaysUntilSIGTERM(t *testing.T) {
	srv, nc, js := agentTestNATS(t)
	cmd, url := startAgent(t, "--job", "side", "--nats", srv.URL(), "--sidecar")
	want := submitAgentTestJob(t, nc, js, "side")
	got := map[string]bool{}
	getBatches(t, url, got, -1)
	if len(got) != len(want) {
		t.Errorf("delivered %d samples, want %d", len(got), len(want))
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Without --sidecar the agent exits within milliseconds of the 410.
	select {
	case err := <-exited:
		t.Fatalf("the agent exited after the 410: %v", err)
	case <-time.After(2 * time.Second):
	}
	resp, err := http.Get(url + "/v1/batch")
	if err != nil {
		t.Fatalf("GET /v1/batch after the 410: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Errorf("GET /v1/batch after the 410: %s, want 410", resp.Status)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent on SIGTERM after delivering everything: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not exit within 30s of SIGTERM")
	}
}

// submitAgentTestJob records a job (record, task consumer and tasks, as
// the broker does), serves its shards from a function replica on loopback
// (a hand-written one: a shard's chunks and end as frames) and publishes
// the dispatch plan naming it, as a controller does; it returns the
// samples expected, as "epoch/key".
func submitAgentTestJob(t *testing.T, nc *nats.Conn, js jetstream.JetStream, id string) map[string]bool {
	t.Helper()
	return submitAgentTestJobWith(t, nc, js, id, bearer.Token{})
}

// submitAgentTestJobWith is submitAgentTestJob with a replica that
// requires fnToken (none when zero), as `fn serve` does.
func submitAgentTestJobWith(t *testing.T, nc *nats.Conn, js jetstream.JetStream, id string, fnToken bearer.Token) map[string]bool {
	t.Helper()
	ctx := context.Background()
	const shards, chunks, perChunk, epochs, batch = 3, 2, 5, 2, 4
	spec := wire.JobSpec{ID: id, Dataset: "s3://b/p/", Pipeline: "test", BatchSize: batch, Epochs: epochs}.WithDefaults()
	job := wire.Job{Spec: spec, Bucket: "b", State: wire.JobRunning, Submitted: time.Now().UTC()}
	for s := range shards {
		job.Shards = append(job.Shards, fmt.Sprintf("p/s%d.tar", s)) // under the dataset, as the agent checks
	}
	record, _ := json.Marshal(job)
	jobs, err := js.KeyValue(ctx, wire.JobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Create(ctx, spec.ID, record); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, wire.TaskStream, streams.Dispatch(spec.ID, 0)); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for e := range epochs {
		for s := range shards {
			for c := range chunks {
				for i := range perChunk {
					want[fmt.Sprintf("%d/s%d-c%d-%d", e, s, c, i)] = true
				}
			}
			data, _ := json.Marshal(job.Task(e, s))
			if _, err := js.Publish(ctx, wire.TaskSubject(spec.ID), data); err != nil {
				t.Fatal(err)
			}
		}
	}
	fn := httptest.NewServer(bearer.Require(fnToken, bearer.Function, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var task wire.ShardTask
		if err := json.NewDecoder(r.Body).Decode(&task); err != nil || task.Validate() != nil {
			http.Error(w, fmt.Sprintf("bad task: %v", err), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", wire.ShardStreamMediaType)
		for c := range chunks {
			var keys []string
			for i := range perChunk {
				keys = append(keys, fmt.Sprintf("s%d-c%d-%d", task.Shard, c, i))
			}
			if err := wire.WriteFrame(w, wire.FrameChunk, c, chunkOf(t, wire.ChunkRef{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunk: c}, keys)); err != nil {
				return
			}
		}
		end, _ := json.Marshal(wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunks: chunks, Samples: chunks * perChunk})
		_ = wire.WriteFrame(w, wire.FrameEnd, 0, end)
	}), nil))
	t.Cleanup(fn.Close)
	plans, err := js.KeyValue(ctx, wire.DispatchBucket)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := json.Marshal(wire.DispatchPlan{Job: spec.ID, Time: time.Now(), Endpoints: []string{fn.URL}, PerEndpoint: 2, InFlight: 2})
	if _, err := plans.Put(ctx, spec.ID, plan); err != nil {
		t.Fatal(err)
	}
	return want
}

// getBatches GETs n batches (n < 0: until 410) and adds their samples to got.
func getBatches(t *testing.T, url string, got map[string]bool, n int) {
	t.Helper()
	getBatchesWith(t, url, bearer.Token{}, got, n)
}

// getBatchesWith is getBatches sending tok.
func getBatchesWith(t *testing.T, url string, tok bearer.Token, got map[string]bool, n int) {
	t.Helper()
	for i := 0; n < 0 || i < n; i++ {
		req, err := http.NewRequest(http.MethodGet, url+"/v1/batch", nil)
		if err != nil {
			t.Fatal(err)
		}
		tok.Authorize(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusGone && n < 0 {
			return
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/batch: %s: %s", resp.Status, body)
		}
		b, err := traineragent.DecodeBatch(body)
		if err != nil {
			t.Fatal(err)
		}
		if h := resp.Header.Get(wire.AgentHeaderEpoch); h != strconv.Itoa(b.Epoch) {
			t.Errorf("epoch header %q, batch of epoch %d", h, b.Epoch)
		}
		if len(got) == 0 {
			if resp, err := http.Get(url + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("GET /readyz while serving batches: %v %v, want 200", resp, err)
			} else {
				resp.Body.Close()
			}
		}
		for _, k := range b.Keys {
			id := fmt.Sprintf("%d/%s", b.Epoch, k)
			if got[id] {
				t.Errorf("sample %s delivered twice", id)
			}
			got[id] = true
		}
	}
}

// TestAgentCommandResumesAfterRestart stops `sluice agent` (SIGTERM) in
// the middle of the first epoch and starts another for the same job:
// together they deliver every sample once.
func TestAgentCommandResumesAfterRestart(t *testing.T) {
	srv, nc, js := agentTestNATS(t)
	want := submitAgentTestJob(t, nc, js, "restart")
	got := map[string]bool{}
	cmd, url := startAgent(t, "--job", "restart", "--nats", srv.URL(), "--prefetch", "4")
	getBatches(t, url, got, 3) // 12 of the first epoch's 30 samples
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("agent exit %d on SIGTERM, want 0", code)
	}
	cmd, url = startAgent(t, "--job", "restart", "--nats", srv.URL())
	getBatches(t, url, got, -1)
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("restarted agent exit %d after delivering everything, want 0", code)
	}
	if len(got) != len(want) {
		t.Errorf("delivered %d samples, want %d", len(got), len(want))
	}
	for id := range want {
		if !got[id] {
			t.Errorf("sample %s not delivered", id)
		}
	}
}

// TestAgentCommandServesRanks runs `sluice agent --world-size 2
// --drop-last`: two ranks get equal, disjoint parts of every step until
// 410; a request of another world size gets 409; each epoch's 30 samples
// make 3 steps of 2x4, the 6 left are dropped and counted.
func TestAgentCommandServesRanks(t *testing.T) {
	srv, nc, js := agentTestNATS(t)
	want := submitAgentTestJob(t, nc, js, "ranks")
	cmd, url := startAgent(t, "--job", "ranks", "--nats", srv.URL(), "--world-size", "2", "--drop-last")
	get := func(query string) (*http.Response, []byte) {
		t.Helper()
		resp, err := http.Get(url + "/v1/batch?" + query)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	if resp, body := get("rank=0&world_size=3"); resp.StatusCode != http.StatusConflict {
		t.Errorf("GET with world_size 3: %s %s, want 409", resp.Status, body)
	}
	got := map[string]bool{}
	steps := [2]int{}
	for r := range 2 {
		for {
			resp, body := get(fmt.Sprintf("rank=%d&world_size=2&steps=%d&wait_s=0.1&compute_s=0.2", r, steps[r]))
			if resp.StatusCode == http.StatusGone {
				if end := resp.Header.Get(wire.AgentHeaderEnd); end != wire.AgentEndDelivered {
					t.Errorf("rank %d: 410 with Sluice-End %q", r, end)
				}
				break
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("rank %d: %s %s", r, resp.Status, body)
			}
			b, err := traineragent.DecodeBatch(body)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Keys) != 4 || resp.Header.Get(wire.AgentHeaderStep) == "" {
				t.Errorf("rank %d: a part of %d samples, step header %q", r, len(b.Keys), resp.Header.Get(wire.AgentHeaderStep))
			}
			for _, k := range b.Keys {
				id := fmt.Sprintf("%d/%s", b.Epoch, k)
				if got[id] {
					t.Errorf("sample %s delivered twice", id)
				}
				got[id] = true
			}
			steps[r]++
		}
	}
	if steps != [2]int{6, 6} || len(got) != len(want)-12 {
		t.Errorf("ranks took %v steps and %d samples, want 6 each and %d (12 dropped)", steps, len(got), len(want)-12)
	}
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("agent exit %d after every rank got every step, want 0", code)
	}
}

// chunkOf encodes a chunk as a function does: labels only.
func chunkOf(t *testing.T, ref wire.ChunkRef, keys []string) []byte {
	n := len(keys)
	labels := make([]byte, 8*n)
	for i := range n {
		labels[8*i] = byte(i)
	}
	kj, _ := json.Marshal(keys)
	data, err := safetensors.Encode([]safetensors.Tensor{{Name: "label", DType: safetensors.I64, Shape: []int{n}, Data: labels}},
		map[string]string{wire.MetaJob: ref.Job, wire.MetaEpoch: strconv.Itoa(ref.Epoch), wire.MetaShard: strconv.Itoa(ref.Shard),
			wire.MetaChunk: strconv.Itoa(ref.Chunk), wire.MetaKeys: string(kj)})
	if err != nil {
		t.Error(err)
	}
	return data
}

func TestAgentCommandExitsZeroOnSIGTERM(t *testing.T) {
	srv, _ := testenv.NATS(t)
	cmd, _ := startAgent(t, "--job", "never", "--nats", srv.URL())
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("agent exit %d on SIGTERM while waiting for its job, want 0", code)
	}
}

func TestAgentCommandUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"agent"}, []string{"--job: required"}},
		{[]string{"agent", "--job", "a b", "--name", "x.y", "--prefetch", "-1", "--world-size", "-2", "--locality-wait", "-1s"},
			[]string{`job id "a b"`, `"x.y"`, "--prefetch -1: want 0..16777216", "--world-size -2: want 0..65536", "--locality-wait"}},
		{[]string{"agent", "--job", "j", "--ranks", "2,3"}, []string{`--ranks "2,3": needs --world-size`}},
		{[]string{"agent", "--job", "j", "--world-size", "4", "--ranks", "2,4"}, []string{`--ranks "2,4": rank 4: want 0..3 (--world-size 4)`}},
		{[]string{"agent", "--job", "j", "--world-size", "4", "--ranks", "-1"}, []string{`--ranks "-1": rank -1: want 0..3`}},
		{[]string{"agent", "--job", "j", "--world-size", "4", "--ranks", "1,3,1"}, []string{`--ranks "1,3,1": rank 1 given twice`}},
		{[]string{"agent", "--job", "j", "--world-size", "4", "--ranks", "1,x"}, []string{`--ranks "1,x": "x" is not a rank number`}},
		{[]string{"agent", "--job", "j", "--world-size", "4", "--ranks", "1,,2"}, []string{`--ranks "1,,2": "" is not a rank number`}},
		{[]string{"agent", "--job", "j", "--world-size", "4", "--ranks", "1", "--node-rank", "0", "--nproc-per-node", "2"}, []string{"--ranks and --node-rank: give one"}},
		{[]string{"agent", "--job", "j", "--world-size", "4", "--node-rank", "1"}, []string{"--node-rank 1 --nproc-per-node 0: give both"}},
		{[]string{"agent", "--job", "j", "--world-size", "4", "--nproc-per-node", "2"}, []string{"--node-rank -1 --nproc-per-node 2: give both"}},
		{[]string{"agent", "--job", "j", "--node-rank", "0", "--nproc-per-node", "2"}, []string{"--node-rank 0: needs --world-size"}},
		{[]string{"agent", "--job", "j", "--world-size", "5", "--node-rank", "0", "--nproc-per-node", "2"}, []string{"--world-size 5 is not a whole number of nodes of --nproc-per-node 2"}},
		{[]string{"agent", "--job", "j", "--world-size", "4", "--node-rank", "2", "--nproc-per-node", "2"}, []string{"--node-rank 2: want 0..1"}},
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

// TestAgentFlagsRanks: --ranks, or --node-rank and --nproc-per-node, reach the agent's options as the ranks
// of its team; without it the agent serves every rank.
func TestAgentFlagsRanks(t *testing.T) {
	t.Setenv(wire.TeamKeyEnv, strings.Repeat("ab", wire.TeamKeyBytes))
	for _, tc := range []struct {
		args []string
		want []int
	}{
		{[]string{"--job", "j", "--world-size", "4", "--ranks", "2, 3"}, []int{2, 3}},
		{[]string{"--job", "j", "--world-size", "4"}, nil},
		{[]string{"--job", "j", "--world-size", "4", "--node-rank", "1", "--nproc-per-node", "2"}, []int{2, 3}},
		{[]string{"--job", "j", "--world-size", "4", "--node-rank", "3", "--nproc-per-node", "1"}, []int{3}},
	} {
		f := newAgentFlags(io.Discard)
		if err := f.parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if o := f.options(); !slices.Equal(o.Ranks, tc.want) || o.WorldSize != 4 {
			t.Errorf("%v: ranks %v of world %d, want %v of 4", tc.args, o.Ranks, o.WorldSize, tc.want)
		}
	}
}

// TestAgentFlagsTeamKey: an agent reads the job's team key from
// --team-key-file, $SLUICE_TEAM_KEY_FILE, $SLUICE_TEAM_KEY or the job's
// file in $SLUICE_TEAM_KEY_DIR; an agent of a team without one refuses
// to start, saying how to give it (a lone one starts), and a bad key is
// refused without being quoted.
func TestAgentFlagsTeamKey(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(wire.TeamKeyDirEnv, dir)
	t.Setenv(wire.TeamKeyEnv, "")
	t.Setenv(wire.TeamKeyFileEnv, "")
	team := []string{"--job", "j", "--world-size", "4", "--ranks", "2,3"}
	parse := func(extra ...string) (*agentFlags, error) {
		var stderr bytes.Buffer
		f := newAgentFlags(&stderr)
		if err := f.parse(append(append([]string{}, team...), extra...)); err != nil {
			return f, fmt.Errorf("%w: %s", err, stderr.String())
		}
		return f, nil
	}
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), "team key") {
		t.Errorf("a team without a key: %v, want an error naming the team key", err)
	}
	key := wire.NewTeamKey()
	if err := os.WriteFile(wire.TeamKeyPath(dir, "j"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	want, _ := wire.ParseTeamKey(key)
	if f, err := parse(); err != nil || !bytes.Equal(f.options().TeamKey, want) {
		t.Errorf("the job's key file in the key directory: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("secret-not-hex"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parse("--team-key-file", bad); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("a bad key file: %v, want refused without quoting it", err)
	}
	t.Setenv(wire.TeamKeyFileEnv, bad)
	if _, err := parse(); err == nil {
		t.Errorf("a bad key file in $%s: accepted", wire.TeamKeyFileEnv)
	}
	t.Setenv(wire.TeamKeyFileEnv, "")
	t.Setenv(wire.TeamKeyEnv, strings.Repeat("cd", wire.TeamKeyBytes))
	if f, err := parse(); err != nil || f.options().TeamKey[0] != 0xcd {
		t.Errorf("$%s: %v", wire.TeamKeyEnv, err)
	}
	// A lone agent reads it too: it connects to NATS as its job with it.
	if f, err := parse("--ranks", "0,1,2,3"); err != nil || f.options().TeamKey == nil {
		t.Errorf("an agent of every rank (no team): %v, key set %t", err, f != nil && f.options().TeamKey != nil)
	}
	// Without one, it starts, and connects with its NATS settings alone.
	t.Setenv(wire.TeamKeyEnv, "")
	if err := os.Remove(wire.TeamKeyPath(dir, "j")); err != nil {
		t.Fatal(err)
	}
	if f, err := parse("--ranks", "0,1,2,3"); err != nil || f.options().TeamKey != nil {
		t.Errorf("a lone agent without a key: %v, key set %t", err, f != nil && f.options().TeamKey != nil)
	}
}

// TestAgentFlagsNodeCredential: `sluice job node-credential` writes a
// node's credential (0600) from the job's team key; an agent given it
// needs no team key, takes the node's name, and refuses a credential of
// another job, another --name, or one others can read.
func TestAgentFlagsNodeCredential(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(wire.TeamKeyDirEnv, dir)
	t.Setenv(wire.TeamKeyEnv, "")
	t.Setenv(wire.TeamKeyFileEnv, "")
	t.Setenv(wire.NodeCredentialFileEnv, "")
	keyText := wire.NewTeamKey()
	if err := os.WriteFile(wire.TeamKeyPath(dir, "j"), keyText, 0o600); err != nil {
		t.Fatal(err)
	}
	cred := filepath.Join(dir, "node-b.nodecred")
	var out, stderr bytes.Buffer
	if err := runJobNodeCredential(context.Background(), []string{"j", "--node", "node-b", "--out", cred}, &out, &stderr); err != nil {
		t.Fatalf("node-credential: %v: %s", err, stderr.String())
	}
	st, err := os.Stat(cred)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the credential file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	key, _ := wire.ParseTeamKey(keyText)
	if strings.Contains(out.String()+stderr.String(), hex.EncodeToString(key)) {
		t.Error("node-credential printed the team key")
	}
	if err := os.Remove(wire.TeamKeyPath(dir, "j")); err != nil { // the node has its credential only
		t.Fatal(err)
	}
	parse := func(args ...string) (*agentFlags, error) {
		var stderr bytes.Buffer
		f := newAgentFlags(&stderr)
		if err := f.parse(append([]string{"--world-size", "4", "--ranks", "2,3"}, args...)); err != nil {
			return f, fmt.Errorf("%w: %s", err, stderr.String())
		}
		return f, nil
	}
	f, err := parse("--job", "j", "--node-credential-file", cred)
	if err != nil {
		t.Fatalf("a team agent with its node credential only: %v", err)
	}
	opts := f.options()
	if opts.Name != "node-b" || opts.Node == nil || opts.TeamKey != nil || opts.Node.NATSPassword != wire.AgentNATSPassword(key) {
		t.Errorf("options: name %q, node set %t, team key set %t; want node-b's credential, no key", opts.Name, opts.Node != nil, opts.TeamKey != nil)
	}
	t.Setenv(wire.NodeCredentialFileEnv, cred)
	if _, err := parse("--job", "j", "--name", "node-a"); err == nil || !strings.Contains(err.Error(), "node-b") {
		t.Errorf("node-b's credential with --name node-a: %v, want refused", err)
	}
	if _, err := parse("--job", "k"); err == nil || !strings.Contains(err.Error(), "of job j") {
		t.Errorf("job j's credential for --job k: %v, want refused", err)
	}
	if err := os.Chmod(cred, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parse("--job", "j"); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a credential others can read: %v, want refused", err)
	}
}

// TestCredentialModes: a node credential its owner alone may read is
// taken; one root owns that its group may read (a Kubernetes Secret volume
// with an fsGroup) too; anything more open is refused.
func TestCredentialModes(t *testing.T) {
	for _, tc := range []struct {
		perm fs.FileMode
		uid  uint32
		ok   bool
	}{
		{0o600, 1000, true}, {0o400, 65532, true}, {0o600, 0, true},
		{0o440, 0, true}, {0o640, 0, true},
		{0o440, 65532, false}, {0o640, 1000, false},
		{0o460, 0, false}, {0o470, 0, false},
		{0o604, 0, false}, {0o444, 0, false}, {0o644, 1000, false},
	} {
		err := credentialModeErr(tc.perm, tc.uid)
		if (err == nil) != tc.ok {
			t.Errorf("mode %04o owner %d: %v, want ok %t", tc.perm, tc.uid, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %q does not say what to do", tc.perm, err)
		}
	}
}
