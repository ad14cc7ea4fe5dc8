package wire

import (
	"fmt"
	"strings"
	"time"
)

// JobSpec is what a user submits: where the dataset is and how to feed it.
// The JSON names are also the keys of a job spec file (YAML).
type JobSpec struct {
	ID string `json:"id"`
	// Dataset is an S3 URL of a prefix holding shards: s3://bucket/prefix/.
	// A job reads one dataset, or mixes Sources (not both).
	Dataset string `json:"dataset,omitempty"`
	// Sources are the datasets a mixed job reads, each with its weight
	// (see SourceSpec and docs/mixing.md); EpochShards is how many
	// shards the weights split an epoch into (0: every shard listed).
	Sources     []SourceSpec `json:"sources,omitempty"`
	EpochShards int          `json:"epoch_shards,omitempty"`
	// Pipeline is a built-in pipeline's name or a pipeline spec (YAML or
	// JSON) inline: every source's, unless it has its own.
	Pipeline string `json:"pipeline"`
	// BatchSize is the number of samples in a training batch.
	BatchSize int    `json:"batch_size"`
	Epochs    int    `json:"epochs"`
	Seed      uint64 `json:"seed"`
	// MinReplicas are kept while the job has work (0 lets it scale to
	// zero); MaxReplicas caps it (0: the controller's cap).
	MinReplicas int `json:"min_replicas,omitempty"`
	MaxReplicas int `json:"max_replicas,omitempty"`
	// InitialReplicas are started as soon as the job has tasks, before any
	// demand signal (0: the controller's default). A sweep pre-warms its
	// jobs with it, from the planner's estimate.
	InitialReplicas int `json:"initial_replicas,omitempty"`
	// Weight is the job's share of the replica capacity against other
	// jobs when capacity is short (default 1).
	Weight float64 `json:"weight,omitempty"`
	// Readers name the consumers of the job's output: each gets every
	// sample of every epoch (default: one, DefaultReader). A job's agents
	// serve all of its readers, so readers of one job share each shard's
	// preprocessing.
	Readers []string `json:"readers,omitempty"`
	// ChunkMaxBytes caps one output chunk a function sends (0: DefaultChunkMaxBytes).
	ChunkMaxBytes int `json:"chunk_max_bytes,omitempty"`
	// OutputBufferBytes caps the output an agent holds, received from
	// functions and not yet handed out to every reader it serves: it takes
	// no more tasks past it, so functions never run further ahead of the
	// slowest reader than this.
	OutputBufferBytes int64 `json:"output_buffer_bytes,omitempty"`
	// Columns maps sample members to the columns of a Parquet dataset
	// (member: column path, "image.bytes" for a nested field), e.g.
	// {txt: content, cls: fine_label}; only these columns are read, and
	// each must be in every file. Empty: the function's default mapping
	// (txt: text, jpg: image, cls: label, those a file has). Other
	// formats ignore it.
	Columns map[string]string `json:"columns,omitempty"`
}

// MaxReaders bounds the readers a job may declare: the controller keeps
// each one's progress in the job's status.
const MaxReaders = 64

// DefaultChunkMaxBytes is the chunk cap a spec gets by default.
const DefaultChunkMaxBytes = 4 << 20

// DefaultOutputBufferBytes holds a few thousand ImageNet-sized samples.
const DefaultOutputBufferBytes = 1 << 30

// WithDefaults fills zero fields.
func (s JobSpec) WithDefaults() JobSpec {
	if s.ChunkMaxBytes == 0 {
		s.ChunkMaxBytes = DefaultChunkMaxBytes
	}
	if s.OutputBufferBytes == 0 {
		s.OutputBufferBytes = DefaultOutputBufferBytes
	}
	if s.Weight == 0 {
		s.Weight = 1
	}
	if len(s.Readers) == 0 {
		s.Readers = []string{DefaultReader}
	}
	return s
}

