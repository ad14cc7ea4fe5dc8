package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/internal/safetensors"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/synth"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/internal/wds"
	"github.com/sluice-project/sluice/wire"
)

const (
	job    = "job-1"
	bucket = "data"
	// A 224x224x3 image plus its label is 150536 bytes: six fit in 1 MiB.
	chunkMax = 1 << 20
)

type env struct {
	js     jetstream.JetStream
	s3     *s3.Client
	srv    *Server
	reg    *prometheus.Registry
	url    string
	shards []synth.Shard
}

func setup(t *testing.T, cfg Config) *env {
	t.Helper()
	ctx := context.Background()
	_, nc := testenv.NATS(t)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	outputStream(t, js, wire.JobSpec{ID: job, ChunkMaxBytes: chunkMax})
	s3c, _ := testenv.S3(t, bucket)
	shards, err := synth.Images(synth.ImageOptions{Samples: 40, Shards: 2, Seed: 9, MinSide: 48, MaxSide: 200, Quality: 85, Classes: 10, Corrupt: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, bucket, "train/", shards); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := New(cfg, js, s3c, logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &env{js: js, s3: s3c, srv: srv, reg: reg, url: hs.URL, shards: shards}
}

// outputStream creates spec's output stream and its readers' consumers
// as broker.Submit does, with the production limits (buffer cap, interest
// retention, message size, duplicate window).
func outputStream(t *testing.T, js jetstream.JetStream, spec wire.JobSpec) {
	t.Helper()
	ctx := context.Background()
	spec = spec.WithDefaults(js.Conn().MaxPayload())
	cfg, err := streams.Output(spec, js.Conn().MaxPayload(), streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, r := range spec.Readers {
		if _, err := js.CreateOrUpdateConsumer(ctx, cfg.Name, streams.Reader(spec.ID, r)); err != nil {
			t.Fatal(err)
		}
	}
}

func task(shard int) wire.ShardTask {
	return wire.ShardTask{
		Job: job, Epoch: 2, Shard: shard, Bucket: bucket, Key: fmt.Sprintf("train/shard-%06d.tar", shard),
		Pipeline: "imagenet-train", Seed: 7, ChunkMaxBytes: chunkMax, OutputSubject: wire.OutputSubject(job),
	}
}

func taskEvent(t *testing.T, data any) event.Event {
	t.Helper()
	ev := event.New()
	ev.SetID("ev-1")
	ev.SetSource(wire.EventSource)
	ev.SetType(wire.EventTypeShardTask)
	if err := ev.SetData(event.ApplicationJSON, data); err != nil {
		t.Fatal(err)
	}
	return ev
}

// post sends ev in binary mode, as the dispatcher does.
func post(t *testing.T, url string, ev event.Event) *http.Response {
	t.Helper()
	req, err := cehttp.NewHTTPRequestFromEvent(context.Background(), url, ev)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func postRaw(t *testing.T, url string, header http.Header, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func expectStatus(t *testing.T, resp *http.Response, want int, bodyHas string) {
	t.Helper()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("status %d (%s), want %d", resp.StatusCode, strings.TrimSpace(string(body)), want)
	}
	if !strings.Contains(string(body), bodyHas) {
		t.Fatalf("status %d body %q does not contain %q", want, body, bodyHas)
	}
}

func result(t *testing.T, resp *http.Response) wire.ShardResult {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	ev, err := cehttp.NewEventFromHTTPResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type() != wire.EventTypeShardResult {
		t.Fatalf("reply type %q, want %q", ev.Type(), wire.EventTypeShardResult)
	}
	var res wire.ShardResult
	if err := ev.DataAs(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// outputMsg is one message of a stream, as the trainer agent reads it.
type outputMsg struct {
	ref  wire.ChunkRef
	data []byte
}

func readStream(t *testing.T, js jetstream.JetStream, stream, jobID string) []outputMsg {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []outputMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := wire.ParseChunkRef(jobID, m.Header)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get("Nats-Msg-Id"); got != ref.MsgID() {
			t.Errorf("message %d: Nats-Msg-Id %q, want %q", seq, got, ref.MsgID())
		}
		out = append(out, outputMsg{ref, m.Data})
	}
	return out
}

// samplesOf reads a shard's labels and keys from its tar.
func samplesOf(t *testing.T, s synth.Shard) (keys []string, labels map[string]int64) {
	t.Helper()
	labels = map[string]int64{}
	r := wds.NewReader(bytes.NewReader(s.Data), 0)
	for {
		smp, err := r.Next()
		if errors.Is(err, io.EOF) {
			return keys, labels
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, smp.Key)
		v, err := strconv.ParseInt(string(smp.Files["cls"]), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		labels[smp.Key] = v
	}
}

func failedKeys(fs []wire.FailedSample) []string {
	var keys []string
	for _, f := range fs {
		keys = append(keys, f.Key)
	}
	return keys
}

func TestShardTask(t *testing.T) {
	e := setup(t, Config{})
	shard := e.shards[1]
	if len(shard.Corrupt) == 0 {
		t.Fatal("test shard has no corrupt samples")
	}
	allKeys, labels := samplesOf(t, shard)
	good := len(allKeys) - len(shard.Corrupt)

	res := result(t, post(t, e.url, taskEvent(t, task(1))))
	if res.Task != task(1).ID() || res.Samples != good || res.Chunks != (good+5)/6 {
		t.Errorf("result %+v: want task %s, %d samples in %d chunks", res, task(1).ID(), good, (good+5)/6)
	}
	if diff := cmp.Diff(shard.Corrupt, failedKeys(res.Failed)); diff != "" {
		t.Errorf("failed samples (-corrupt +reported):\n%s", diff)
	}
	for _, f := range res.Failed {
		if !strings.Contains(f.Reason, "member jpg") {
			t.Errorf("failed sample %s: reason %q does not name the member", f.Key, f.Reason)
		}
	}

	msgs := readStream(t, e.js, wire.OutputStream(job), job)
	if len(msgs) != res.Chunks+1 {
		t.Fatalf("stream holds %d messages, want %d chunks and a shard end", len(msgs), res.Chunks)
	}
	var seen []string
	var bytesTotal int64
	for i, m := range msgs[:res.Chunks] {
		if want := (wire.ChunkRef{Job: job, Epoch: 2, Shard: 1, Chunk: i}); m.ref != want {
			t.Errorf("message %d: ref %+v, want %+v", i, m.ref, want)
		}
		if len(m.data) > chunkMax {
			t.Errorf("chunk %d is %d bytes, over %d", i, len(m.data), chunkMax)
		}
		bytesTotal += int64(len(m.data))
		f, err := safetensors.Decode(m.data)
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		var keys []string
		if err := json.Unmarshal([]byte(f.Metadata[wire.MetaKeys]), &keys); err != nil {
			t.Fatalf("chunk %d keys: %v", i, err)
		}
		n := len(keys)
		wantMeta := map[string]string{wire.MetaJob: job, wire.MetaEpoch: "2", wire.MetaShard: "1", wire.MetaChunk: strconv.Itoa(i), wire.MetaKeys: f.Metadata[wire.MetaKeys]}
		if diff := cmp.Diff(wantMeta, f.Metadata); diff != "" {
			t.Errorf("chunk %d metadata (-want +got):\n%s", i, diff)
		}
		img, lbl := f.Tensors["image"], f.Tensors["label"]
		if img.DType != safetensors.U8 || !slices.Equal(img.Shape, []int{n, 224, 224, 3}) {
			t.Errorf("chunk %d image: %s%v, want U8[%d 224 224 3]", i, img.DType, img.Shape, n)
		}
		if lbl.DType != safetensors.I64 || !slices.Equal(lbl.Shape, []int{n}) {
			t.Fatalf("chunk %d label: %s%v, want I64[%d]", i, lbl.DType, lbl.Shape, n)
		}
		for j, k := range keys {
			if got := int64(binary.LittleEndian.Uint64(lbl.Data[8*j:])); got != labels[k] {
				t.Errorf("chunk %d row %d (%s): label %d, want %d", i, j, k, got, labels[k])
			}
		}
		seen = append(seen, keys...)
	}
	if res.Bytes != bytesTotal {
		t.Errorf("result says %d bytes, chunks hold %d", res.Bytes, bytesTotal)
	}
	// Every sample is either in a chunk, in shard order, or reported failed.
	want := slices.DeleteFunc(slices.Clone(allKeys), func(k string) bool { return slices.Contains(shard.Corrupt, k) })
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("chunk rows (-want +got):\n%s", diff)
	}

	endMsg := msgs[len(msgs)-1]
	if endMsg.ref.Chunk != -1 {
		t.Fatalf("last message is chunk %d, want the shard end", endMsg.ref.Chunk)
	}
	var end wire.ShardEnd
	if err := json.Unmarshal(endMsg.data, &end); err != nil {
		t.Fatal(err)
	}
	wantEnd := wire.ShardEnd{Job: job, Epoch: 2, Shard: 1, Chunks: res.Chunks, Samples: good, Failed: res.Failed}
	if diff := cmp.Diff(wantEnd, end); diff != "" {
		t.Errorf("shard end (-want +got):\n%s", diff)
	}

	// Redelivery: the same task again is acknowledged, and the stream's
	// duplicate window drops every re-published message.
	again := result(t, post(t, e.url, taskEvent(t, task(1))))
	if diff := cmp.Diff(res, again); diff != "" {
		t.Errorf("second result (-first +second):\n%s", diff)
	}
	if n := len(readStream(t, e.js, wire.OutputStream(job), job)); n != len(msgs) {
		t.Errorf("after redelivery the stream holds %d messages, want %d", n, len(msgs))
	}

	// And the reprocessed bytes are identical: publish to a second stream.
	ctx := context.Background()
	const copyJob = "job-copy"
	outputStream(t, e.js, wire.JobSpec{ID: copyJob, ChunkMaxBytes: chunkMax})
	tk := task(1)
	tk.OutputSubject = wire.OutputSubject(copyJob)
	if _, err := e.srv.ProcessShard(ctx, tk); err != nil {
		t.Fatal(err)
	}
	copies := readStream(t, e.js, wire.OutputStream(copyJob), job)
	if len(copies) != len(msgs) {
		t.Fatalf("reprocessing published %d messages, first run %d", len(copies), len(msgs))
	}
	for i := range msgs {
		if copies[i].ref != msgs[i].ref || !bytes.Equal(copies[i].data, msgs[i].data) {
			t.Errorf("message %d differs on reprocessing (%+v vs %+v)", i, copies[i].ref, msgs[i].ref)
		}
	}

	// A different epoch reshuffles the augmentations: same rows, other pixels.
	tk.Epoch = 3
	if _, err := e.srv.ProcessShard(ctx, tk); err != nil {
		t.Fatal(err)
	}
	epoch3 := readStream(t, e.js, wire.OutputStream(copyJob), job)[len(copies):]
	if len(epoch3) != len(msgs) || bytes.Equal(epoch3[0].data, msgs[0].data) {
		t.Errorf("epoch 3: %d messages, first chunk identical to epoch 2's: %v", len(epoch3), bytes.Equal(epoch3[0].data, msgs[0].data))
	}

	if got := metricValue(t, e.reg, "sluice_function_shards_total", "outcome", "ok"); got != 4 {
		t.Errorf("shards_total{ok} = %v, want 4", got)
	}
	if got := metricValue(t, e.reg, "sluice_function_samples_failed_total", "", ""); got != float64(4*len(shard.Corrupt)) {
		t.Errorf("samples_failed_total = %v, want %d", got, 4*len(shard.Corrupt))
	}
}

func metricValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					match = true
				}
			}
			if match {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("metric %s{%s=%q} not found", name, label, value)
	return 0
}

func TestStructuredModeAndEval(t *testing.T) {
	e := setup(t, Config{})
	tk := task(0)
	tk.Pipeline = "imagenet-eval"
	data, _ := json.Marshal(tk)
	body := fmt.Sprintf(`{"specversion":"1.0","id":"x1","source":"test","type":%q,"datacontenttype":"application/json","data":%s}`,
		wire.EventTypeShardTask, data)
	resp := postRaw(t, e.url, http.Header{"Content-Type": {"application/cloudevents+json"}}, []byte(body))
	res := result(t, resp)
	if res.Samples+len(res.Failed) != e.shards[0].Samples || res.Samples == 0 {
		t.Errorf("result %+v: want %d samples in all", res, e.shards[0].Samples)
	}
}

func TestBadEvents(t *testing.T) {
	e := setup(t, Config{})
	withType := taskEvent(t, task(0))
	withType.SetType("dev.sluice.something.else")
	noBucket := task(0)
	noBucket.Bucket = ""
	badPipeline := task(0)
	badPipeline.Pipeline = "resnet-magic"
	hugeChunks := task(0)
	hugeChunks.ChunkMaxBytes = 64 << 20 // valid for a task, but over NATS' 8 MiB max payload

	expectStatus(t, post(t, e.url, withType), 400, "event type")
	expectStatus(t, post(t, e.url, taskEvent(t, map[string]any{"job": 5})), 400, "JSON shard task")
	expectStatus(t, post(t, e.url, taskEvent(t, noBucket)), 400, "bucket and key are required")
	expectStatus(t, post(t, e.url, taskEvent(t, badPipeline)), 400, "imagenet-eval, imagenet-train")
	expectStatus(t, post(t, e.url, taskEvent(t, hugeChunks)), 400, "max payload")
	expectStatus(t, postRaw(t, e.url, http.Header{"Content-Type": {"application/json"}}, []byte(`{}`)), 400, "cloudevent")
	expectStatus(t, postRaw(t, e.url, http.Header{"Content-Type": {"application/cloudevents+json"}}, []byte(`{"specversion":`)), 400, "cloudevent")
	expectStatus(t, postRaw(t, e.url, http.Header{
		"Ce-Specversion": {"1.0"}, "Ce-Id": {"1"}, "Ce-Source": {"x"}, "Ce-Type": {wire.EventTypeShardTask},
		"Content-Type": {"application/json"},
	}, []byte(`not json`)), 400, "JSON shard task")

	resp, err := http.Get(e.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /: status %d, want 405", resp.StatusCode)
	}
}

func TestMissingShard(t *testing.T) {
	e := setup(t, Config{})
	missing := task(0)
	missing.Key = "train/shard-999999.tar"
	expectStatus(t, post(t, e.url, taskEvent(t, missing)), 404, "shard-999999.tar")
	noBucket := task(0)
	noBucket.Bucket = "nobucket"
	expectStatus(t, post(t, e.url, taskEvent(t, noBucket)), 404, "nobucket")
	if got := metricValue(t, e.reg, "sluice_function_shards_total", "outcome", "not_found"); got != 2 {
		t.Errorf("shards_total{not_found} = %v, want 2", got)
	}
}

func TestOversizedBody(t *testing.T) {
	e := setup(t, Config{MaxBodyBytes: 1024})
	big := map[string]any{"job": job, "padding": strings.Repeat("x", 4096)}
	expectStatus(t, post(t, e.url, taskEvent(t, big)), 413, "over 1024 bytes")
}

// TestNoOutputStreamIs404: a valid task whose job has no output stream
// (cancelled, finished, never submitted) cannot succeed by retrying: 404,
// which the dispatcher takes as permanent, naming the job and subject.
func TestNoOutputStreamIs404(t *testing.T) {
	e := setup(t, Config{})
	gone := task(0)
	gone.Job = "job-gone"
	gone.OutputSubject = wire.OutputSubject(gone.Job)
	expectStatus(t, post(t, e.url, taskEvent(t, gone)), 404, "no stream takes subject "+gone.OutputSubject+", so job job-gone was cancelled")
	// Also when no sample made a chunk (only the shard end is published).
	empty := gone
	empty.Key = "train/empty.jsonl"
	putObject(t, e, empty.Key, nil)
	expectStatus(t, post(t, e.url, taskEvent(t, empty)), 404, "no output stream")
	if got := metricValue(t, e.reg, "sluice_function_shards_total", "outcome", "no_output"); got != 2 {
		t.Errorf("shards_total{no_output} = %v, want 2", got)
	}
}

// TestOutputBufferFullIs500: a job's output buffer (OutputBufferBytes)
// full of chunks its readers have not taken yet refuses more; that is
// worth a retry once they have, so the reply is 500.
func TestOutputBufferFullIs500(t *testing.T) {
	e := setup(t, Config{})
	const small = "job-small"
	outputStream(t, e.js, wire.JobSpec{ID: small, ChunkMaxBytes: chunkMax, OutputBufferBytes: 2 * chunkMax})
	tk := task(0)
	tk.Job, tk.OutputSubject = small, wire.OutputSubject(small)
	expectStatus(t, post(t, e.url, taskEvent(t, tk)), 500, "maximum bytes exceeded")
	if got := metricValue(t, e.reg, "sluice_function_shards_total", "outcome", "error"); got != 1 {
		t.Errorf("shards_total{error} = %v, want 1", got)
	}
	// Nothing says the shard ended: the redelivery will redo it.
	for _, m := range readStream(t, e.js, wire.OutputStream(small), small) {
		if m.ref.Chunk < 0 {
			t.Errorf("shard end published for a shard whose chunks were refused")
		}
	}
}

// TestContentType: a task is JSON, in a binary-mode event (Content-Type
// application/json) or a structured one (application/cloudevents+json,
// JSON data); anything else is refused with 415 before it is read.
func TestContentType(t *testing.T) {
	e := setup(t, Config{})
	data, _ := json.Marshal(task(0))
	binary := func(ct string) http.Header {
		h := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"1"}, "Ce-Source": {"x"}, "Ce-Type": {wire.EventTypeShardTask}}
		if ct != "" {
			h.Set("Content-Type", ct)
		}
		return h
	}
	for _, ct := range []string{"text/plain", "text/plain; charset=utf-8", "", "application/x-www-form-urlencoded"} {
		resp := postRaw(t, e.url, binary(ct), data)
		if got := resp.Header.Get("Accept-Post"); got != "application/json, application/cloudevents+json" {
			t.Errorf("%q: Accept-Post %q", ct, got)
		}
		expectStatus(t, resp, 415, fmt.Sprintf("Content-Type %q: want application/json", ct))
	}
	structured := func(dct string) []byte {
		payload := data
		if dct != "application/json" { // the JSON task as text
			payload, _ = json.Marshal(string(data))
		}
		return []byte(fmt.Sprintf(`{"specversion":"1.0","id":"x1","source":"test","type":%q,"datacontenttype":%q,"data":%s}`,
			wire.EventTypeShardTask, dct, payload))
	}
	expectStatus(t, postRaw(t, e.url, http.Header{"Content-Type": {"application/cloudevents+json"}}, structured("text/plain")),
		415, `datacontenttype "text/plain": want application/json`)
	if got := metricValue(t, e.reg, "sluice_function_requests_rejected_total", "reason", "unsupported_media_type"); got != 5 {
		t.Errorf("rejected{unsupported_media_type} = %v, want 5", got)
	}
	// JSON with parameters is JSON.
	result(t, postRaw(t, e.url, binary("Application/JSON; charset=utf-8"), data))
	result(t, postRaw(t, e.url, http.Header{"Content-Type": {"application/cloudevents+json; charset=utf-8"}}, structured("application/json")))
	if got := metricValue(t, e.reg, "sluice_function_shards_total", "outcome", "ok"); got != 2 {
		t.Errorf("shards_total{ok} = %v, want 2: only the JSON requests processed", got)
	}
}

// TestUnlabelledShard: a WebDataset shard of images without .cls members
// goes through the built-in image pipelines, each sample labelled -1.
func TestUnlabelledShard(t *testing.T) {
	e := setup(t, Config{})
	var samples []wds.Sample
	r := wds.NewReader(bytes.NewReader(e.shards[0].Data), 0)
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(e.shards[0].Corrupt, s.Key) {
			delete(s.Files, "cls")
			samples = append(samples, s)
		}
	}
	var tarball bytes.Buffer
	tw := wds.NewWriter(&tarball)
	for _, s := range samples {
		if err := tw.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	tk := task(0)
	tk.Key = "unlabelled/shard-000000.tar"
	putObject(t, e, tk.Key, tarball.Bytes())
	res := result(t, post(t, e.url, taskEvent(t, tk)))
	if res.Samples != len(samples) || len(res.Failed) != 0 {
		t.Fatalf("result %+v: want all %d samples, none failed", res, len(samples))
	}
	for i, m := range readStream(t, e.js, wire.OutputStream(job), job) {
		if m.ref.Chunk < 0 {
			continue
		}
		f, err := safetensors.Decode(m.data)
		if err != nil {
			t.Fatal(err)
		}
		lbl := f.Tensors["label"].Data
		for j := 0; j+8 <= len(lbl); j += 8 {
			if got := int64(binary.LittleEndian.Uint64(lbl[j:])); got != pipeline.NoLabel {
				t.Errorf("chunk %d row %d: label %d, want %d", i, j/8, got, pipeline.NoLabel)
			}
		}
	}
}

func TestTruncatedShard(t *testing.T) {
	e := setup(t, Config{})
	ctx := context.Background()
	keys, _ := samplesOf(t, e.shards[0])
	// Cut the tar in the middle of a late member: that sample fails, the
	// ones before it are published, the shard ends normally.
	cut := e.shards[0].Data[:len(e.shards[0].Data)*4/5]
	key := "train/truncated.tar"
	if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: ptr(bucket), Key: &key, Body: bytes.NewReader(cut)}); err != nil {
		t.Fatal(err)
	}
	tk := task(0)
	tk.Key = key
	res, err := e.srv.ProcessShard(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	last := res.Failed[len(res.Failed)-1]
	if !strings.Contains(last.Reason, "truncated") || !slices.Contains(keys, last.Key) {
		t.Errorf("last failed sample %+v: want a truncated member of a known key", last)
	}
	if res.Samples == 0 || res.Samples+len(res.Failed) >= len(keys) {
		t.Errorf("result %+v: want some samples published and the ones after the cut missing (of %d)", res, len(keys))
	}
}

