package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// jobEnv is embedded NATS and S3 with 4 image shards at s3://data/ds/, and
// the connection flags that reach them.
type jobEnv struct {
	js   jetstream.JetStream
	b    *broker.Broker // to play the controller's part
	conn []string       // --nats URL --s3-endpoint URL
	dir  string
}

func newJobEnv(t *testing.T) jobEnv {
	t.Helper()
	t.Setenv(wire.TeamKeyDirEnv, t.TempDir()) // submit writes team keys there
	srv, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, cfg := testenv.S3(t, "")
	s3TestEnv(t, testenv.S3AccessKey, testenv.S3SecretKey)
	imgs, err := synth.Images(synth.ImageOptions{Samples: 8, Shards: 4, Seed: 1, MinSide: 8, MaxSide: 16, Quality: 50, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(context.Background(), c, "data", "ds/", imgs); err != nil {
		t.Fatal(err)
	}
	return jobEnv{js: js, b: broker.New(js, nil, streams.Options{}, nil),
		conn: []string{"--nats", srv.URL(), "--s3-endpoint", cfg.Endpoint}, dir: t.TempDir()}
}

// job runs `sluice job ARGS... --nats ... [--s3-endpoint ...]`.
func (e jobEnv) job(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	conn := e.conn
	if args[0] != "submit" {
		conn = conn[:2]
	}
	return runCLI(t, append(append([]string{"job"}, args...), conn...)...)
}

func (e jobEnv) file(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("output %q: %v", s, err)
	}
	return v
}

func wantOutput(t *testing.T, what string, code, wantCode int, out string, want ...string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("%s: exit %d, want %d; output %q", what, code, wantCode, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: output %q lacks %q", what, out, w)
		}
	}
}

const jobFile = `id: j1
dataset: s3://data/ds/
pipeline: imagenet-train
batch_size: 4
epochs: 1
seed: 3
readers: [rank0, rank1]
output_buffer_bytes: 64MiB
`

