package planner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// ErrNoRate is returned by Get when nothing was learned for the pipeline.
var ErrNoRate = errors.New("planner: no per-replica rate learned for the pipeline yet")

// Source says which record an Estimate came from.
const (
	// SourceDataset is a rate learned on the same pipeline and dataset.
	SourceDataset = "dataset"
	// SourcePipeline is the pipeline's rate over every dataset.
	SourcePipeline = "pipeline"
)

// Estimate is a kept rate and where it came from.
type Estimate struct {
	Rate
	Source string `json:"source"`
	Key    string `json:"key"`
}

var plainName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// pipelineKey names a pipeline in the bucket: a built-in's name as it is,
// an inline spec by its text's hash.
func pipelineKey(pipeline string) string {
	if plainName.MatchString(pipeline) {
		return "p." + pipeline
	}
	return "p.spec-" + digest(pipeline)
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

// Keys are the bucket keys of pipeline over every dataset and of
// pipeline on dataset (empty if dataset is).
func Keys(pipeline, dataset string) (all, onDataset string) {
	all = pipelineKey(pipeline)
	if dataset != "" {
		onDataset = all + ".ds-" + digest(dataset)
	}
	return all, onDataset
}

// Store reads and writes learned rates in wire.PlansBucket.
type Store struct {
	kv jetstream.KeyValue // nil: the bucket does not exist yet
}

// Open opens the bucket (streams.Ensure creates it). Where it does not
// exist yet (no controller ran on this NATS) the store has learned
// nothing: Get says ErrNoRate, Record fails naming the bucket.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.KeyValue(ctx, wire.PlansBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return &Store{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening key-value bucket %s: %w", wire.PlansBucket, err)
	}
	return &Store{kv: kv}, nil
}

// NewStore uses kv as the bucket.
func NewStore(kv jetstream.KeyValue) *Store { return &Store{kv: kv} }

// Get returns the rate learned for pipeline on dataset if there is one,
// else the pipeline's over every dataset, else ErrNoRate.
func (s *Store) Get(ctx context.Context, pipeline, dataset string) (Estimate, error) {
	if s.kv == nil {
		return Estimate{}, ErrNoRate
	}
	all, on := Keys(pipeline, dataset)
	for _, k := range []struct{ key, source string }{{on, SourceDataset}, {all, SourcePipeline}} {
		if k.key == "" {
			continue
		}
		r, _, err := s.read(ctx, k.key)
		if err != nil {
			return Estimate{}, err
		}
		if r.PerReplica > 0 {
			return Estimate{Rate: r, Source: k.source, Key: k.key}, nil
		}
	}
	return Estimate{}, ErrNoRate
}

// Record folds o into the rates of pipeline and of pipeline on dataset.
// Controllers record concurrently: each update is a compare-and-set on
// the key's revision, retried a few times.
func (s *Store) Record(ctx context.Context, pipeline, dataset string, o Observation) error {
	if s.kv == nil {
		return fmt.Errorf("recording a rate: key-value bucket %s does not exist (a controller creates it)", wire.PlansBucket)
	}
	all, on := Keys(pipeline, dataset)
	for _, key := range []string{on, all} {
		if key == "" {
			continue
		}
		if err := s.update(ctx, key, o); err != nil {
			return err
		}
	}
	return nil
}

const casTries = 5

func (s *Store) update(ctx context.Context, key string, o Observation) error {
	var err error
	for range casTries {
		var r Rate
		var rev uint64
		if r, rev, err = s.read(ctx, key); err != nil {
			return err
		}
		data, merr := json.Marshal(Learn(r, o))
		if merr != nil {
			return fmt.Errorf("encoding rate %s: %w", key, merr)
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, data)
		} else {
			_, err = s.kv.Update(ctx, key, data, rev)
		}
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("recording rate %s: %w", key, err)
	}
	return nil
}

// read returns the rate under key and its revision; zero and 0 if none.
func (s *Store) read(ctx context.Context, key string) (Rate, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Rate{}, 0, nil
	}
	if err != nil {
		return Rate{}, 0, fmt.Errorf("reading rate %s: %w", key, err)
	}
	var r Rate
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Rate{}, 0, fmt.Errorf("decoding rate %s: %w", key, err)
	}
	return r, e.Revision(), nil
}

// PerReplica is the rate source of a ByRate planner: the rate learned
// for spec's pipeline on its dataset, else over every dataset, 0 when
// nothing was learned yet (the planner then falls back to min_replicas).
func (s *Store) PerReplica(ctx context.Context, spec wire.JobSpec) (float64, error) {
	e, err := s.Get(ctx, spec.Pipeline, spec.Dataset)
	if errors.Is(err, ErrNoRate) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return e.PerReplica, nil
}
