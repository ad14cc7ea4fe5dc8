package wire

import (
	"fmt"
	"time"
)

// Safetensors metadata keys of a chunk (all values are strings, as the format requires).
const (
	MetaJob   = "job"
	MetaEpoch = "epoch"
	MetaShard = "shard"
	MetaChunk = "chunk"
	MetaKeys  = "keys" // JSON array of sample keys, in tensor row order
	// MetaFirst is the shard row of the chunk's first row: the rows the
	// shard's earlier chunks hold. A receiver places a chunk's rows by it,
	// not by the chunk index, so that a retry chunked differently (another
	// function version, a changed chunk cap) is still taken exactly once.
	// Absent from chunks of older functions: the receiver then counts the
	// rows of the send's earlier chunks.
	MetaFirst = "first"
)

// Bounds on what one shard reports about its failed samples, so that a
// shard of thousands of broken members still ends in one bounded frame.
const (
	// MaxFailedListed is how many failed samples a shard end lists; the
	// rest are counted in FailedOmitted.
	MaxFailedListed = 256
	// MaxReasonBytes caps one failure's reason.
	MaxReasonBytes = 512
)

// ShardEnd closes a shard's output for one epoch: the payload of the end
// frame (see ShardStreamMediaType).
type ShardEnd struct {
	Job    string `json:"job"`
	Epoch  int    `json:"epoch"`
	Shard  int    `json:"shard"`
	Chunks int    `json:"chunks"`
	// Samples is the samples in the chunks; Failed the samples that could
	// not be preprocessed (at most MaxFailedListed, FailedOmitted more).
	Samples       int            `json:"samples"`
	Failed        []FailedSample `json:"failed,omitempty"`
	FailedOmitted int            `json:"failed_omitted,omitempty"`
	// Bytes is the chunks' size.
	Bytes int64 `json:"bytes"`
	// Cache says where the shard's bytes came from: hit_memory, hit_disk
	// (the replica's shard cache), miss (S3, and cached), bypass (S3, not
	// cached), off (S3, no cache); empty from a replica without one.
	// S3Bytes and CacheBytes count the bytes read from each.
	Cache      string `json:"cache,omitempty"`
	S3Bytes    int64  `json:"s3_bytes,omitempty"`
	CacheBytes int64  `json:"cache_bytes,omitempty"`
}

// FailedCount is every failed sample of the shard, listed or not.
func (e ShardEnd) FailedCount() int { return len(e.Failed) + e.FailedOmitted }

// AddFailed lists a failed sample within the bounds.
func (e *ShardEnd) AddFailed(key, reason string) {
	if len(e.Failed) >= MaxFailedListed {
		e.FailedOmitted++
		return
	}
	e.Failed = append(e.Failed, FailedSample{Key: key, Reason: truncateReason(reason)})
}

// truncateReason cuts a failure's reason to MaxReasonBytes.
func truncateReason(reason string) string {
	if len(reason) > MaxReasonBytes {
		return reason[:MaxReasonBytes] + "..."
	}
	return reason
}

// ChunkRef identifies one chunk of a shard's output in an epoch.
type ChunkRef struct {
	Job   string
	Epoch int
	Shard int
	Chunk int // -1 for the shard end
}

// String names the chunk in logs and failure reports.
func (r ChunkRef) String() string {
	if r.Chunk < 0 {
		return fmt.Sprintf("%s.e%d.s%d.end", r.Job, r.Epoch, r.Shard)
	}
	return fmt.Sprintf("%s.e%d.s%d.c%d", r.Job, r.Epoch, r.Shard, r.Chunk)
}

// ShardResult is what an agent reports to the job's owning controller, on
// ResultSubject(job), for each shard task it settled: the shard's end as
// the function sent it, or why the shard failed for good. The controller
// builds the job's status from them; they carry no data.
type ShardResult struct {
	// Agent names the agent that dispatched the task.
	Agent string    `json:"agent"`
	Time  time.Time `json:"time"`
	// Key is the shard's object key.
	Key string   `json:"key"`
	End ShardEnd `json:"end"`
	// Error is set when the shard failed for good (a permanent failure,
	// or too many failed deliveries): none of its samples come, and End
	// holds only the job, epoch and shard.
	Error string `json:"error,omitempty"`
	// Replay is set on the result of a shard produced again for a reader
	// (a resume from a checkpoint), beyond the job's tasks.
	Replay bool `json:"replay,omitempty"`
	// Sends counts the sends of the task by this agent that a replica
	// took (1 without retries; a 429 or 503 is not one).
	Sends int `json:"sends,omitempty"`
}

// Bounds on the counts of a ShardResult, which anyone who may publish on
// a job's result subject can send: far above what a real shard reports,
// low enough that a job's sums of them cannot overflow.
const (
	// MaxShardSends bounds ShardResult.Sends (an agent gives a task up
	// after its MaxDeliver failed sends, 20 by default).
	MaxShardSends = 1 << 16
	// MaxShardSamples bounds a shard end's samples and failed samples.
	MaxShardSamples = 1 << 32
	// MaxShardBytes bounds a shard end's byte counts.
	MaxShardBytes = 1 << 44
)

// CheckCounts names the first count of r out of its bounds (negative,
// or past MaxShardSends, MaxShardSamples, MaxShardBytes).
func (r ShardResult) CheckCounts() error {
	e := r.End
	for _, c := range []struct {
		name     string
		v, bound int64
	}{
		{"sends", int64(r.Sends), MaxShardSends},
		{"chunks", int64(e.Chunks), MaxShardSamples},
		{"samples", int64(e.Samples), MaxShardSamples},
		{"failed_omitted", int64(e.FailedOmitted), MaxShardSamples},
		{"bytes", e.Bytes, MaxShardBytes},
		{"s3_bytes", e.S3Bytes, MaxShardBytes},
		{"cache_bytes", e.CacheBytes, MaxShardBytes},
	} {
		if c.v < 0 || c.v > c.bound {
			return fmt.Errorf("shard result %s %d: want 0..%d", c.name, c.v, c.bound)
		}
	}
	return nil
}

// ShardsFailedKey is the key in ReadersBucket under which a job's agents
// record the shard tasks they gave up on (ShardsFailed), before acking
// them. A ShardResult is a core NATS message, lost if no controller owns
// the job when it is published (a takeover); this record is not, and the
// owner that finishes the job counts what it holds.
func ShardsFailedKey(job string) string { return shardsFailedToken + "." + job }

// ShardsFailed is the value under ShardsFailedKey.
type ShardsFailed struct {
	// Submitted is the submission time of the job the record is of: a job
	// deleted and submitted again under its id starts a new one.
	Submitted time.Time `json:"submitted"`
	// Shards lists the first MaxFailedShardsListed tasks given up, under
	// their task's shard key and epoch, each reason cut to MaxReasonBytes.
	Shards []FailedSample `json:"shards,omitempty"`
	// Total counts every task given up, listed or not.
	Total int `json:"total"`
}

// Add records a task given up; a task listed already is not counted again.
func (f *ShardsFailed) Add(s FailedSample) {
	for _, l := range f.Shards {
		if l.Key == s.Key && l.Epoch == s.Epoch {
			return
		}
	}
	f.Total++
	if len(f.Shards) < MaxFailedShardsListed {
		s.Reason = truncateReason(s.Reason)
		f.Shards = append(f.Shards, s)
	}
}