func ptr[T any](v T) *T { return &v }

// breakingTransport serves S3 normally but breaks object bodies after
// limit bytes, as a dropped connection would.
type breakingTransport struct{ limit int64 }

func (b breakingTransport) Do(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(resp.Body, b.limit), errReader{}), resp.Body}
	return resp, nil
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }

func TestS3ReadErrorIs500(t *testing.T) {
	e := setup(t, Config{})
	opts := e.s3.Options()
	opts.HTTPClient = breakingTransport{limit: int64(len(e.shards[0].Data) / 2)}
	opts.RetryMaxAttempts = 1
	srv, err := New(Config{}, e.js, s3.New(opts), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	expectStatus(t, post(t, hs.URL, taskEvent(t, task(0))), 500, "connection reset by peer")
	// Nothing says the shard ended: the redelivery will redo it.
	for _, m := range readStream(t, e.js, wire.OutputStream(job), job) {
		if m.ref.Chunk < 0 {
			t.Errorf("shard end published for a shard whose read failed")
		}
	}
}

func TestOutputsOverChunkCapFailSamples(t *testing.T) {
	e := setup(t, Config{})
	tk := task(0)
	tk.ChunkMaxBytes = 64 << 10 // one 224x224 image is 150 KB
	res := result(t, post(t, e.url, taskEvent(t, tk)))
	if res.Samples != 0 || res.Chunks != 0 || len(res.Failed) != e.shards[0].Samples {
		t.Fatalf("result %+v: want every sample failed", res)
	}
	capped := 0
	for _, f := range res.Failed {
		switch {
		case strings.Contains(f.Reason, "over the 65536-byte chunk cap"):
			capped++
		case !slices.Contains(e.shards[0].Corrupt, f.Key):
			t.Errorf("sample %s failed for %q, want the chunk cap", f.Key, f.Reason)
		}
	}
	if want := e.shards[0].Samples - len(e.shards[0].Corrupt); capped != want {
		t.Errorf("%d samples failed on the chunk cap, want %d", capped, want)
	}
	msgs := readStream(t, e.js, wire.OutputStream(job), job)
	if len(msgs) != 1 || msgs[0].ref.Chunk != -1 {
		t.Errorf("stream holds %d messages, want only the shard end", len(msgs))
	}
}

func TestDrainAndAdmission(t *testing.T) {
	e := setup(t, Config{})
	get := func(path string) int {
		resp, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("/readyz"); got != 200 {
		t.Fatalf("readyz before drain: %d", got)
	}

	// Hold the only slot, as a shard in flight would.
	release, status := e.srv.admit()
	if status != 0 {
		t.Fatalf("admit: %d", status)
	}
	expectStatus(t, post(t, e.url, taskEvent(t, task(0))), 429, "busy")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.srv.Drain(ctx); err == nil {
		t.Fatal("Drain returned with a shard in flight")
	}
	if got := get("/readyz"); got != 503 {
		t.Errorf("readyz while draining: %d, want 503", got)
	}
	if got := get("/healthz"); got != 200 {
		t.Errorf("healthz while draining: %d, want 200", got)
	}
	expectStatus(t, post(t, e.url, taskEvent(t, task(0))), 503, "draining")

	release()
	if err := e.srv.Drain(context.Background()); err != nil {
		t.Fatalf("Drain after the shard finished: %v", err)
	}
	expectStatus(t, post(t, e.url, taskEvent(t, task(0))), 503, "draining")
	if got := metricValue(t, e.reg, "sluice_function_requests_rejected_total", "reason", "draining"); got != 2 {
		t.Errorf("rejected{draining} = %v, want 2", got)
	}
}

func TestChunkerBoundaries(t *testing.T) {
	const rowBytes = 1000 // rows of one shape share chunks
	out := func(key string, n int) pipeline.Output {
		return pipeline.Output{Key: key, Fields: []pipeline.Field{{Name: "x", DType: safetensors.U8, Shape: []int{n}, Data: make([]byte, n)}}}
	}
	tk := task(0)
	tk.ChunkMaxBytes = 64 << 10
	run := func() []*chunk {
		c := newChunker(tk)
		var chunks []*chunk
		for i := range 100 {
			got, err := c.add(out(fmt.Sprintf("k%03d", i), rowBytes))
			if err != nil {
				t.Fatal(err)
			}
			if got != nil {
				chunks = append(chunks, got)
			}
		}
		// A row of another shape closes the chunk; an oversized one fails alone.
		if _, err := c.add(out("big", 64<<10)); err == nil || !strings.Contains(err.Error(), "chunk cap") {
			t.Errorf("oversized output: %v", err)
		}
		if got, err := c.add(pipeline.Output{Key: "y", Fields: []pipeline.Field{{Name: "y", DType: safetensors.I64, Shape: []int{}, Data: make([]byte, 8)}}}); err != nil || got == nil {
			t.Errorf("schema change: chunk %v, err %v; want the open chunk closed", got, err)
		} else {
			chunks = append(chunks, got)
		}
		last, err := c.close()
		if err != nil || last == nil || !slices.Equal(last.keys, []string{"y"}) {
			t.Fatalf("last chunk %+v, err %v", last, err)
		}
		return append(chunks, last)
	}
	a, b := run(), run()
	var rows []string
	for i, c := range a {
		if len(c.data) > tk.ChunkMaxBytes {
			t.Errorf("chunk %d: %d bytes over the cap", i, len(c.data))
		}
		// Chunks are packed: the next row would not have fit, give or take
		// the header bound's slack.
		if i < len(a)-2 && len(c.data)+rowBytes <= tk.ChunkMaxBytes-512 {
			t.Errorf("chunk %d: %d bytes, yet the next row (%d bytes) was not added", i, len(c.data), rowBytes)
		}
		if c.ref.Chunk != i || !bytes.Equal(c.data, b[i].data) {
			t.Errorf("chunk %d: index %d, same bytes on a rerun: %v", i, c.ref.Chunk, bytes.Equal(c.data, b[i].data))
		}
		rows = append(rows, c.keys...)
	}
	if len(a) != 3 {
		t.Errorf("%d chunks, want 3 (one full, one closed by the schema change, one for the new schema)", len(a))
	}
	if len(rows) != 101 || rows[0] != "k000" || rows[99] != "k099" {
		t.Errorf("rows %d (%v...), want k000..k099 and y", len(rows), rows[:3])
	}
}
