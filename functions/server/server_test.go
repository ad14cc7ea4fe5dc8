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

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

const (
	job    = "job-1"
	bucket = "data"
	// A 224x224x3 image plus its label is 150536 bytes: six fit in 1 MiB.
	chunkMax = 1 << 20
)

type env struct {
	s3     *s3.Client
	srv    *Server
	reg    *prometheus.Registry
	url    string
	shards []synth.Shard
}

// setup starts a replica's Handler on loopback against an S3 endpoint
// holding two image shards of 20 samples, 4 of them corrupt in all.
func setup(t *testing.T, cfg Config) *env {
	t.Helper()
	ctx := context.Background()
	s3c, _ := testenv.S3(t, bucket)
	shards, err := synth.Images(synth.ImageOptions{Samples: 40, Shards: 2, Seed: 9, MinSide: 48, MaxSide: 200, Quality: 85, Classes: 10, Corrupt: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, bucket, "train/", shards); err != nil {
		t.Fatal(err)
	}
	e := &env{s3: s3c, shards: shards}
	e.srv, e.reg, e.url = serve(t, cfg, s3c)
	return e
}

// serve starts a replica reading with s3c.
func serve(t *testing.T, cfg Config, s3c *s3.Client) (*Server, *prometheus.Registry, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	srv, err := New(cfg, s3c, logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return srv, reg, hs.URL
}

func task(shard int) wire.ShardTask {
	return wire.ShardTask{
		Job: job, Epoch: 2, Shard: shard, Bucket: bucket, Key: fmt.Sprintf("train/shard-%06d.tar", shard),
		Pipeline: "imagenet-train", Seed: 7, ChunkMaxBytes: chunkMax,
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

// post sends ev in binary mode, as an agent does.
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
	// A 4xx that rejects the task is the function's verdict; a busy or
	// draining replica's is not.
	rejects := want >= 400 && want < 500 && want != http.StatusTooManyRequests && want != http.StatusRequestTimeout
	if got := resp.Header.Get(wire.HeaderTaskRejected) == "true"; got != rejects {
		t.Errorf("status %d: %s %v, want %v", want, wire.HeaderTaskRejected, got, rejects)
	}
}

// output is one shard's response body, decoded.
type output struct {
	body   []byte   // as sent
	chunks [][]byte // chunk frames' payloads, by index
	end    *wire.ShardEnd
	err    *wire.ShardError
}

// decode reads a frame stream the way a caller does, checking the format:
// chunks in index order from 0, then one end or error frame, last.
func decode(t *testing.T, body []byte, chunkMaxBytes int) output {
	t.Helper()
	out := output{body: body}
	fr := wire.NewFrameReader(bytes.NewReader(body), chunkMaxBytes)
	for {
		f, err := fr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("frame %d: %v", len(out.chunks), err)
		}
		if out.end != nil || out.err != nil {
			t.Fatalf("a %s frame after the last frame", f.Kind)
		}
		switch f.Kind {
		case wire.FrameChunk:
			if f.Chunk != len(out.chunks) {
				t.Fatalf("chunk frame %d after %d chunks: want index order", f.Chunk, len(out.chunks))
			}
			out.chunks = append(out.chunks, bytes.Clone(f.Data))
		case wire.FrameEnd:
			out.end = &wire.ShardEnd{}
			if err := json.Unmarshal(f.Data, out.end); err != nil {
				t.Fatalf("shard end %q: %v", f.Data, err)
			}
		case wire.FrameError:
			out.err = &wire.ShardError{}
			if err := json.Unmarshal(f.Data, out.err); err != nil {
				t.Fatalf("error frame %q: %v", f.Data, err)
			}
		}
		if f.Chunk != 0 && f.Kind != wire.FrameChunk {
			t.Errorf("%s frame with chunk index %d, want 0", f.Kind, f.Chunk)
		}
	}
}

// stream checks that resp is a 200 frame stream and decodes it.
func stream(t *testing.T, resp *http.Response, chunkMaxBytes int) output {
	t.Helper()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != wire.ShardStreamMediaType {
		t.Errorf("Content-Type %q, want %q", ct, wire.ShardStreamMediaType)
	}
	return decode(t, body, chunkMaxBytes)
}

// complete is stream for a shard that must end normally.
func complete(t *testing.T, resp *http.Response) output {
	t.Helper()
	out := stream(t, resp, chunkMax)
	if out.end == nil {
		t.Fatalf("the stream has no shard end (error frame %+v)", out.err)
	}
	if out.end.Chunks != len(out.chunks) {
		t.Errorf("shard end says %d chunks, %d were sent", out.end.Chunks, len(out.chunks))
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

// chunkKeys decodes a chunk and returns its sample keys.
func chunkKeys(t *testing.T, data []byte) (safetensors.File, []string) {
	t.Helper()
	f, err := safetensors.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := json.Unmarshal([]byte(f.Metadata[wire.MetaKeys]), &keys); err != nil {
		t.Fatalf("chunk keys: %v", err)
	}
	return f, keys
}

func TestShardTask(t *testing.T) {
	e := setup(t, Config{})
	shard := e.shards[1]
	if len(shard.Corrupt) == 0 {
		t.Fatal("test shard has no corrupt samples")
	}
	allKeys, labels := samplesOf(t, shard)
	good := len(allKeys) - len(shard.Corrupt)

	out := complete(t, post(t, e.url, taskEvent(t, task(1))))
	end := out.end
	if len(out.chunks) != (good+5)/6 {
		t.Errorf("%d chunks, want %d for %d samples", len(out.chunks), (good+5)/6, good)
	}
	if diff := cmp.Diff(shard.Corrupt, failedKeys(end.Failed)); diff != "" {
		t.Errorf("failed samples (-corrupt +reported):\n%s", diff)
	}
	for _, f := range end.Failed {
		if !strings.Contains(f.Reason, "member jpg") {
			t.Errorf("failed sample %s: reason %q does not name the member", f.Key, f.Reason)
		}
	}

	var seen []string
	var bytesTotal int64
	for i, data := range out.chunks {
		if len(data) > chunkMax {
			t.Errorf("chunk %d is %d bytes, over %d", i, len(data), chunkMax)
		}
		bytesTotal += int64(len(data))
		f, keys := chunkKeys(t, data)
		n := len(keys)
		wantMeta := map[string]string{wire.MetaJob: job, wire.MetaEpoch: "2", wire.MetaShard: "1", wire.MetaChunk: strconv.Itoa(i),
			wire.MetaFirst: strconv.Itoa(len(seen)), wire.MetaKeys: f.Metadata[wire.MetaKeys]}
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
	// Every sample is either in a chunk, in shard order, or reported failed.
	want := slices.DeleteFunc(slices.Clone(allKeys), func(k string) bool { return slices.Contains(shard.Corrupt, k) })
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("chunk rows (-want +got):\n%s", diff)
	}
	wantEnd := wire.ShardEnd{Job: job, Epoch: 2, Shard: 1, Chunks: len(out.chunks), Samples: good, Failed: end.Failed,
		Bytes: bytesTotal, Cache: "off", S3Bytes: int64(len(shard.Data))}
	if diff := cmp.Diff(wantEnd, *end); diff != "" {
		t.Errorf("shard end (-want +got):\n%s", diff)
	}

	// Deterministic: the same task again gives the same frames, byte for
	// byte, and so does ProcessShard writing to a buffer.
	again := complete(t, post(t, e.url, taskEvent(t, task(1))))
	if !bytes.Equal(again.body, out.body) {
		t.Errorf("the second response (%d bytes, %d chunks) differs from the first (%d bytes)", len(again.body), len(again.chunks), len(out.body))
	}
	var buf bytes.Buffer
	direct, err := e.srv.ProcessShard(context.Background(), task(1), WriterSink(&buf))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), out.body) || !cmp.Equal(direct, *end) {
		t.Errorf("ProcessShard wrote %d bytes, end %+v; the response was %d bytes, end %+v", buf.Len(), direct, len(out.body), *end)
	}

	// A different epoch reshuffles the augmentations: same rows, other pixels.
	tk := task(1)
	tk.Epoch = 3
	epoch3 := complete(t, post(t, e.url, taskEvent(t, tk)))
	if len(epoch3.chunks) != len(out.chunks) || bytes.Equal(epoch3.chunks[0], out.chunks[0]) {
		t.Errorf("epoch 3: %d chunks, first chunk identical to epoch 2's: %v", len(epoch3.chunks), bytes.Equal(epoch3.chunks[0], out.chunks[0]))
	}

	if got := metricValue(t, e.reg, "sluice_function_shards_total", "outcome", "ok"); got != 4 {
		t.Errorf("shards_total{ok} = %v, want 4", got)
	}
	if got := metricValue(t, e.reg, "sluice_function_samples_failed_total", "", ""); got != float64(4*len(shard.Corrupt)) {
		t.Errorf("samples_failed_total = %v, want %d", got, 4*len(shard.Corrupt))
	}
	if got := metricValue(t, e.reg, "sluice_function_chunks_sent_total", "", ""); got != float64(4*len(out.chunks)) {
		t.Errorf("chunks_sent_total = %v, want %d", got, 4*len(out.chunks))
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
	end := complete(t, postRaw(t, e.url, http.Header{"Content-Type": {"application/cloudevents+json"}}, []byte(body))).end
	if end.Samples+end.FailedCount() != e.shards[0].Samples || end.Samples == 0 {
		t.Errorf("shard end %+v: want %d samples in all", end, e.shards[0].Samples)
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
	tinyChunks := task(0)
	tinyChunks.ChunkMaxBytes = 1000

	expectStatus(t, post(t, e.url, withType), 400, "event type")
	expectStatus(t, post(t, e.url, taskEvent(t, map[string]any{"job": 5})), 400, "JSON shard task")
	expectStatus(t, post(t, e.url, taskEvent(t, noBucket)), 400, "bucket and key are required")
	expectStatus(t, post(t, e.url, taskEvent(t, badPipeline)), 400, "imagenet-eval, imagenet-train")
	expectStatus(t, post(t, e.url, taskEvent(t, tinyChunks)), 400, "chunk max bytes 1000")
	expectStatus(t, postRaw(t, e.url, http.Header{"Content-Type": {"application/json"}}, []byte(`{}`)), 400, "cloudevent")
	expectStatus(t, postRaw(t, e.url, http.Header{"Content-Type": {"application/cloudevents+json"}}, []byte(`{"specversion":`)), 400, "cloudevent")
	expectStatus(t, postRaw(t, e.url, http.Header{
		"Ce-Specversion": {"1.0"}, "Ce-Id": {"1"}, "Ce-Source": {"x"}, "Ce-Type": {wire.EventTypeShardTask},
		"Content-Type": {"application/json"},
	}, []byte(`not json`)), 400, "JSON shard task")
	if got := metricValue(t, e.reg, "sluice_function_shards_total", "outcome", "invalid"); got != 1 {
		t.Errorf("shards_total{invalid} = %v, want 1 (the unknown pipeline; the others are refused as events)", got)
	}

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

// TestEmptyShard: a shard without samples has no chunk, so its first
// frame is its end: still a 200.
func TestEmptyShard(t *testing.T) {
	e := setup(t, Config{})
	tk := task(0)
	tk.Key = "train/empty.jsonl"
	putObject(t, e, tk.Key, nil)
	out := complete(t, post(t, e.url, taskEvent(t, tk)))
	want := wire.ShardEnd{Job: job, Epoch: 2, Shard: 0, Cache: "off"}
	if len(out.chunks) != 0 || !cmp.Equal(*out.end, want) {
		t.Errorf("%d chunks, end %+v; want only the end %+v", len(out.chunks), *out.end, want)
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
	complete(t, postRaw(t, e.url, binary("Application/JSON; charset=utf-8"), data))
	complete(t, postRaw(t, e.url, http.Header{"Content-Type": {"application/cloudevents+json; charset=utf-8"}}, structured("application/json")))
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
	out := complete(t, post(t, e.url, taskEvent(t, tk)))
	if out.end.Samples != len(samples) || out.end.FailedCount() != 0 {
		t.Fatalf("shard end %+v: want all %d samples, none failed", out.end, len(samples))
	}
	for i, data := range out.chunks {
		f, _ := chunkKeys(t, data)
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
	keys, _ := samplesOf(t, e.shards[0])
	// Cut the tar in the middle of a late member: that sample fails, the
	// ones before it are sent, the shard ends normally.
	tk := task(0)
	tk.Key = "train/truncated.tar"
	putObject(t, e, tk.Key, e.shards[0].Data[:len(e.shards[0].Data)*4/5])
	end, err := e.srv.ProcessShard(context.Background(), tk, WriterSink(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	last := end.Failed[len(end.Failed)-1]
	if !strings.Contains(last.Reason, "truncated") || !slices.Contains(keys, last.Key) {
		t.Errorf("last failed sample %+v: want a truncated member of a known key", last)
	}
	if end.Samples == 0 || end.Samples+end.FailedCount() >= len(keys) {
		t.Errorf("shard end %+v: want some samples sent and the ones after the cut missing (of %d)", end, len(keys))
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

// withTransport is e's S3 client reaching S3 through do, without retries.
func withTransport(e *env, do s3.HTTPClient) *s3.Client {
	opts := e.s3.Options()
	opts.HTTPClient = do
	opts.RetryMaxAttempts = 1
	return s3.New(opts)
}

// TestS3ReadErrorBeforeOutputIs500: an S3 read failing before the first
// chunk is ready is a plain 500, worth a retry.
func TestS3ReadErrorBeforeOutputIs500(t *testing.T) {
	e := setup(t, Config{})
	_, reg, url := serve(t, Config{}, withTransport(e, breakingTransport{limit: 4096}))
	expectStatus(t, post(t, url, taskEvent(t, task(0))), 500, "connection reset by peer")
	if got := metricValue(t, reg, "sluice_function_shards_total", "outcome", "error"); got != 1 {
		t.Errorf("shards_total{error} = %v, want 1", got)
	}
}

// TestS3ReadErrorMidShardEndsInErrorFrame: once chunks were sent the 200
// is out, so an S3 failure is the stream's last frame, a transient error;
// the chunks before it are whole and in order.
func TestS3ReadErrorMidShardEndsInErrorFrame(t *testing.T) {
	e := setup(t, Config{})
	_, reg, url := serve(t, Config{}, withTransport(e, breakingTransport{limit: int64(len(e.shards[0].Data) / 2)}))
	tk := task(0)
	tk.ChunkMaxBytes = 256 << 10 // a chunk per image
	out := stream(t, post(t, url, taskEvent(t, tk)), tk.ChunkMaxBytes)
	if out.end != nil || out.err == nil {
		t.Fatalf("stream ends with %+v, error %+v: want an error frame", out.end, out.err)
	}
	if out.err.Permanent || !strings.Contains(out.err.Message, "connection reset by peer") {
		t.Errorf("error frame %+v: want a transient error naming the S3 failure", *out.err)
	}
	if len(out.chunks) == 0 {
		t.Fatal("no chunk before the error: the test shard breaks too early")
	}
	for i, data := range out.chunks {
		if _, keys := chunkKeys(t, data); len(keys) != 1 {
			t.Errorf("chunk %d holds %d samples, want 1", i, len(keys))
		}
	}
	if got := metricValue(t, reg, "sluice_function_shards_total", "outcome", "error"); got != 1 {
		t.Errorf("shards_total{error} = %v, want 1", got)
	}
}

func TestOutputsOverChunkCapFailSamples(t *testing.T) {
	e := setup(t, Config{})
	tk := task(0)
	tk.ChunkMaxBytes = 64 << 10 // one 224x224 image is 150 KB
	out := stream(t, post(t, e.url, taskEvent(t, tk)), tk.ChunkMaxBytes)
	if out.end == nil || out.end.Samples != 0 || len(out.chunks) != 0 || len(out.end.Failed) != e.shards[0].Samples {
		t.Fatalf("%d chunks, end %+v: want only an end with every sample failed", len(out.chunks), out.end)
	}
	capped := 0
	for _, f := range out.end.Failed {
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
}

// TestFailuresAreBounded: a shard of more failing samples than a shard
// end lists still ends in one bounded frame, counting the rest.
func TestFailuresAreBounded(t *testing.T) {
	e := setup(t, Config{})
	const lines = wire.MaxFailedListed + 44
	var b strings.Builder
	for i := range lines {
		fmt.Fprintf(&b, "{\"text\":\"line %d\"}\n", i)
	}
	tk := task(0)
	tk.Key = "text/many.jsonl" // an image pipeline fails every line
	putObject(t, e, tk.Key, []byte(b.String()))
	end := complete(t, post(t, e.url, taskEvent(t, tk))).end
	if len(end.Failed) != wire.MaxFailedListed || end.FailedOmitted != 44 || end.FailedCount() != lines || end.Samples != 0 {
		t.Errorf("shard end lists %d failures, omits %d, has %d samples; want %d, 44, 0",
			len(end.Failed), end.FailedOmitted, end.Samples, wire.MaxFailedListed)
	}
	if got := metricValue(t, e.reg, "sluice_function_samples_failed_total", "", ""); got != lines {
		t.Errorf("samples_failed_total = %v, want %d", got, lines)
	}
}

// TestEncodeEndFitsItsFrame: reasons are capped, keys are not; an end
// whose listed failures would not fit its frame lists fewer.
func TestEncodeEndFitsItsFrame(t *testing.T) {
	end := wire.ShardEnd{Job: job}
	for i := range wire.MaxFailedListed {
		end.AddFailed(fmt.Sprintf("%08d/%s", i, strings.Repeat("k", 16<<10)), "bad")
	}
	payload, err := encodeEnd(&end)
	if err != nil {
		t.Fatal(err)
	}
	if len(payload) > wire.MaxEndFrameBytes || end.FailedCount() != wire.MaxFailedListed || len(end.Failed) == 0 {
		t.Errorf("%d bytes (bound %d), %d listed and %d omitted", len(payload), wire.MaxEndFrameBytes, len(end.Failed), end.FailedOmitted)
	}
	var back wire.ShardEnd
	if err := json.Unmarshal(payload, &back); err != nil || !cmp.Equal(back, end) {
		t.Errorf("the payload decodes to a different end (%v)", err)
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
	resp := post(t, e.url, taskEvent(t, task(0)))
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	expectStatus(t, resp, 429, "busy")

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

// TestChunkerBoundsExpansions: a chunk whose field carries an expansion
// says so in its metadata, and the size bound counts the table (a name
// and keys that JSON escapes twice), so no chunk goes over its cap.
func TestChunkerBoundsExpansions(t *testing.T) {
	exp, err := wire.NewExpansion("F32", make([][256]uint32, 4))
	if err != nil {
		t.Fatal(err)
	}
	tk := task(0)
	tk.ChunkMaxBytes = 64 << 10
	c := newChunker(tk)
	name := `im"a\ge<`
	var chunks []*chunk
	for i := range 200 {
		o := pipeline.Output{Key: fmt.Sprintf(`k"%03d\`, i), Fields: []pipeline.Field{
			{Name: name, DType: safetensors.U8, Shape: []int{10, 10, 4}, Data: make([]byte, 400), Expand: exp}}}
		got, err := c.add(o)
		if err != nil {
			t.Fatal(err)
		}
		if got != nil {
			chunks = append(chunks, got)
		}
	}
	if last, err := c.close(); err != nil {
		t.Fatal(err)
	} else if last != nil {
		chunks = append(chunks, last)
	}
	if len(chunks) < 2 {
		t.Fatalf("%d chunks: want the rows over several", len(chunks))
	}
	for i, ch := range chunks {
		f, err := safetensors.Decode(ch.data)
		if err != nil {
			t.Fatal(err)
		}
		m, err := wire.ParseExpansions(f.Metadata[wire.MetaExpand])
		if err != nil || !m[name].Equal(exp) {
			t.Errorf("chunk %d: expansions %v, %v", i, m, err)
		}
		if len(ch.data) > tk.ChunkMaxBytes || len(ch.data) < tk.ChunkMaxBytes-2048 && i < len(chunks)-1 {
			t.Errorf("chunk %d: %d bytes, cap %d", i, len(ch.data), tk.ChunkMaxBytes)
		}
	}
}
