package controller

import (
	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/wire"
)

// addReads puts where the job's shards were read from into s: this
// dispatcher's counts per epoch on top of an earlier owner's.
func addReads(s *wire.JobStatus, prev wire.JobStatus, reads map[int]broker.ShardReads, epochs int) {
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
			s.S3BytesPerEpoch[e] += r.S3Bytes
			s.CacheBytesPerEpoch[e] += r.CacheBytes
		}
		s.CacheHits += int64(r.Hits)
		s.CacheMisses += int64(r.Misses)
		s.CacheMemoryHits += int64(r.MemoryHits)
	}
}
