package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

type discardSink struct{}

func (discardSink) WriteFrame(wire.FrameKind, int, []byte) error { return nil }

// BenchmarkImageShardParquetVsTar: the same ImageNet-like images as a
// WebDataset tar and as a Parquet file (Hugging Face's image struct, a
// label, and a column as large as the images that is not read),
// each shard processed by imagenet-train from a loopback S3 endpoint,
// alternately, so that both see the same machine. It reports each one's
// samples/s and parquet/tar, the target being at least 0.95; and the
// Parquet shard's bytes read from S3 over its image and label chunks'.
//
//	go test -run '^$' -bench ImageShardParquetVsTar -benchtime 5x ./functions/server/
func BenchmarkImageShardParquetVsTar(b *testing.B) {
	ctx := context.Background()
	s3c, _ := testenv.S3(b, bucket)
	shards, err := synth.Images(synth.ImageOptions{Samples: 128, Shards: 1, Seed: 3, MinSide: 200, MaxSide: 500, Quality: 90, Classes: 10})
	if err != nil {
		b.Fatal(err)
	}
	data := tarAsParquet(b, shards[0], 32, 40<<10)
	put := func(key string, body []byte) {
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: ptr(bucket), Key: &key, Body: bytes.NewReader(body)}); err != nil {
			b.Fatal(err)
		}
	}
	put("bench/s.tar", shards[0].Data)
	put("bench/s.parquet", data)
	srv, err := New(Config{}, s3c, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	tk := wire.ShardTask{Job: job, Bucket: bucket, Pipeline: "imagenet-train", Seed: 1, ChunkMaxBytes: 4 << 20}
	run := func(key string) (time.Duration, wire.ShardEnd) {
		tk.Key = key
		start := time.Now()
		end, err := srv.ProcessShard(ctx, tk, discardSink{})
		if err != nil || end.Samples != shards[0].Samples {
			b.Fatalf("%s: %d samples, %v", key, end.Samples, err)
		}
		return time.Since(start), end
	}
	run("bench/s.tar") // warm both: the pipeline is built once
	run("bench/s.parquet")
	b.ResetTimer()
	var tarTime, pqTime time.Duration
	var end wire.ShardEnd
	for b.Loop() {
		d, _ := run("bench/s.tar")
		tarTime += d
		d, end = run("bench/s.parquet")
		pqTime += d
	}
	b.StopTimer()
	n := float64(b.N * shards[0].Samples)
	b.ReportMetric(n/tarTime.Seconds(), "tar_samples/s")
	b.ReportMetric(n/pqTime.Seconds(), "parquet_samples/s")
	b.ReportMetric(tarTime.Seconds()/pqTime.Seconds(), "parquet/tar")
	chunks, _ := projectedBytes(b, data, "image.bytes", "label")
	b.ReportMetric(float64(end.S3Bytes)/float64(chunks), "s3/projected")
	if float64(end.S3Bytes) > 1.05*float64(chunks) {
		b.Errorf("read %d bytes from S3 for %d bytes of image and label chunks: over 1.05x", end.S3Bytes, chunks)
	}
	b.ReportMetric(float64(len(data))/float64(chunks), "file/projected")
	b.ReportMetric(0, "ns/op")
}
