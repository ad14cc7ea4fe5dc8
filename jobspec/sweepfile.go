package jobspec

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/internal/safeyaml"
	"github.com/sluice-project/sluice/wire"
)

// ParseSweep reads a sweep file (YAML, so JSON too; at most
// MaxFileBytes, without aliases) and checks the sweep and each job it
// makes (Check, with defaults), returning every problem at once.
// Its keys are the JSON names of wire.SweepSpec:
//
//	id: lr-sweep
//	dataset: s3://datasets/imagenet/train/
//	pipeline: imagenet-train     # or a pipeline spec inline, as in a job spec
//	batch_size: 256
//	epochs: 2
//	seed: 7
//	max_replicas: 16
//	trainer_rate: 2000           # samples/s of one trial's trainer: sizes the pre-warm
//	count: 12                    # 12 identical trials t0..t11, or one by one:
//	# trials:
//	#   - {name: lr-1e-3}
//	#   - {name: lr-1e-2, seed: 8}           # another seed: another job
//	#   - {name: aug, pipeline: imagenet-val}
func ParseSweep(data []byte) (wire.SweepSpec, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return wire.SweepSpec{}, errors.New("empty sweep spec")
	}
	var f struct {
		ID                string            `yaml:"id"`
		Dataset           string            `yaml:"dataset"`
		Sources           []wire.SourceSpec `yaml:"sources"`
		EpochShards       int               `yaml:"epoch_shards"`
		Pipeline          yaml.Node         `yaml:"pipeline"`
		BatchSize         int               `yaml:"batch_size"`
		Epochs            int               `yaml:"epochs"`
		Seed              uint64            `yaml:"seed"`
		MinReplicas       int               `yaml:"min_replicas"`
		MaxReplicas       int               `yaml:"max_replicas"`
		Weight            float64           `yaml:"weight"`
		ChunkMaxBytes     string            `yaml:"chunk_max_bytes"`
		OutputBufferBytes string            `yaml:"output_buffer_bytes"`
		TrainerRate       float64           `yaml:"trainer_rate"`
		Count             int               `yaml:"count"`
		Trials            []trialFile       `yaml:"trials"`
	}
	if err := safeyaml.DecodeStrict("sweep spec", data, MaxFileBytes, &f); err != nil {
		return wire.SweepSpec{}, fmt.Errorf("reading sweep spec: %w", err)
	}
	var probs []string
	s := wire.SweepSpec{ID: f.ID, Dataset: f.Dataset, Sources: f.Sources, EpochShards: f.EpochShards, BatchSize: f.BatchSize, Epochs: f.Epochs, Seed: f.Seed,
		MinReplicas: f.MinReplicas, MaxReplicas: f.MaxReplicas, Weight: f.Weight, TrainerRate: f.TrainerRate, Count: f.Count}
	var err error
	if s.Pipeline, err = pipelineText(&f.Pipeline); err != nil {
		probs = append(probs, "pipeline: "+err.Error())
	}
	if f.ChunkMaxBytes != "" {
		n, err := bytesize.Parse(f.ChunkMaxBytes)
		if err != nil {
			probs = append(probs, "chunk_max_bytes: "+err.Error())
		}
		s.ChunkMaxBytes = int(n)
	}
	if f.OutputBufferBytes != "" {
		if s.OutputBufferBytes, err = bytesize.Parse(f.OutputBufferBytes); err != nil {
			probs = append(probs, "output_buffer_bytes: "+err.Error())
		}
	}
	for i, t := range f.Trials {
		tr := wire.Trial{Name: t.Name, Dataset: t.Dataset, Sources: t.Sources, Seed: t.Seed, Epochs: t.Epochs}
		if tr.Pipeline, err = pipelineText(&t.Pipeline); err != nil {
			probs = append(probs, fmt.Sprintf("trials: [%d] pipeline: %v", i, err))
		}
		s.Trials = append(s.Trials, tr)
	}
	for _, p := range s.Problems() {
		probs = append(probs, p.Error())
	}
	if len(probs) == 0 {
		for _, j := range s.Jobs() {
			if err := Check(j.WithDefaults()); err != nil {
				probs = append(probs, err.Error())
			}
		}
	}
	if len(probs) > 0 {
		return wire.SweepSpec{}, fmt.Errorf("sweep %s: %s", s.ID, strings.Join(probs, "; "))
	}
	return s, nil
}

type trialFile struct {
	Name     string            `yaml:"name"`
	Dataset  string            `yaml:"dataset"`
	Sources  []wire.SourceSpec `yaml:"sources"`
	Pipeline yaml.Node         `yaml:"pipeline"`
	Seed     *uint64           `yaml:"seed"`
	Epochs   int               `yaml:"epochs"`
}

// pipelineText is a pipeline given by name, or inline as a mapping kept
// as the YAML document the functions parse; "" where none is given.
func pipelineText(n *yaml.Node) (string, error) {
	switch n.Kind {
	case 0:
		return "", nil
	case yaml.ScalarNode:
		return n.Value, nil
	case yaml.MappingNode:
		out, err := yaml.Marshal(n)
		if err != nil {
			return "", fmt.Errorf("re-encoding the inline pipeline spec: %w", err)
		}
		return string(out), nil
	}
	return "", errors.New("want a built-in pipeline name or a pipeline spec (a mapping)")
}
