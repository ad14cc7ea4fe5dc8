package wire

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// SweepsBucket holds sweep records (Sweep) under the sweep id.
const SweepsBucket = "sluice_sweeps"

// MaxTrialsPerJob is how many trials may share one job: a job has at most
// that many readers.
const MaxTrialsPerJob = 64

// SweepSpec is a hyperparameter sweep: trials, each a trainer that reads
// every sample of every epoch. Trials that would be fed the same samples
// (same dataset, pipeline, seed and epochs) share one job, each as one of
// its readers, so each chunk is preprocessed once for all of them; a
// trial that differs in any of these gets a job of its own. The fields
// other than Count and Trials are every trial's defaults and the jobs'
// settings.
type SweepSpec struct {
	ID      string `json:"id"`
	Dataset string `json:"dataset,omitempty"`
	// Sources and EpochShards mix datasets, as a job's do: trials that
	// read the same mixture (sources, weights and pipelines, in order)
	// share a job.
	Sources     []SourceSpec `json:"sources,omitempty"`
	EpochShards int          `json:"epoch_shards,omitempty"`
	Pipeline    string       `json:"pipeline"`
	// BatchSize is every trial's (a job cuts one batch size for all its
	// readers).
	BatchSize int    `json:"batch_size"`
	Epochs    int    `json:"epochs"`
	Seed      uint64 `json:"seed"`
	// MinReplicas, MaxReplicas, Weight, ChunkMaxBytes and
	// OutputBufferBytes are each job's (see JobSpec).
	MinReplicas       int     `json:"min_replicas,omitempty"`
	MaxReplicas       int     `json:"max_replicas,omitempty"`
	Weight            float64 `json:"weight,omitempty"`
	ChunkMaxBytes     int     `json:"chunk_max_bytes,omitempty"`
	OutputBufferBytes int64   `json:"output_buffer_bytes,omitempty"`
	// TrainerRate is the samples per second one trial's trainer takes
	// (0: unknown). The planner sizes each job's pre-warm from it.
	TrainerRate float64 `json:"trainer_rate,omitempty"`
	// Count is a number of identical trials, named t0, t1, ...; Trials
	// lists them one by one instead.
	Count  int     `json:"count,omitempty"`
	Trials []Trial `json:"trials,omitempty"`
}

// Trial is one trainer of a sweep; fields left zero take the sweep's.
type Trial struct {
	// Name is the trial's reader name in its job.
	Name    string `json:"name"`
	Dataset string `json:"dataset,omitempty"`
	// Sources is the trial's own mixture (a trial sets Dataset or
	// Sources to read other data than the sweep's).
	Sources  []SourceSpec `json:"sources,omitempty"`
	Pipeline string       `json:"pipeline,omitempty"`
	Seed     *uint64      `json:"seed,omitempty"`
	Epochs   int          `json:"epochs,omitempty"`
}

// Sweep is the record of a submitted sweep, stored in SweepsBucket.
type Sweep struct {
	Spec      SweepSpec  `json:"spec"`
	Jobs      []SweepJob `json:"jobs"`
	Submitted time.Time  `json:"submitted"`
}

// SweepJob is one job of a sweep and the trials that read it.
type SweepJob struct {
	ID     string   `json:"id"`
	Trials []string `json:"trials"`
	// Prewarm is the replicas the job starts with (JobSpec.InitialReplicas;
	// 0: the controller's default).
	Prewarm int `json:"prewarm,omitempty"`
}

// ResolvedTrials are the sweep's trials with the sweep's defaults filled
// in: Count of them named t0.. when Trials is empty.
func (s SweepSpec) ResolvedTrials() []Trial {
	trials := s.Trials
	if len(trials) == 0 {
		trials = make([]Trial, s.Count)
		for i := range trials {
			trials[i].Name = fmt.Sprintf("t%d", i)
		}
	}
	out := make([]Trial, len(trials))
	for i, t := range trials {
		if t.Dataset == "" && len(t.Sources) == 0 {
			t.Dataset, t.Sources = s.Dataset, s.Sources
		}
		if t.Pipeline == "" {
			t.Pipeline = s.Pipeline
		}
		if t.Seed == nil {
			seed := s.Seed
			t.Seed = &seed
		}
		if t.Epochs == 0 {
			t.Epochs = s.Epochs
		}
		out[i] = t
	}
	return out
}