func TestJobCommandsEndToEnd(t *testing.T) {
	e := newJobEnv(t)
	ctx := context.Background()
	spec := e.file(t, "job.yaml", jobFile)

	code, out, errs := e.job(t, "submit", spec, "--epochs", "2", "--json")
	wantOutput(t, "submit", code, 0, out+errs)
	snakeKeys(t, out)
	job := decode[wire.Job](t, out)
	if job.Spec.ID != "j1" || job.Spec.Epochs != 2 || len(job.Shards) != 4 || job.State != wire.JobQueued ||
		job.Spec.OutputBufferBytes != 64<<20 || job.Spec.Seed != 3 || len(job.Spec.Readers) != 2 {
		t.Errorf("submitted record %+v: want j1, the flag's 2 epochs over the file's 1, 4 shards, queued, the file's buffer, seed and readers", job)
	}
	code, out, errs = e.job(t, "submit", "--id", "j2", "--dataset", "s3://data/ds/", "--pipeline", "imagenet-eval", "--batch-size", "8", "--epochs", "1")
	wantOutput(t, "submit from flags", code, 0, out, "job j2 submitted: 4 shards x 1 epochs = 4 tasks, pipeline imagenet-eval, readers trainer")
	// The job's team key: in a file only its user reads, named on stderr.
	keyFile := wire.TeamKeyPath(os.Getenv(wire.TeamKeyDirEnv), "j2")
	wantOutput(t, "submit's team key", code, 0, errs, "team key: "+keyFile)
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the team key file: %v, mode %v: want 0600", err, st)
	} else if data, _ := os.ReadFile(keyFile); strings.Contains(out+errs, strings.TrimSpace(string(data))) {
		t.Errorf("submit printed the team key")
	} else if _, err := wire.ParseTeamKey(data); err != nil {
		t.Errorf("the team key file: %v", err)
	}

	code, out, _ = e.job(t, "list", "--json")
	snakeKeys(t, out)
	jobs := decode[[]wire.Job](t, out)
	if code != 0 || len(jobs) != 2 || jobs[0].Spec.ID != "j1" || jobs[1].Spec.ID != "j2" {
		t.Errorf("list --json: exit %d, %d jobs %+v: want j1, j2", code, len(jobs), jobs)
	}
	code, out, _ = e.job(t, "list")
	wantOutput(t, "list", code, 0, out, "ID", "STATE", "j1", "queued", "-/8", "j2", "imagenet-eval")

	code, out, _ = e.job(t, "status", "j1")
	wantOutput(t, "status of a queued job", code, 0, out, "job j1: queued", "no controller has taken the job", "8 (4 shards x 2 epochs)")
	code, out, _ = e.job(t, "status", "j1", "--json")
	snakeKeys(t, out)
	st := decode[map[string]json.RawMessage](t, out)
	if code != 0 || string(st["status"]) != "null" || decode[wire.Job](t, string(st["job"])).Spec.ID != "j1" {
		t.Errorf("status --json: exit %d, %s: want the record and a null status", code, out)
	}

	// A controller takes it and reports progress.
	if _, err := e.b.Transition(ctx, "j1", wire.JobRunning, "", func(wire.JobState) bool { return true }); err != nil {
		t.Fatal(err)
	}
	putJobStatus(t, e.js, wire.JobStatus{Job: "j1", State: wire.JobRunning, Owner: "ctl-a", Updated: time.Now().UTC(),
		Tasks: wire.TaskCounts{Total: 8, Done: 5, InFlight: 1, Pending: 2}, TasksDonePerEpoch: []int{4, 1},
		SamplesProcessed: 10, SamplesExpected: 16, Replicas: 2, ReadyReplicas: 1,
		Readers:      map[string]wire.ReaderStatus{"rank0": {SamplesDelivered: 7, StallFraction: 0.25}},
		FailedShards: []wire.FailedSample{{Key: "ds/shard-000003.tar", Reason: "boom"}}})
	code, out, _ = e.job(t, "status", "j1")
	wantOutput(t, "status of a running job", code, 0, out, "job j1: running", "owner     ctl-a", "5/8 done", "1 in flight", "2 pending",
		"epochs    0: 4/4, 1: 1/4", "10 processed, 0 failed of 16 expected", "rank0: 7 delivered, stall 25%", "replicas  2 (1 ready)",
		"ds/shard-000003.tar: boom")
	code, out, _ = e.job(t, "status", "j1", "--json")
	snakeKeys(t, out)
	full := decode[struct {
		Job    wire.Job
		Status *wire.JobStatus
	}](t, out)
	if code != 0 || full.Status == nil || full.Status.Tasks.Done != 5 || full.Job.State != wire.JobRunning {
		t.Errorf("status --json of a running job: exit %d, %s", code, out)
	}

	code, _, errs = e.job(t, "delete", "j1")
	wantOutput(t, "delete of a running job", code, 1, errs, "job j1 is running: cancel it first or use --force")
	if _, err := e.b.Job(ctx, "j1"); err != nil {
		t.Errorf("refused delete: %v", err)
	}

	code, out, _ = e.job(t, "cancel", "j1", "--reason", "enough", "--json")
	snakeKeys(t, out)
	if c := decode[wire.Job](t, out); code != 0 || c.State != wire.JobCancelled || c.Reason != "enough" {
		t.Errorf("cancel --json: exit %d, %s", code, out)
	}
	code, _, errs = e.job(t, "cancel", "j1")
	wantOutput(t, "cancel twice", code, 1, errs, "job j1 is already cancelled")
	code, out, errs = e.job(t, "status", "j1", "--watch", "--json")
	wantOutput(t, "status --watch of a cancelled job", code, 1, errs, "job j1 cancelled: enough")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		snakeKeys(t, line)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(lines[0], `"state":"cancelled"`) {
		t.Errorf("status --watch --json: %q, want one line with the cancelled record", out)
	}

	code, out, _ = e.job(t, "delete", "j1", "--json")
	snakeKeys(t, out)
	if d := decode[map[string]any](t, out); code != 0 || d["id"] != "j1" || d["deleted"] != true {
		t.Errorf("delete --json: exit %d, %s", code, out)
	}
	code, out, _ = e.job(t, "delete", "j2", "--force")
	wantOutput(t, "delete --force", code, 0, out, "job j2 deleted")
	code, _, errs = e.job(t, "status", "j1")
	wantOutput(t, "status of a deleted job", code, 1, errs, "job j1: job not found")
	code, out, _ = e.job(t, "list")
	wantOutput(t, "list with none", code, 0, out, "no jobs")
	code, out, _ = e.job(t, "list", "--json")
	wantOutput(t, "list --json with none", code, 0, out, "[]")
}

