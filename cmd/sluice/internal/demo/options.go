package demo

import (
	"fmt"
	"time"

	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/slowlink"
)

// Options shape a demo run. Zero values are replaced by DefaultOptions'.
type Options struct {
	// Dataset is the kind of synthetic dataset: image, text or tabular.
	Dataset         string
	Samples, Shards int
	Epochs          int
	BatchSize       int
	Seed            uint64
	// StepTime is the simulated GPU time per batch.
	StepTime time.Duration
	// MaxReplicas bounds the function replicas the autoscaler may run.
	MaxReplicas int
	// ChaosKillEvery, when > 0, SIGKILLs a random replica at that period.
	ChaosKillEvery time.Duration
	// ChaosKillMidShard SIGKILLs a random replica this many times, each as
	// soon as some shard's first chunk is published: a kill that lands
	// mid-shard whatever the processing speed.
	ChaosKillMidShard int
	// Corrupt is how many samples get a broken JPEG.
	Corrupt int
	// DataDir holds the JetStream store; a temp dir when empty.
	DataDir string
	// ReplicaCommand is the argv prefix that starts a function replica
	// (the sluice binary and "fn", "serve"); Run appends the wiring flags.
	ReplicaCommand []string
	// ReplicaCPUs is GOMAXPROCS per replica: replicas are the unit of scale.
	ReplicaCPUs int
	// ChunkMaxBytes caps one output chunk.
	ChunkMaxBytes int
	// Pipeline names the preprocessing pipeline.
	Pipeline string
	// MinReplicas is the job's min_replicas: with MaxReplicas, a fixed
	// replica count for measurements.
	MinReplicas int
	// Cache is the replicas' shard cache; the zero value caches nothing.
	Cache shardcache.Config
	// SlowS3, when not zero, puts the replicas' S3 behind a loopback link
	// with this latency and bandwidth cap, as a remote S3 would be.
	SlowS3 slowlink.Options
}

// Datasets are the synthetic dataset kinds the demo can generate.
var Datasets = []string{"image", "text", "tabular"}

// DefaultOptions are the image demo's, tuned so that on a 2-core machine
// one replica cannot feed the simulated trainer, and the run ends in
// under half a minute.
func DefaultOptions() Options {
	return Options{
		Dataset: "image", Samples: 2000, Shards: 24, Epochs: 3, BatchSize: 32, Seed: 1,
		StepTime: 45 * time.Millisecond, MaxReplicas: 3, ReplicaCPUs: 1,
		ChunkMaxBytes: 4 << 20, Pipeline: "imagenet-train",
	}
}

// DatasetDefaults returns DefaultOptions adjusted for a dataset kind: its
// built-in pipeline, and a size and trainer speed that keep the run under
// half a minute. Text and tabular samples are cheap to preprocess, so the
// simulated trainer eats bigger batches faster.
func DatasetDefaults(dataset string) Options {
	o := DefaultOptions()
	o.Dataset = dataset
	switch dataset {
	case "text":
		o.Pipeline, o.Samples, o.Shards, o.BatchSize, o.StepTime = "text-wordpiece", 20000, 16, 128, 40*time.Millisecond
	case "tabular":
		o.Pipeline, o.Samples, o.Shards, o.BatchSize, o.StepTime = "criteo", 100000, 16, 2048, 50*time.Millisecond
	}
	return o
}

// Validate names the first option out of range (the CLI checks flags
// itself, with flag names; this guards library callers).
func (o Options) Validate() error {
	switch {
	case o.Dataset != "image" && o.Dataset != "text" && o.Dataset != "tabular":
		return fmt.Errorf("dataset %q: want image, text or tabular", o.Dataset)
	case o.Epochs < 1:
		return fmt.Errorf("epochs %d: want >= 1", o.Epochs)
	case o.BatchSize < 1:
		return fmt.Errorf("batch size %d: want >= 1", o.BatchSize)
	case o.MaxReplicas < 1:
		return fmt.Errorf("max replicas %d: want >= 1", o.MaxReplicas)
	case len(o.ReplicaCommand) == 0:
		return fmt.Errorf("replica command is empty")
	}
	return nil
}
