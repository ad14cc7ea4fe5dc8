package shardcache

import (
	"math"
	"testing"
	"time"
)

func TestPredict(t *testing.T) {
	in := ModelInputs{DatasetBytes: 100 << 20, Samples: 10000, Shards: 100, Epochs: 3, Replicas: 4,
		CacheBytes: 50 << 20, S3BytesPerS: 10 << 20, S3TotalBytesPerS: 20 << 20, S3Latency: 50 * time.Millisecond,
		CacheBytesPerS: 500 << 20, DecodePerS: 1000}
	p, err := Predict(in)
	if err != nil {
		t.Fatal(err)
	}
	if p.CachedFraction != 0.5 || p.S3Bytes != 200<<20 || p.S3Ratio != 2 {
		t.Errorf("half the dataset cached: fraction %v, %d S3 bytes (%vx); want 0.5, %d, 2x", p.CachedFraction, p.S3Bytes, p.S3Ratio, 200<<20)
	}
	// Epoch 0: 100 MiB at the 20 MiB/s cap, 25 shards' latency per replica.
	if got, want := p.Epochs[0].IOSeconds, 5+25*0.05; math.Abs(got-want) > 1e-9 {
		t.Errorf("epoch 0 I/O %vs, want %vs", got, want)
	}
	// Later: 50 MiB from S3 and 50 MiB from 4 caches at 500 MiB/s each.
	if got, want := p.Epochs[1].IOSeconds, 2.5+50.0/2000+25*0.05; math.Abs(got-want) > 1e-9 {
		t.Errorf("epoch 1 I/O %vs, want %vs", got, want)
	}
	if e := p.Epochs[1]; e.DecodeCeiling != 4000 || e.Bound != min(e.IOCeiling, 4000) {
		t.Errorf("epoch 1 ceilings %+v", e)
	}

	in.CacheBytes = 1 << 30
	if p, _ := Predict(in); p.S3Ratio != 1 || p.Epochs[2].S3Bytes != 0 {
		t.Errorf("dataset fits: %vx the dataset from S3, epoch 2 %d bytes; want 1x and 0", p.S3Ratio, p.Epochs[2].S3Bytes)
	}
	in.CacheBytes = 0
	if p, _ := Predict(in); p.S3Ratio != 3 {
		t.Errorf("no cache: %vx, want 3x", p.S3Ratio)
	}
	if _, err := Predict(ModelInputs{}); err == nil {
		t.Error("empty inputs predicted")
	}
}
