package controller

import (
	"github.com/sluice-project/sluice/internal/sat"
	"github.com/sluice-project/sluice/wire"
)

// ShardReads adds up where one epoch's shard bytes came from, over the
// functions' shard ends: S3 or the replicas' shard caches.
type ShardReads struct {
	S3Bytes, CacheBytes int64
	// Hits counts shards served from a cache, MemoryHits those of them
	// from the memory of the replica (the agent sent them home); Misses
	// those read from S3 (cached or not, or with no cache at all).
	Hits, MemoryHits, Misses int
}

// Cache outcomes a function reports that are hits (shardcache.Outcome).
const (
	cacheHitMemory = "hit_memory"
	cacheHitDisk   = "hit_disk"
)

// add counts one shard read as end reports it; false for an end that does
// not say where it read (a replica without the shard cache).
func (r *ShardReads) add(end wire.ShardEnd) bool {
	if end.Cache == "" {
		return false
	}
	r.S3Bytes = sat.Add64(r.S3Bytes, end.S3Bytes)
	r.CacheBytes = sat.Add64(r.CacheBytes, end.CacheBytes)
	switch end.Cache {
	case cacheHitMemory:
		r.Hits++
		r.MemoryHits++
	case cacheHitDisk:
		r.Hits++
	default:
		r.Misses++
	}
	return true
}

// addReads puts where the job's shards were read from into s: this
// controller's counts per epoch on top of an earlier owner's.
func addReads(s *wire.JobStatus, prev wire.JobStatus, reads map[int]ShardReads, epochs int) {
	if len(reads) == 0 && len(prev.S3BytesPerEpoch) == 0 && len(prev.CacheBytesPerEpoch) == 0 {
		return
	}
	s.S3BytesPerEpoch = make([]int64, epochs)
	s.CacheBytesPerEpoch = make([]int64, epochs)
	copy(s.S3BytesPerEpoch, prev.S3BytesPerEpoch)
	copy(s.CacheBytesPerEpoch, prev.CacheBytesPerEpoch)
	s.CacheHits, s.CacheMisses, s.CacheMemoryHits = prev.CacheHits, prev.CacheMisses, prev.CacheMemoryHits
	for e, r := range reads {
		if e >= 0 && e < epochs {
			s.S3BytesPerEpoch[e] = sat.Add64(s.S3BytesPerEpoch[e], r.S3Bytes)
			s.CacheBytesPerEpoch[e] = sat.Add64(s.CacheBytesPerEpoch[e], r.CacheBytes)
		}
		s.CacheHits = sat.Add64(s.CacheHits, int64(r.Hits))
		s.CacheMisses = sat.Add64(s.CacheMisses, int64(r.Misses))
		s.CacheMemoryHits = sat.Add64(s.CacheMemoryHits, int64(r.MemoryHits))
	}
}