// SweepJobID is the id of the sweep's i-th job.
func SweepJobID(sweep string, i int) string { return fmt.Sprintf("%s-%d", sweep, i) }

// trialKey is what trials that can share a job have in common: the
// samples they are fed depend on nothing else.
type trialKey struct {
	dataset, pipeline string
	sources           string // the mixture's JSON
	seed              uint64
	epochs            int
}

// Jobs groups the sweep's trials into jobs: trials with the same dataset,
// pipeline, seed and epochs share one, in the order of each group's first
// trial, each trial a reader named by it. Each job is independent of
// another: a different seed or pipeline produces other samples.
func (s SweepSpec) Jobs() []JobSpec {
	var keys []trialKey
	groups := map[trialKey][]Trial{}
	sources := map[trialKey][]SourceSpec{}
	for _, t := range s.ResolvedTrials() {
		mix, _ := json.Marshal(t.Sources) // plain data: cannot fail
		k := trialKey{t.Dataset, t.Pipeline, string(mix), *t.Seed, t.Epochs}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
			sources[k] = t.Sources
		}
		groups[k] = append(groups[k], t)
	}
	out := make([]JobSpec, len(keys))
	for i, k := range keys {
		readers := make([]string, len(groups[k]))
		for j, t := range groups[k] {
			readers[j] = t.Name
		}
		out[i] = JobSpec{
			ID: SweepJobID(s.ID, i), Dataset: k.dataset, Sources: sources[k], Pipeline: k.pipeline,
			BatchSize: s.BatchSize, Epochs: k.epochs, Seed: k.seed,
			MinReplicas: s.MinReplicas, MaxReplicas: s.MaxReplicas, Weight: s.Weight,
			Readers: readers, ChunkMaxBytes: s.ChunkMaxBytes, OutputBufferBytes: s.OutputBufferBytes,
		}
		if len(sources[k]) > 0 {
			out[i].EpochShards = s.EpochShards
		}
	}
	return out
}

// Problems lists what is wrong with the sweep itself: its id, its trials'
// names and counts. Each job's spec is checked on its own (JobSpec) when
// it is submitted.
func (s SweepSpec) Problems() []FieldError {
	var out []FieldError
	add := func(field, format string, args ...any) {
		out = append(out, FieldError{field, fmt.Sprintf(format, args...)})
	}
	// A job id is the sweep id and "-<index>".
	if ValidateJobID(s.ID) != nil || len(s.ID) > 60 {
		add("id", "%q: want 1-60 characters of [A-Za-z0-9_-]", s.ID)
	}
	switch {
	case s.Count != 0 && len(s.Trials) != 0:
		add("count", "%d: give count or trials, not both", s.Count)
	case len(s.Trials) == 0 && (s.Count < 1 || s.Count > 1000):
		add("count", "%d: want 1..1000 trials (or a list of trials)", s.Count)
	case len(s.Trials) > 1000:
		add("trials", "%d trials: want at most 1000", len(s.Trials))
	}
	seen := map[string]bool{}
	for i, t := range s.Trials {
		if ValidateReader(t.Name) != nil {
			add("trials", "[%d] name %q: want 1-64 characters of [A-Za-z0-9_-]", i, t.Name)
		} else if seen[t.Name] {
			add("trials", "[%d] name %q: named twice", i, t.Name)
		}
		seen[t.Name] = true
		if t.Epochs < 0 {
			add("trials", "[%d] epochs %d: want >= 1 (0: the sweep's)", i, t.Epochs)
		}
	}
	if !(s.TrainerRate >= 0) {
		add("trainer_rate", "%v: want samples per second >= 0", s.TrainerRate)
	}
	for _, j := range s.Jobs() {
		if len(j.Readers) > MaxTrialsPerJob {
			add("trials", "%d trials share job %s: want at most %d (split them by seed)", len(j.Readers), j.ID, MaxTrialsPerJob)
		}
	}
	return out
}

// Validate returns every problem of Problems as one error, or nil.
func (s SweepSpec) Validate() error {
	ps := s.Problems()
	if len(ps) == 0 {
		return nil
	}
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.Error()
	}
	return fmt.Errorf("sweep %s: %s", s.ID, strings.Join(msgs, "; "))
}
