package shardcache

import (
	"errors"
	"fmt"
	"time"
)

// ModelInputs describe a job and the rates measured on its system, for
// Predict. Rates are per replica unless named otherwise.
type ModelInputs struct {
	DatasetBytes int64 `json:"dataset_bytes"`
	Samples      int64 `json:"samples"`
	Shards       int   `json:"shards"`
	Epochs       int   `json:"epochs"`
	Replicas     int   `json:"replicas"`
	// CacheBytes is the cache that holds the dataset across replicas:
	// the sum of the nodes' directory budgets (replicas of a node share
	// one), or of the memory budgets without a directory.
	CacheBytes int64 `json:"cache_bytes"`
	// S3BytesPerS is one replica's streaming read rate from S3;
	// S3TotalBytesPerS caps all replicas together (0: no cap).
	S3BytesPerS      float64 `json:"s3_bytes_per_s"`
	S3TotalBytesPerS float64 `json:"s3_total_bytes_per_s"`
	// S3Latency is one request's time to first byte; a shard read from S3
	// costs one request, a hit one HEAD (the ETag check).
	S3Latency time.Duration `json:"s3_latency_ns"`
	// CacheBytesPerS is one replica's read rate from its cache.
	CacheBytesPerS float64 `json:"cache_bytes_per_s"`
	// DecodePerS is samples one replica preprocesses per second, bytes at hand.
	DecodePerS float64 `json:"decode_per_s"`
}

// EpochPrediction is what Predict expects of one epoch.
type EpochPrediction struct {
	S3Bytes    int64 `json:"s3_bytes"`
	CacheBytes int64 `json:"cache_bytes"`
	// IOSeconds is the epoch's time if preprocessing were free: reading
	// its bytes from S3 and the caches at the given rates, every replica
	// in parallel. IOCeiling (samples/s) is the throughput that allows.
	IOSeconds float64 `json:"io_seconds"`
	IOCeiling float64 `json:"io_ceiling"`
	// DecodeCeiling is the replicas' preprocessing rate; Bound the lower
	// of the two ceilings, the most the epoch can deliver.
	DecodeCeiling float64 `json:"decode_ceiling"`
	Bound         float64 `json:"bound"`
}

// Prediction is Predict's answer.
type Prediction struct {
	// CachedFraction is the share of the dataset the cache keeps: the
	// admission policy keeps a stable min(1, cache/dataset) of it.
	CachedFraction float64           `json:"cached_fraction"`
	Epochs         []EpochPrediction `json:"epochs"`
	// S3Bytes is over all epochs; S3Ratio that over the dataset's bytes.
	S3Bytes int64   `json:"s3_bytes"`
	S3Ratio float64 `json:"s3_ratio"`
}

// Validate names every input out of range.
func (in ModelInputs) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if in.DatasetBytes <= 0 {
		bad("dataset bytes %d: want > 0", in.DatasetBytes)
	}
	if in.Samples <= 0 {
		bad("samples %d: want > 0", in.Samples)
	}
	if in.Shards <= 0 {
		bad("shards %d: want > 0", in.Shards)
	}
	if in.Epochs <= 0 {
		bad("epochs %d: want > 0", in.Epochs)
	}
	if in.Replicas <= 0 {
		bad("replicas %d: want > 0", in.Replicas)
	}
	if in.CacheBytes < 0 {
		bad("cache bytes %d: want >= 0", in.CacheBytes)
	}
	if in.S3BytesPerS <= 0 || in.CacheBytesPerS <= 0 || in.DecodePerS <= 0 {
		bad("rates (s3 %g B/s, cache %g B/s, decode %g samples/s): want > 0", in.S3BytesPerS, in.CacheBytesPerS, in.DecodePerS)
	}
	if in.S3TotalBytesPerS < 0 || in.S3Latency < 0 {
		bad("s3 total rate %g and latency %v: want >= 0", in.S3TotalBytesPerS, in.S3Latency)
	}
	return errors.Join(errs...)
}

// Predict models a job's S3 traffic and I/O-bound throughput. The first
// epoch reads the whole dataset from S3; every later one reads the part
// the cache does not keep. Within an epoch the replicas share the work
// evenly and stream in parallel, S3 at min(replicas x per-replica rate,
// the total cap), caches at the per-replica rate; each shard costs one
// request's latency (a hit's HEAD too), spread over the replicas.
func Predict(in ModelInputs) (Prediction, error) {
	if err := in.Validate(); err != nil {
		return Prediction{}, err
	}
	f := min(1, float64(in.CacheBytes)/float64(in.DatasetBytes))
	p := Prediction{CachedFraction: f}
	r := float64(in.Replicas)
	s3Rate := r * in.S3BytesPerS
	if in.S3TotalBytesPerS > 0 {
		s3Rate = min(s3Rate, in.S3TotalBytesPerS)
	}
	shardsPerReplica := float64(in.Shards) / r
	for e := range in.Epochs {
		var ep EpochPrediction
		if e == 0 {
			ep.S3Bytes = in.DatasetBytes
		} else {
			ep.CacheBytes = int64(f * float64(in.DatasetBytes))
			ep.S3Bytes = in.DatasetBytes - ep.CacheBytes
		}
		ep.IOSeconds = float64(ep.S3Bytes)/s3Rate + float64(ep.CacheBytes)/(r*in.CacheBytesPerS) +
			shardsPerReplica*in.S3Latency.Seconds()
		ep.IOCeiling = float64(in.Samples) / ep.IOSeconds
		ep.DecodeCeiling = r * in.DecodePerS
		ep.Bound = min(ep.IOCeiling, ep.DecodeCeiling)
		p.S3Bytes += ep.S3Bytes
		p.Epochs = append(p.Epochs, ep)
	}
	p.S3Ratio = float64(p.S3Bytes) / float64(in.DatasetBytes)
	return p, nil
}