func putJobStatus(t *testing.T, js jetstream.JetStream, st wire.JobStatus) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), wire.StatusBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), st.Job, data); err != nil {
		t.Fatal(err)
	}
}

func TestJobStatusWatchFollowsTheJobToItsEnd(t *testing.T) {
	e := newJobEnv(t)
	ctx := context.Background()
	code, _, errs := e.job(t, "submit", e.file(t, "job.yaml", jobFile))
	wantOutput(t, "submit", code, 0, errs)

	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errs := e.job(t, "status", "--watch", "j1")
		done <- result{code, out, errs}
	}()
	// The watch has started once it holds a consumer on the jobs bucket;
	// until then the changes below could land before it looks.
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		return watching(ctx, e.js, wire.JobsBucket)
	})
	if _, err := e.b.Transition(ctx, "j1", wire.JobRunning, "", func(wire.JobState) bool { return true }); err != nil {
		t.Fatal(err)
	}
	putJobStatus(t, e.js, wire.JobStatus{Job: "j1", State: wire.JobSucceeded, Updated: time.Now().UTC(), Tasks: wire.TaskCounts{Total: 4, Done: 4}})
	if _, err := e.b.Transition(ctx, "j1", wire.JobSucceeded, "", func(wire.JobState) bool { return true }); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		wantOutput(t, "status --watch", r.code, 0, r.out+r.err, "job j1: queued", "job j1: succeeded", "4/4 done")
	case <-time.After(20 * time.Second):
		t.Fatal("status --watch did not end with the job")
	}
}

// watching reports whether a watcher consumer exists on bucket's stream.
func watching(ctx context.Context, js jetstream.JetStream, bucket string) error {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Consumers == 0 {
		return os.ErrNotExist
	}
	return nil
}

