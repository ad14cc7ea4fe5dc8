package server

import (
	"bytes"
	"testing"

	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/wire"
)

// TestShardTaskThroughCache processes one shard in three epochs through a
// replica with a shard cache: the first reads S3, the others the cache,
// and every epoch's chunks are the bytes a replica without a cache
// publishes.
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
		ref := result(t, post(t, plain.url, taskEvent(t, tk)))
		if ref.Cache != string(shardcache.OutcomeOff) || ref.S3Bytes != size {
			t.Errorf("epoch %d without a cache: %q, %d bytes from S3, want off and %d", epoch, ref.Cache, ref.S3Bytes, size)
		}
		res := result(t, post(t, cached.url, taskEvent(t, tk)))
		if res.Cache != string(w.cache) || res.S3Bytes != w.s3Bytes || res.CacheBytes != w.hitBytes {
			t.Errorf("epoch %d: %q, %d bytes from S3 and %d from the cache; want %s, %d and %d",
				epoch, res.Cache, res.S3Bytes, res.CacheBytes, w.cache, w.s3Bytes, w.hitBytes)
		}
		if res.Samples != ref.Samples || res.Chunks != ref.Chunks || len(res.Failed) != len(ref.Failed) {
			t.Errorf("epoch %d: result %+v, without a cache %+v", epoch, res, ref)
		}
	}
	a := readStream(t, plain.js, wire.OutputStream(job), job)
	b := readStream(t, cached.js, wire.OutputStream(job), job)
	if len(a) != len(b) {
		t.Fatalf("%d messages through the cache, %d without", len(b), len(a))
	}
	for i := range a {
		if a[i].ref != b[i].ref || !bytes.Equal(a[i].data, b[i].data) {
			t.Errorf("message %d (%+v) differs through the cache", i, a[i].ref)
		}
	}
}
