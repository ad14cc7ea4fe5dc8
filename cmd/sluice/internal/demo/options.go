package demo

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/slowlink"
)

// Options shape a demo run. Zero values are replaced by DefaultOptions'.
type Options struct {
	// Dataset is the kind of synthetic dataset: image, text, tabular or lm
	// (text packed for causal LM training: a sample is a row).
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
var Datasets = []string{"image", "text", "tabular", "lm"}

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
	case "lm":
		o.Pipeline, o.Samples, o.Shards, o.BatchSize, o.StepTime = "lm-pretrain", 20000, 16, 16, 40*time.Millisecond
	case "tabular":
		o.Pipeline, o.Samples, o.Shards, o.BatchSize, o.StepTime = "criteo", 100000, 16, 2048, 50*time.Millisecond
	}
	return o
}

// Validate names every option out of range, by the `sluice demo` flag
// that sets it: the command reports these as its usage errors, and Run
// refuses the same options from any other caller. The bounds of --shards
// and --corrupt depend on --samples and are left unchecked while it is
// itself out of range, so that only the real problem is reported.
func (o Options) Validate() error {
	var errs []error
	intIn := func(name string, v, lo, hi int) {
		if v < lo || v > hi {
			errs = append(errs, fmt.Errorf("--%s %d: want %d..%d", name, v, lo, hi))
		}
	}
	durationIn := func(name string, v, lo, hi time.Duration) {
		if v < lo || v > hi {
			errs = append(errs, fmt.Errorf("--%s %v: want %v..%v", name, v, lo, hi))
		}
	}
	samplesOK := o.Samples >= 1 && o.Samples <= MaxSamples
	intIn("samples", o.Samples, 1, MaxSamples)
	if samplesOK {
		intIn("shards", o.Shards, 1, min(MaxShards, o.Samples))
	}
	intIn("epochs", o.Epochs, 1, 1000)
	intIn("batch-size", o.BatchSize, 1, 65536)
	durationIn("step-time", o.StepTime, 0, time.Minute)
	intIn("max-replicas", o.MaxReplicas, 1, 64)
	durationIn("chaos-kill-every", o.ChaosKillEvery, 0, time.Hour)
	intIn("chaos-kill-mid-shard", o.ChaosKillMidShard, 0, 1000)
	if samplesOK {
		intIn("corrupt", o.Corrupt, 0, o.Samples)
	}
	intIn("chunk-max-bytes", o.ChunkMaxBytes, 64<<10, 64<<20)
	if !slices.Contains(Datasets, o.Dataset) {
		errs = append(errs, fmt.Errorf("--dataset %q: want one of %s", o.Dataset, strings.Join(Datasets, ", ")))
	}
	if len(o.ReplicaCommand) == 0 {
		errs = append(errs, errors.New("replica command is empty"))
	}
	return errors.Join(errs...)
}

// The largest synthetic dataset: samples, and shards (at most one a sample).
const (
	MaxSamples = 1_000_000
	MaxShards  = 10_000
)
