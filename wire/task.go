package wire

import "fmt"

// The CloudEvent an agent sends a function, in binary mode: the type, its
// source, and the task as JSON data. The function answers with the shard's
// output (ShardStreamMediaType).
const (
	EventTypeShardTask = "dev.sluice.shard.task.v1"
	EventSource        = "sluice/agent"
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
	// ChunkMaxBytes caps one chunk of the output.
	ChunkMaxBytes int `json:"chunk_max_bytes"`
	// Columns maps members to Parquet columns (JobSpec.Columns).
	Columns Columns `json:"columns,omitzero"`
	// Expand says the sender applies expansions (MetaExpand): a function
	// may send a widening last op's input, with its table, in place of
	// its output. A function that does not know the field sends the output.
	Expand bool `json:"expand,omitempty"`
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
	case t.ChunkMaxBytes < 64<<10 || t.ChunkMaxBytes > 64<<20:
		return fmt.Errorf("task %s: chunk max bytes %d: want 65536..67108864", t.ID(), t.ChunkMaxBytes)
	}
	if err := ValidateColumns(t.Columns.Map()); err != nil {
		return fmt.Errorf("task %s: columns: %w", t.ID(), err)
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