// FieldError is one problem with one field of a spec; Field is its JSON
// (and YAML) name, so that a spec file's parser can point at its line.
type FieldError struct {
	Field   string
	Message string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// Problems lists every field out of range, in field order; none means the
// spec is valid. It checks a spec with defaults applied.
func (s JobSpec) Problems() []FieldError {
	var out []FieldError
	add := func(field, format string, args ...any) {
		out = append(out, FieldError{field, fmt.Sprintf(format, args...)})
	}
	if err := ValidateJobID(s.ID); err != nil {
		add("id", "%q: want 1-64 characters of [A-Za-z0-9_-]", s.ID)
	}
	s.sourceProblems(add)
	if s.BatchSize < 1 || s.BatchSize > 65536 {
		add("batch_size", "%d: want 1..65536", s.BatchSize)
	}
	if s.Epochs < 1 || s.Epochs > 10000 {
		add("epochs", "%d: want 1..10000", s.Epochs)
	}
	if s.MinReplicas < 0 || s.MinReplicas > 10000 {
		add("min_replicas", "%d: want 0..10000", s.MinReplicas)
	}
	if s.MaxReplicas < 0 || s.MaxReplicas > 10000 {
		add("max_replicas", "%d: want 0..10000 (0: the controller's cap)", s.MaxReplicas)
	} else if s.MaxReplicas > 0 && s.MinReplicas > s.MaxReplicas {
		add("max_replicas", "%d: want >= min_replicas (%d)", s.MaxReplicas, s.MinReplicas)
	}
	if s.InitialReplicas < 0 || s.InitialReplicas > 10000 {
		add("initial_replicas", "%d: want 0..10000 (0: the controller's default)", s.InitialReplicas)
	}
	if !(s.Weight > 0 && s.Weight <= 1000) {
		add("weight", "%v: want > 0 and <= 1000", s.Weight)
	}
	seen := map[string]bool{}
	for i, r := range s.Readers {
		if err := ValidateReader(r); err != nil {
			add("readers", "[%d] %q: want 1-64 characters of [A-Za-z0-9_-]", i, r)
		} else if seen[r] {
			add("readers", "[%d] %q: named twice", i, r)
		}
		seen[r] = true
	}
	if len(s.Readers) > MaxReaders {
		add("readers", "%d readers: want at most %d", len(s.Readers), MaxReaders)
	}
	if s.ChunkMaxBytes < 64<<10 || s.ChunkMaxBytes > 64<<20 {
		add("chunk_max_bytes", "%d: want 65536..67108864", s.ChunkMaxBytes)
	}
	if s.OutputBufferBytes < 4*int64(s.ChunkMaxBytes) || s.OutputBufferBytes > 1<<40 {
		add("output_buffer_bytes", "%d: want 4 x chunk_max_bytes (%d)..%d", s.OutputBufferBytes, 4*int64(s.ChunkMaxBytes), int64(1)<<40)
	}
	if err := ValidateColumns(s.Columns); err != nil {
		add("columns", "%v", err)
	}
	return out
}

// Validate returns every problem of Problems as one error, or nil.
func (s JobSpec) Validate() error {
	ps := s.Problems()
	if len(ps) == 0 {
		return nil
	}
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.Error()
	}
	return fmt.Errorf("job %s: %s", s.ID, strings.Join(msgs, "; "))
}

// Job is the broker's record of a submitted job, stored in JobsBucket under
// the job id. Shards is the listing taken at submission, so every epoch and
// every reader sees the same shard set. A mixed job's Shards are its
// sources' parts of an epoch one after the other (Sources), and Bucket is
// empty.
type Job struct {
	Spec      JobSpec     `json:"spec"`
	Bucket    string      `json:"bucket,omitempty"`
	Shards    []string    `json:"shards"` // object keys, sorted (a mixed job's: per source)
	Sources   []JobSource `json:"sources,omitempty"`
	Submitted time.Time   `json:"submitted"`
	// State and Reason (for failed and cancelled) change by compare-and-set
	// on the record; Updated is the time of the last change.
	State   JobState  `json:"state"`
	Reason  string    `json:"reason,omitempty"`
	Updated time.Time `json:"updated"`
	// AgentAuth is AgentPasswordHash of the password the job's agents
	// connect to NATS with (AgentNATSPassword of its team key); empty for
	// a job submitted without a team key, whose agents the controller
	// does not let in as the job.
	AgentAuth string `json:"agent_auth,omitempty"`
	// NodeKey is the public key (hex Ed25519) that certifies the job's node
	// credentials (JobNodeKey of its team key; nodecred.go): every team
	// message, demand signal and reader record of an agent of the job is
	// sealed by its node, and checked against it. Empty for a job submitted
	// without a team key, or by an older sluice.
	NodeKey string `json:"node_key,omitempty"`
}

// Tasks is the number of shard tasks the job queues over all epochs.
func (j Job) Tasks() int { return len(j.Shards) * j.Spec.Epochs }

// Task is the shard task for shard (an index into Shards) in epoch: what
// the broker queues, and what an agent sends again to re-produce a shard.
func (j Job) Task(epoch, shard int) ShardTask {
	bucket, pipeline := j.Bucket, j.Spec.Pipeline
	if len(j.Sources) > 0 {
		src := j.SourceOf(shard)
		bucket, pipeline = j.Sources[src].Bucket, j.Spec.PipelineOf(src)
	}
	return ShardTask{
		Job:           j.Spec.ID,
		Epoch:         epoch,
		Shard:         shard,
		Bucket:        bucket,
		Key:           j.Shards[shard],
		Pipeline:      pipeline,
		Seed:          j.Spec.Seed,
		ChunkMaxBytes: j.Spec.ChunkMaxBytes,
		Columns:       ColumnsOf(j.Spec.Columns),
	}
}
