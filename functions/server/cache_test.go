package server

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// TestShardTaskThroughCache processes one shard in three epochs through a
// replica with a shard cache: the first reads S3, the others the cache,
// and every epoch's chunks are the bytes a replica without a cache
// sends.
func TestShardTaskThroughCache(t *testing.T) {
	plain := setup(t, Config{})
	cached := setup(t, Config{Cache: shardcache.Config{Dir: t.TempDir(), DiskBytes: 64 << 20, MemoryBytes: 64 << 20}})
	size := int64(len(plain.shards[0].Data))

	want := []struct {
		cache             shardcache.Outcome
		s3Bytes, hitBytes int64
	}{
		{shardcache.OutcomeMiss, size, 0},
		{shardcache.OutcomeHitMemory, 0, size},
		{shardcache.OutcomeHitMemory, 0, size},
	}
	for epoch, w := range want {
		tk := task(0)
		tk.Epoch = epoch
		ref := complete(t, post(t, plain.url, taskEvent(t, tk)))
		if ref.end.Cache != string(shardcache.OutcomeOff) || ref.end.S3Bytes != size {
			t.Errorf("epoch %d without a cache: %q, %d bytes from S3, want off and %d", epoch, ref.end.Cache, ref.end.S3Bytes, size)
		}
		out := complete(t, post(t, cached.url, taskEvent(t, tk)))
		res := out.end
		if res.Cache != string(w.cache) || res.S3Bytes != w.s3Bytes || res.CacheBytes != w.hitBytes {
			t.Errorf("epoch %d: %q, %d bytes from S3 and %d from the cache; want %s, %d and %d",
				epoch, res.Cache, res.S3Bytes, res.CacheBytes, w.cache, w.s3Bytes, w.hitBytes)
		}
		if res.Samples != ref.end.Samples || res.Chunks != ref.end.Chunks || res.FailedCount() != ref.end.FailedCount() {
			t.Errorf("epoch %d: shard end %+v, without a cache %+v", epoch, res, ref.end)
		}
		if len(out.chunks) != len(ref.chunks) {
			t.Fatalf("epoch %d: %d chunks through the cache, %d without", epoch, len(out.chunks), len(ref.chunks))
		}
		for i := range ref.chunks {
			if !bytes.Equal(out.chunks[i], ref.chunks[i]) {
				t.Errorf("epoch %d: chunk %d differs through the cache", epoch, i)
			}
		}
	}
}

// TestModelPredictsMeasuredS3Bytes runs a 3-epoch job's tasks (each epoch
// in its own order) through a replica with a cache that holds the whole
// dataset, half of it, and none, against real S3 on loopback, and compares the S3 bytes the replica read with
// shardcache.Predict: exact when the dataset fits or nothing is cached,
// within one shard per epoch when half fits (the policy admits whole
// shards).
func TestModelPredictsMeasuredS3Bytes(t *testing.T) {
	ctx := context.Background()
	shards, err := synth.Text(synth.TextOptions{Samples: 600, Shards: 12, Seed: 3, Format: "jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	var dataset, largest int64
	for _, s := range shards {
		dataset += int64(len(s.Data))
		largest = max(largest, int64(len(s.Data)))
	}
	const epochs = 3
	for _, tc := range []struct {
		name  string
		cache shardcache.Config
		model int64
		slack int64
	}{
		{"fits", shardcache.Config{Dir: t.TempDir(), DiskBytes: 2 * dataset}, 2 * dataset, 0},
		{"half fits", shardcache.Config{Dir: t.TempDir(), DiskBytes: dataset / 2}, dataset / 2, (epochs - 1) * largest},
		{"none", shardcache.Config{}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s3c, _ := testenv.S3(t, bucket)
			if err := synth.Upload(ctx, s3c, bucket, "text/", shards); err != nil {
				t.Fatal(err)
			}
			srv, err := New(Config{Cache: tc.cache}, s3c, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var measured int64
			for epoch := range epochs {
				for _, i := range rand.New(rand.NewPCG(uint64(epoch), 9)).Perm(len(shards)) {
					tk := wire.ShardTask{Job: job, Epoch: epoch, Shard: i, Bucket: bucket, Key: "text/" + shards[i].Name,
						Pipeline: "text-wordpiece", Seed: 1, ChunkMaxBytes: chunkMax}
					res, err := srv.ProcessShard(ctx, tk, WriterSink(io.Discard))
					if err != nil {
						t.Fatal(err)
					}
					measured += res.S3Bytes
				}
			}
			p, err := shardcache.Predict(shardcache.ModelInputs{DatasetBytes: dataset, Samples: 600, Shards: len(shards),
				Epochs: epochs, Replicas: 1, CacheBytes: tc.model, S3BytesPerS: 1, CacheBytesPerS: 1, DecodePerS: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d := measured - p.S3Bytes; d > tc.slack || d < -tc.slack {
				t.Errorf("read %d bytes from S3 (%.2fx the dataset), the model predicts %d (%.2fx), want within %d",
					measured, float64(measured)/float64(dataset), p.S3Bytes, p.S3Ratio, tc.slack)
			}
			t.Logf("S3 bytes: measured %d (%.2fx the dataset), predicted %d (%.2fx)", measured, float64(measured)/float64(dataset), p.S3Bytes, p.S3Ratio)
		})
	}
}
