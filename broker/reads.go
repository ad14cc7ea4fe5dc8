package broker

import (
	"maps"

	"github.com/sluice-project/sluice/wire"
)

// ShardReads adds up where one epoch's shard bytes came from, over the
// functions' results: S3 or the replicas' shard caches.
type ShardReads struct {
	S3Bytes, CacheBytes int64
	// Hits counts shards served from a cache, MemoryHits those of them
	// from the memory of the replica (locality sent them home); Misses
	// those read from S3 (cached or not, or with no cache at all).
	Hits, MemoryHits, Misses int
}

// Cache outcomes a function reports that are hits (shardcache.Outcome).
const (
	cacheHitMemory = "hit_memory"
	cacheHitDisk   = "hit_disk"
)

// recordReads counts a done task's shard read, per epoch and in the job's
// metrics; a result that does not say where it read (a replica older than
// the shard cache) is not counted. Call with d.mu held.
func (d *Dispatcher) recordReads(task wire.ShardTask, res wire.ShardResult) {
	if res.Cache == "" {
		return
	}
	if d.reads == nil {
		d.reads = map[int]ShardReads{}
	}
	r := d.reads[task.Epoch]
	r.S3Bytes += res.S3Bytes
	r.CacheBytes += res.CacheBytes
	switch res.Cache {
	case cacheHitMemory:
		r.Hits++
		r.MemoryHits++
	case cacheHitDisk:
		r.Hits++
	default:
		r.Misses++
	}
	d.reads[task.Epoch] = r
	id := d.job.Spec.ID
	d.m.shardReads.WithLabelValues(id, res.Cache).Inc()
	d.m.readBytes.WithLabelValues(id, "s3").Add(float64(res.S3Bytes))
	d.m.readBytes.WithLabelValues(id, "cache").Add(float64(res.CacheBytes))
}

func (d *Dispatcher) readsSnapshot() map[int]ShardReads { return maps.Clone(d.reads) }
