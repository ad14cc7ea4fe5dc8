package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/wire"
)

func TestAddReadsOnTopOfAnEarlierOwner(t *testing.T) {
	prev := wire.JobStatus{S3BytesPerEpoch: []int64{100, 10}, CacheBytesPerEpoch: []int64{0, 90}, CacheHits: 3, CacheMisses: 5}
	var s wire.JobStatus
	addReads(&s, prev, map[int]ShardReads{1: {S3Bytes: 5, CacheBytes: 20, Hits: 2, MemoryHits: 1, Misses: 1}, 2: {CacheBytes: 100, Hits: 4}}, 3)
	want := wire.JobStatus{S3BytesPerEpoch: []int64{100, 15, 0}, CacheBytesPerEpoch: []int64{0, 110, 100}, CacheHits: 9, CacheMisses: 6, CacheMemoryHits: 1}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("status (-want,+got):\n%s", diff)
	}
	var none wire.JobStatus
	addReads(&none, wire.JobStatus{}, nil, 3)
	if none.S3BytesPerEpoch != nil {
		t.Errorf("reads %v without any shard read", none.S3BytesPerEpoch)
	}
}
