package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/format/wds"
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
// samples/s and parquet/tar: over all pairs, the median pair's, and the
// median pair's in CPU time (the target being at least 0.95); and the
// Parquet shard's bytes read from S3 over its image and label chunks'.
//
//	go test -run '^$' -bench ImageShardParquetVsTar -benchtime 20x ./functions/server/
func BenchmarkImageShardParquetVsTar(b *testing.B) {
	ctx := context.Background()
	s3c, _ := testenv.S3(b, bucket)
	shards, err := synth.Images(synth.ImageOptions{Samples: 64, Shards: 1, Seed: 3, MinSide: 200, MaxSide: 500, Quality: 90, Classes: 10})
	if err != nil {
		b.Fatal(err)
	}
	data := tarAsParquet(b, shards[0], 16, 40<<10)
	// The tar's keys made the Parquet rows' ("s/<row>"), so that every
	// sample gets the same seed, so the same random crop, from both: the
	// work per sample is the same.
	var tarData bytes.Buffer
	tw := wds.NewWriter(&tarData)
	rd := wds.NewReader(bytes.NewReader(shards[0].Data), 0)
	for row := 0; ; row++ {
		smp, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		smp.Key = fmt.Sprintf("s/%08d", row)
		if err := tw.Write(smp); err != nil {
			b.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	put := func(key string, body []byte) {
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: ptr(bucket), Key: &key, Body: bytes.NewReader(body)}); err != nil {
			b.Fatal(err)
		}
	}
	put("bench/s.tar", tarData.Bytes())
	put("bench/s.parquet", data)
	srv, err := New(Config{}, s3c, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	tk := wire.ShardTask{Job: job, Bucket: bucket, Pipeline: "imagenet-train", Seed: 1, ChunkMaxBytes: 4 << 20}
	// run processes the shard at key, returning the wall time and the
	// process's CPU time it took (S3 server included, for both formats):
	// other load on the machine moves the first much more than the second.
	run := func(key string) (wall, cpu time.Duration, end wire.ShardEnd) {
		tk.Key = key
		c0, start := cpuTime(), time.Now()
		end, err := srv.ProcessShard(ctx, tk, discardSink{})
		wall, cpu = time.Since(start), cpuTime()-c0
		if err != nil || end.Samples != shards[0].Samples {
			b.Fatalf("%s: %d samples, %v", key, end.Samples, err)
		}
		return wall, cpu, end
	}
	run("bench/s.tar") // warm both: the pipeline is built once
	run("bench/s.parquet")
	b.ResetTimer()
	var tarTime, pqTime time.Duration
	var wallRatios, cpuRatios []float64
	var end wire.ShardEnd
	for i := 0; b.Loop(); i++ {
		// Each pair in turn order, so that a burst of load elsewhere on
		// the machine falls on either as often.
		var tw, tc, pw, pc time.Duration
		if i%2 == 0 {
			tw, tc, _ = run("bench/s.tar")
			pw, pc, end = run("bench/s.parquet")
		} else {
			pw, pc, end = run("bench/s.parquet")
			tw, tc, _ = run("bench/s.tar")
		}
		tarTime, pqTime = tarTime+tw, pqTime+pw
		wallRatios = append(wallRatios, tw.Seconds()/pw.Seconds())
		cpuRatios = append(cpuRatios, tc.Seconds()/pc.Seconds())
	}
	b.StopTimer()
	n := float64(b.N * shards[0].Samples)
	b.ReportMetric(n/tarTime.Seconds(), "tar_samples/s")
	b.ReportMetric(n/pqTime.Seconds(), "parquet_samples/s")
	b.ReportMetric(tarTime.Seconds()/pqTime.Seconds(), "parquet/tar")
	// The median pair's ratios: the machine's other load moves the totals.
	b.ReportMetric(median(wallRatios), "parquet/tar_median")
	b.ReportMetric(median(cpuRatios), "parquet/tar_cpu_median")
	chunks, _ := projectedBytes(b, data, "image.bytes", "label")
	b.ReportMetric(float64(end.S3Bytes)/float64(chunks), "s3/projected")
	if float64(end.S3Bytes) > 1.05*float64(chunks) {
		b.Errorf("read %d bytes from S3 for %d bytes of image and label chunks: over 1.05x", end.S3Bytes, chunks)
	}
	b.ReportMetric(float64(len(data))/float64(chunks), "file/projected")
	b.ReportMetric(0, "ns/op")
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
