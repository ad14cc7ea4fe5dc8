package traineragent

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/functions/server"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// f32Spec normalizes to float32 CHW, the op a replica leaves to the agent.
const f32Spec = "label: {member: cls}\nops:\n  - decode\n  - {op: random_resized_crop, size: 24}\n" +
	"  - {op: random_horizontal_flip, p: 0.5}\n  - {op: normalize, dtype: f32}\n"

// TestAgentExpandsWhatTheFunctionDefers: a real replica sends a float32
// job's images as the uint8 its normalize reads, with its table (the
// dispatcher's tasks ask for that), and the trainer gets over HTTP, row by
// row, the float32 CHW the pipeline gives in one process, with a quarter
// of the image bytes on the wire. It fails if the agent passes the bytes
// on unexpanded, or if the replica does not defer.
func TestAgentExpandsWhatTheFunctionDefers(t *testing.T) {
	e := newEnv(t)
	const bucket = "imgs"
	s3c, _ := testenv.S3(t, bucket)
	shards, err := synth.Images(synth.ImageOptions{Samples: 24, Shards: 3, Seed: 9, MinSide: 32, MaxSide: 64, Quality: 90, Classes: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(context.Background(), s3c, bucket, "train/", shards); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{}, s3c, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var wireBytes atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.Handler().ServeHTTP(countingWriter{w, &wireBytes}, r)
	}))
	t.Cleanup(hs.Close)

	job := wire.Job{
		Spec:   wire.JobSpec{ID: "f32", Dataset: "s3://imgs/train/", Pipeline: f32Spec, BatchSize: 5, Epochs: 1, Seed: 3, ChunkMaxBytes: 64 << 10},
		Bucket: bucket,
	}
	for _, s := range shards {
		job.Shards = append(job.Shards, "train/"+s.Name)
	}
	e.submitTo(t, job, hs.URL, 2)
	a, err := New(e.nc, e.js, job, Options{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	api := httptest.NewServer(a.Handler())
	t.Cleanup(api.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var batches []Batch
	for {
		b, err := getBatch(ctx, api.URL)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d batches: %v", len(batches), err)
		}
		batches = append(batches, b)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}

	want := wantImages(t, shards, job.Spec.Seed)
	rows, imageBytes := 0, 0
	for _, b := range batches {
		img := &b
		ti := -1
		for j, tn := range img.Tensors {
			if tn.Name == "image" {
				ti = j
			}
		}
		if ti < 0 {
			t.Fatalf("batch has no image tensor: %v", img.Tensors)
		}
		tn := img.Tensors[ti]
		if tn.DType != "F32" || len(tn.Shape) != 4 || tn.Shape[1] != 3 || tn.Shape[2] != 24 || tn.Shape[3] != 24 {
			t.Fatalf("image tensor %s%v: want F32 [n,3,24,24]", tn.DType, tn.Shape)
		}
		row := len(tn.Data) / len(img.Keys)
		for i, k := range img.Keys {
			if !bytes.Equal(tn.Data[i*row:(i+1)*row], want[k]) {
				t.Errorf("sample %s: the trainer's image differs from the pipeline's in one process", k)
			}
			rows++
			imageBytes += row
		}
	}
	if rows != 24 {
		t.Errorf("%d rows delivered, want 24", rows)
	}
	// The replica sent uint8: a quarter of the images' float32 bytes, and
	// some framing.
	if got := wireBytes.Load(); got > int64(imageBytes)/2 {
		t.Errorf("the function sent %d bytes for %d bytes of float32 images: not deferred", got, imageBytes)
	}
}

// wantImages is each sample's float32 image as the pipeline makes it in
// one process, not deferred.
func wantImages(t *testing.T, shards []synth.Shard, seed uint64) map[string][]byte {
	t.Helper()
	p, err := pipeline.Lookup(f32Spec, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, s := range shards {
		rd := wds.NewReader(bytes.NewReader(s.Data), 1<<20)
		for {
			smp, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.Process(smp, pipeline.SampleSeed(seed, 0, smp.Key))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range out.Fields {
				if f.Name == "image" {
					want[smp.Key] = f.Data
				}
			}
		}
	}
	return want
}

// countingWriter counts the bytes of a response.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return w.ResponseWriter.Write(p)
}

func (w countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
