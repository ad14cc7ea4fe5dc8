package wire

import (
	"fmt"
	"time"
)

// JobSpec is what a user submits: where the dataset is and how to feed it.
type JobSpec struct {
	ID string `json:"id"`
	// Dataset is an S3 URL of a prefix holding tar shards: s3://bucket/prefix/.
	Dataset  string `json:"dataset"`
	Pipeline string `json:"pipeline"`
	// BatchSize is the number of samples in a training batch.
	BatchSize int    `json:"batch_size"`
	Epochs    int    `json:"epochs"`
	Seed      uint64 `json:"seed"`
	// ChunkMaxBytes caps the size of one output chunk message.
	ChunkMaxBytes int `json:"chunk_max_bytes"`
	// OutputBufferBytes caps the chunks stored between the functions and the
	// trainer agent. Dispatch pauses as the buffer nears it, so functions
	// never run further ahead of the trainer than this.
	OutputBufferBytes int64 `json:"output_buffer_bytes"`
}

// DefaultChunkMaxBytes keeps chunks well under the 8 MiB max payload the
// embedded NATS server is configured with (and NATS' advice against more).
const DefaultChunkMaxBytes = 4 << 20

// DefaultOutputBufferBytes holds a few thousand ImageNet-sized samples.
const DefaultOutputBufferBytes = 1 << 30

// Validate names the first field that is out of range.
func (s JobSpec) Validate() error {
	if err := ValidateJobID(s.ID); err != nil {
		return err
	}
	switch {
	case s.Dataset == "":
		return fmt.Errorf("job %s: dataset: want an s3://bucket/prefix/ URL", s.ID)
	case s.Pipeline == "":
		return fmt.Errorf("job %s: pipeline: want a pipeline name", s.ID)
	case s.BatchSize < 1 || s.BatchSize > 65536:
		return fmt.Errorf("job %s: batch size %d: want 1..65536", s.ID, s.BatchSize)
	case s.Epochs < 1 || s.Epochs > 10000:
		return fmt.Errorf("job %s: epochs %d: want 1..10000", s.ID, s.Epochs)
	case s.ChunkMaxBytes < 64<<10 || s.ChunkMaxBytes > 64<<20:
		return fmt.Errorf("job %s: chunk max bytes %d: want 65536..67108864", s.ID, s.ChunkMaxBytes)
	case s.OutputBufferBytes < 4*int64(s.ChunkMaxBytes) || s.OutputBufferBytes > 1<<40:
		return fmt.Errorf("job %s: output buffer bytes %d: want 4 x chunk max bytes (%d)..%d", s.ID, s.OutputBufferBytes, 4*int64(s.ChunkMaxBytes), int64(1)<<40)
	}
	return nil
}

// Job is the broker's record of a submitted job, stored in JobsBucket under
// the job id. Shards is the listing taken at submission, so every epoch and
// every reader sees the same shard set.
type Job struct {
	Spec      JobSpec   `json:"spec"`
	Bucket    string    `json:"bucket"`
	Shards    []string  `json:"shards"` // object keys, sorted
	Submitted time.Time `json:"submitted"`
}

// Tasks is the number of shard tasks the job queues over all epochs.
func (j Job) Tasks() int { return len(j.Shards) * j.Spec.Epochs }
