package wire

import "fmt"

// CloudEvent types exchanged between the broker's dispatcher and functions.
const (
	EventTypeShardTask   = "dev.sluice.shard.task.v1"
	EventTypeShardResult = "dev.sluice.shard.result.v1"
	EventSource          = "sluice/broker"
)

// ShardTask asks a function to preprocess one shard for one epoch. It carries
// everything the function needs, so functions stay stateless.
type ShardTask struct {
	Job      string `json:"job"`
	Epoch    int    `json:"epoch"`
	Shard    int    `json:"shard"` // index into Job.Shards
	Bucket   string `json:"bucket"`
	Key      string `json:"key"`
	Pipeline string `json:"pipeline"`
	Seed     uint64 `json:"seed"`
	// ChunkMaxBytes caps one published chunk.
	ChunkMaxBytes int `json:"chunk_max_bytes"`
	// OutputSubject is where chunks and the shard end are published.
	OutputSubject string `json:"output_subject"`
	// Replay is set on a task that re-produces a shard whose chunks a
	// reader had already acked (a trainer resumed from a checkpoint older
	// than what it was handed). The function suffixes every Nats-Msg-Id it
	// publishes with ".r" + Replay, so that the output stream's duplicate
	// window does not drop the re-produced chunks; readers drop copies they
	// do not need by ChunkRef. The bytes are those of the first run.
	Replay string `json:"replay,omitempty"`
}

// ID names the task uniquely within the cluster: job/epoch/shard.
func (t ShardTask) ID() string { return fmt.Sprintf("%s/e%d/s%d", t.Job, t.Epoch, t.Shard) }

// Validate names the first missing or out-of-range field.
func (t ShardTask) Validate() error {
	if err := ValidateJobID(t.Job); err != nil {
		return fmt.Errorf("task: %w", err)
	}
	switch {
	case t.Epoch < 0:
		return fmt.Errorf("task %s: epoch %d: want >= 0", t.ID(), t.Epoch)
	case t.Shard < 0:
		return fmt.Errorf("task %s: shard %d: want >= 0", t.ID(), t.Shard)
	case t.Bucket == "" || t.Key == "":
		return fmt.Errorf("task %s: bucket and key are required", t.ID())
	case t.Pipeline == "":
		return fmt.Errorf("task %s: pipeline is required", t.ID())
	case t.OutputSubject == "":
		return fmt.Errorf("task %s: output subject is required", t.ID())
	case t.ChunkMaxBytes < 64<<10 || t.ChunkMaxBytes > 64<<20:
		return fmt.Errorf("task %s: chunk max bytes %d: want 65536..67108864", t.ID(), t.ChunkMaxBytes)
	}
	return nil
}

// FailedSample is a sample that could not be preprocessed; it is reported,
// never silently dropped.
type FailedSample struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
	// Epoch is set where samples of several epochs are reported together
	// (the trainer agent's stats); within one shard's result it is implied.
	Epoch int `json:"epoch"`
}

// ShardResult is a function's reply once every chunk of the shard and its
// ShardEnd are durably published.
type ShardResult struct {
	Task    string         `json:"task"`
	Samples int            `json:"samples"` // preprocessed and published
	Failed  []FailedSample `json:"failed,omitempty"`
	Chunks  int            `json:"chunks"`
	Bytes   int64          `json:"bytes"`
	// Cache says where the shard's bytes came from: hit_memory, hit_disk
	// (the replica's shard cache), miss (S3, and cached), bypass (S3, not
	// cached), off (S3, no cache); empty from a replica without one.
	// S3Bytes and CacheBytes count the bytes read from each.
	Cache      string `json:"cache,omitempty"`
	S3Bytes    int64  `json:"s3_bytes,omitempty"`
	CacheBytes int64  `json:"cache_bytes,omitempty"`
}