func TestJobSubmitRefusalsCreateNothing(t *testing.T) {
	e := newJobEnv(t)
	bad := e.file(t, "bad.yaml", `id: bad
dataset: s3://data/ds/
pipeline: nosuch
batch_size: 0
epoch: 2
`)
	tmpl := e.file(t, "tmpl.yaml", jobFile)
	badPipe := e.file(t, "pipe.yaml", "name: small\nops:\n  - decode\n  - {op: resize, size: 0}\n  - to_uint8_hwc\n")
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"every problem of a file, at its line", []string{bad}, []string{
			"bad.yaml: invalid job spec \"bad\" (4 problems):",
			`line 3: pipeline: unknown pipeline "nosuch": known pipelines are ` + strings.Join(pipeline.Names(), ", "),
			"line 4: batch_size: 0: want 1..65536",
			`line 5: unknown key "epoch": did you mean "epochs"?`,
			"epochs: not set (0: want 1..10000)",
		}},
		{"a flag fixes one, not the others", []string{bad, "--batch-size", "2", "--pipeline", "imagenet-eval"}, []string{
			`line 5: unknown key "epoch"`, "epochs: not set"}},
		{"flags alone", []string{"--id", "bad", "--dataset", "s3://data/ds/", "--epochs", "1", "--pipeline", "imagenet-train"}, []string{
			"--batch-size: 0: want 1..65536"}},
		{"a bad flag over a file", []string{tmpl, "--epochs", "0", "--id", "bad"}, []string{"--epochs: 0: want 1..10000"}},
		{"prefix with no shards", []string{tmpl, "--id", "bad", "--dataset", "s3://data/none/"}, []string{"s3://data/none/", "no shards"}},
		{"missing bucket", []string{tmpl, "--id", "bad", "--dataset", "s3://nope/ds/"}, []string{"nope", "NoSuchBucket"}},
		{"a pipeline file's problems, at their lines in it", []string{tmpl, "--id", "bad", "--pipeline", badPipe},
			[]string{"--pipeline " + badPipe + `: invalid pipeline "small": line 4: ops[1] (resize): size 0: want 1..8192`}},
		{"an unknown pipeline", []string{tmpl, "--id", "bad", "--pipeline", "nosuch"},
			[]string{`--pipeline "nosuch" is neither a built-in pipeline (` + strings.Join(pipeline.Names(), ", ")}},
		{"output buffer", []string{bad, "--output-buffer", "lots"}, []string{`--output-buffer "lots": want a byte count`}},
		{"bad flags and a bad field at once", []string{tmpl, "--id", "bad", "--pipeline", "nosuch", "--output-buffer", "lots", "--epochs", "0"}, []string{
			"(3 problems)", `--pipeline "nosuch" is neither`, `--output-buffer "lots": want a byte count`, "--epochs: 0: want 1..10000"}},
		{"no such file", []string{filepath.Join(e.dir, "none.yaml")}, []string{"reading job spec", "none.yaml"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := e.job(t, append([]string{"submit"}, c.args...)...)
			wantOutput(t, "submit", code, 1, errs, c.want...)
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if jobs, err := e.b.List(context.Background()); err != nil || len(jobs) != 0 {
				t.Errorf("after a refused submit: jobs %v, %v", jobs, err)
			}
			if _, err := e.js.Consumer(context.Background(), wire.TaskStream, wire.DispatchConsumer("bad")); err == nil {
				t.Error("refused submit left a task consumer")
			}
		})
	}

	// An invalid spec is refused before connecting: no NATS is needed.
	code, _, errs := runCLI(t, "job", "submit", bad, "--nats", "nats://127.0.0.1:1")
	wantOutput(t, "invalid spec, no NATS", code, 1, errs, "4 problems")

	// With --vocab-dir, the files a spec names are checked too, as a
	// replica builds the pipeline: a tokenizer.json it cannot use is
	// named with its component before anything connects.
	vocabs := filepath.Join(e.dir, "vocabs")
	if err := os.MkdirAll(vocabs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vocabs, "wp.json"), []byte(`{"model": {"type": "WordPiece"}, "pre_tokenizer": {"type": "BertPreTokenizer"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	bpePipe := e.file(t, "bpe.yaml", "ops: [text, {op: bpe, tokenizer: wp.json}]\n")
	code, _, errs = runCLI(t, "job", "submit", tmpl, "--id", "bad", "--pipeline", bpePipe, "--vocab-dir", vocabs, "--nats", "nats://127.0.0.1:1")
	wantOutput(t, "unsupported tokenizer", code, 1, errs, `tokenizer "wp.json": pre_tokenizer BertPreTokenizer is not supported`)

	pipe := e.file(t, "good-pipe.yaml", "name: small\nops: [decode, {op: resize, size: 32}, to_uint8_hwc]\n")
	var out string
	code, out, errs = e.job(t, "submit", tmpl, "--id", "piped", "--pipeline", pipe, "--json")
	if job := decode[wire.Job](t, out); code != 0 || !strings.HasPrefix(job.Spec.Pipeline, "name: small\nops:") {
		t.Errorf("submit --pipeline FILE: exit %d, %s %s: want the file's spec as the job's pipeline", code, out, errs)
	}

	// A spec naming a replica's file (a vocab, a tokenizer) is checked
	// as the broker checks it: by name. It once failed here, read
	// against this process's vocab directory, which it has none of.
	wpPipe := e.file(t, "wp.yaml", "ops: [text, {op: wordpiece, vocab: bert-base-uncased.txt}]\n")
	code, out, errs = e.job(t, "submit", tmpl, "--id", "wp", "--pipeline", wpPipe, "--json")
	if job := decode[wire.Job](t, out); code != 0 || !strings.Contains(job.Spec.Pipeline, "bert-base-uncased.txt") {
		t.Errorf("submit --pipeline naming a vocab file: exit %d, %s %s", code, out, errs)
	}

	good := e.file(t, "good.yaml", jobFile)
	code, _, _ = e.job(t, "submit", good)
	wantOutput(t, "submit", code, 0, "")
	code, _, errs = e.job(t, "submit", good)
	wantOutput(t, "duplicate id", code, 1, errs, "job j1: job already exists (delete it first)")

	// Connections: each problem says which, and nothing is created.
	code, _, errs = runCLI(t, "job", "submit", tmpl, "--id", "bad", "--nats", "nats://127.0.0.1:1")
	wantOutput(t, "unreachable nats", code, 1, errs, "connecting to nats at nats://127.0.0.1:1: nats server unreachable")
	code, _, errs = runCLI(t, "job", "status", "j1", "--nats", "nats://127.0.0.1:1")
	wantOutput(t, "status, unreachable nats", code, 1, errs, "connecting to nats at nats://127.0.0.1:1: nats server unreachable")
	s3TestEnv(t, "", "")
	code, _, errs = e.job(t, "submit", tmpl, "--id", "bad")
	wantOutput(t, "no s3 credentials", code, 1, errs, "checking s3: no s3 credentials found for http://")
	code, _, errs = runCLI(t, "job", "status", "--stream-replicas", "7", "--nats", "not a url")
	wantOutput(t, "bad arguments and connection flags", code, 2, errs, "sluice job status: want a job id", "--stream-replicas 7", `--nats "not a url"`)
	if jobs, err := e.b.List(context.Background()); err != nil || len(jobs) != 3 {
		t.Errorf("after refused submits: %d jobs, %v; want the 3 submitted", len(jobs), err)
	}
}

// TestJobSubmitWrongS3Credentials asks a real S3 server that checks
// signatures (versitygw; skipped where it is not installed).
func TestJobSubmitWrongS3Credentials(t *testing.T) {
	endpoint := testenv.Versitygw(t, "sluice-key", "sluice-secret")
	nsrv, _ := testenv.NATS(t)
	s3TestEnv(t, "sluice-key", "not-the-secret")
	code, out, errs := runCLI(t, "job", "submit", "--id", "j", "--dataset", "s3://data/ds/", "--pipeline", "criteo",
		"--batch-size", "1", "--epochs", "1", "--nats", nsrv.URL(), "--s3-endpoint", endpoint)
	wantOutput(t, "wrong s3 credentials", code, 1, out+errs, "checking s3: wrong s3 credentials at "+endpoint+": SignatureDoesNotMatch")
}

func TestJobUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"job"}, 0, "job submit"},
		{[]string{"job", "--help"}, 0, "job cancel"},
		{[]string{"job", "launch"}, 2, `unknown command "job launch"`},
		{[]string{"job", "status"}, 2, "sluice job status: want a job id"},
		{[]string{"job", "cancel", "a", "b"}, 2, `unexpected argument "b" (want a job id)`},
		{[]string{"job", "submit", "a.yaml", "b.yaml"}, 2, `unexpected argument "b.yaml"`},
		{[]string{"job", "list", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"job", "delete", "-h"}, 0, "--force"},
	} {
		code, out, errs := runCLI(t, c.args...)
		wantOutput(t, strings.Join(c.args, " "), code, c.code, out+errs, c.want)
	}
}

func TestWatchViewInALogPrintsChangesAndTheLastStatus(t *testing.T) {
	var out strings.Builder
	v := newWatchView(&out)
	job := wire.Job{Spec: wire.JobSpec{ID: "j", Pipeline: "criteo", Epochs: 1}, Shards: []string{"a", "b"}, State: wire.JobQueued}
	st := func(done int) wire.JobStatus {
		return wire.JobStatus{Job: "j", State: wire.JobRunning, Updated: time.Now(), Tasks: wire.TaskCounts{Total: 2, Done: done}}
	}
	v.show(job, wire.JobStatus{})
	job.State = wire.JobRunning
	v.show(job, st(0))
	v.show(job, st(1)) // held: same state, a moment later
	if n := strings.Count(out.String(), "job j: "); n != 2 || strings.Contains(out.String(), "1/2 done") {
		t.Fatalf("after queued, running, running: %q, want two blocks, the third held", out.String())
	}
	v.end()
	if n := strings.Count(out.String(), "job j: "); n != 3 || !strings.HasSuffix(out.String(), "replicas  0 (0 ready)\n\n") || !strings.Contains(out.String(), "1/2 done") {
		t.Errorf("after end: %q, want the held status printed last", out.String())
	}
}

func TestStatusShowsStepTimes(t *testing.T) {
	job := wire.Job{Spec: wire.JobSpec{ID: "j", Pipeline: "criteo", Epochs: 1, Readers: []string{"a", "b"}}, Shards: []string{"s"}, State: wire.JobRunning}
	gpu := 0.85
	st := wire.JobStatus{
		Job: "j", State: wire.JobRunning, Updated: time.Now(),
		Step: wire.StepTimes{Steps: 8, Ranks: 4, WaitS: 0.05, ComputeS: 0.3, OtherS: 0.15},
		Readers: map[string]wire.ReaderStatus{
			"a": {SamplesDelivered: 10, GPUUtilization: &gpu, Step: wire.StepTimes{Steps: 6, Ranks: 3, WaitS: 0.1, ComputeS: 0.3, OtherS: 0.1}},
			"b": {SamplesDelivered: 20},
		},
	}
	var out strings.Builder
	printStatus(&out, job, st)
	for _, want := range []string{
		"  step      0.5 s: wait 10%, compute 60%, other 30% over 8 steps of 4 ranks\n",
		"  reader    a: 10 delivered, stall 0%, 0 samples/s, gpu 85%, step 0.5 s: wait 20%, compute 60%, other 20%\n",
		"  reader    b: 20 delivered, stall 0%, 0 samples/s\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status %q, want a line %q", out.String(), want)
		}
	}

	// --json has the job's and each reader's split.
	data, err := json.Marshal(statusJSON(job, st))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Status struct {
			Step    wire.StepTimes `json:"step"`
			Readers map[string]struct {
				GPU  *float64       `json:"gpu_utilization"`
				Step wire.StepTimes `json:"step"`
			} `json:"readers"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Step != st.Step || got.Status.Readers["a"].Step != st.Readers["a"].Step || got.Status.Readers["a"].GPU == nil {
		t.Errorf("--json %s, want the step times of the job and of reader a, and a's gpu", data)
	}
	if strings.Contains(string(data), `"b":{`) && strings.Contains(string(data), `"gpu_utilization":null`) {
		t.Errorf("--json %s: a reader without a gpu reading has a null one, want none", data)
	}

	// One reader: the job's line says it all.
	delete(st.Readers, "b")
	out.Reset()
	printStatus(&out, job, st)
	if strings.Contains(out.String(), ", step ") {
		t.Errorf("status %q: one reader repeats the job's step line", out.String())
	}
	// No steps reported: no step line.
	st.Step = wire.StepTimes{}
	out.Reset()
	printStatus(&out, job, st)
	if strings.Contains(out.String(), "  step ") {
		t.Errorf("status %q, want no step line without steps", out.String())
	}
}
