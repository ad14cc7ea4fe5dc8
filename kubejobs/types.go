package kubejobs

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-project/sluice/wire"
)

// Group and Version of the resources (deploy/knative/kube-jobs/crds.yaml).
const (
	Group   = "sluice.dev"
	Version = "v1alpha1"
)

// Finalizer keeps an object until its job is cancelled and removed from
// the job store.
const Finalizer = "sluice.dev/job-store"

// TeamKeySecretKey is the key of a job's team key in its Secret (hex, as
// `sluice job submit` writes a team key file): mount it and point
// SLUICE_TEAM_KEY_FILE at it.
const TeamKeySecretKey = "teamkey"

var (
	// JobsResource is SluiceJob's resource.
	JobsResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "sluicejobs"}
	// SweepsResource is SluiceSweep's resource.
	SweepsResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "sluicesweeps"}
)

// States an object shows: the job store's, capitalised as Kubernetes
// conditions are, and Pending before the job is in the store.
const (
	StatePending   = "Pending"
	StateQueued    = "Queued"
	StateRunning   = "Running"
	StateSucceeded = "Succeeded"
	StateFailed    = "Failed"
	StateCancelled = "Cancelled"
)

var stateNames = map[wire.JobState]string{
	wire.JobQueued: StateQueued, wire.JobRunning: StateRunning, wire.JobSucceeded: StateSucceeded,
	wire.JobFailed: StateFailed, wire.JobCancelled: StateCancelled,
}

// stateOf is the object's name for a job store state.
func stateOf(s wire.JobState) string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return StatePending
}

// JobSpec is a SluiceJob's spec: wire.JobSpec's fields but the id (the
// object's namespace and name), named as Kubernetes names fields.
type JobSpec struct {
	Dataset           string   `json:"dataset,omitempty"`
	Sources           []Source `json:"sources,omitempty"`
	EpochShards       int      `json:"epochShards,omitempty"`
	Pipeline          string   `json:"pipeline,omitempty"`
	BatchSize         int      `json:"batchSize"`
	Epochs            int      `json:"epochs"`
	Seed              int64    `json:"seed,omitempty"`
	MinReplicas       int      `json:"minReplicas,omitempty"`
	MaxReplicas       int      `json:"maxReplicas,omitempty"`
	InitialReplicas   int      `json:"initialReplicas,omitempty"`
	Weight            float64  `json:"weight,omitempty"`
	Readers           []string `json:"readers,omitempty"`
	ChunkMaxBytes     int      `json:"chunkMaxBytes,omitempty"`
	OutputBufferBytes int64    `json:"outputBufferBytes,omitempty"`
	// Columns maps sample members to a Parquet dataset's columns
	// (wire.JobSpec.Columns).
	Columns map[string]string `json:"columns,omitempty"`
}

// Source is one dataset of a mixed SluiceJob or SluiceSweep
// (wire.SourceSpec).
type Source struct {
	Dataset  string  `json:"dataset"`
	Weight   float64 `json:"weight"`
	Pipeline string  `json:"pipeline,omitempty"`
	Repeat   float64 `json:"repeat,omitempty"`
	Choose   int     `json:"choose,omitempty"`
}

// wireSources is sources as wire's; nil for none, as a spec without
// sources decodes.
func wireSources(sources []Source) []wire.SourceSpec {
	if len(sources) == 0 {
		return nil
	}
	out := make([]wire.SourceSpec, len(sources))
	for i, s := range sources {
		out[i] = wire.SourceSpec{Dataset: s.Dataset, Weight: s.Weight, Pipeline: s.Pipeline, Repeat: s.Repeat, Choose: s.Choose}
	}
	return out
}

// Wire is the job spec submitted for the object: id and fields.
func (s JobSpec) Wire(id string) wire.JobSpec {
	return wire.JobSpec{
		ID: id, Dataset: s.Dataset, Sources: wireSources(s.Sources), EpochShards: s.EpochShards,
		Pipeline: s.Pipeline, BatchSize: s.BatchSize, Epochs: s.Epochs,
		Seed: uint64(s.Seed), MinReplicas: s.MinReplicas, MaxReplicas: s.MaxReplicas,
		InitialReplicas: s.InitialReplicas, Weight: s.Weight, Readers: s.Readers,
		ChunkMaxBytes: s.ChunkMaxBytes, OutputBufferBytes: s.OutputBufferBytes, Columns: s.Columns,
	}
}

// JobStatus is a SluiceJob's status, what `kubectl get sluicejobs` shows.
// It holds no secret: the team key is in the Secret it names.
type JobStatus struct {
	JobID              string `json:"jobID,omitempty"`
	State              string `json:"state,omitempty"`
	Reason             string `json:"reason,omitempty"`
	TeamKeySecret      string `json:"teamKeySecret,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	Submitted          string `json:"submitted,omitempty"`
	Updated            string `json:"updated,omitempty"`
	EpochsDone         int    `json:"epochsDone"`
	TasksTotal         int    `json:"tasksTotal"`
	TasksDone          int    `json:"tasksDone"`
	TasksFailed        int    `json:"tasksFailed"`
	SamplesProcessed   int64  `json:"samplesProcessed"`
	SamplesFailed      int64  `json:"samplesFailed"`
	SamplesPerSecond   int64  `json:"samplesPerSecond"`
	Stall              string `json:"stall,omitempty"`
	Replicas           int    `json:"replicas"`
	ReadyReplicas      int    `json:"readyReplicas"`
}

// SweepSpec is a SluiceSweep's spec: wire.SweepSpec's fields but the id.
type SweepSpec struct {
	Dataset           string   `json:"dataset,omitempty"`
	Sources           []Source `json:"sources,omitempty"`
	EpochShards       int      `json:"epochShards,omitempty"`
	Pipeline          string   `json:"pipeline,omitempty"`
	BatchSize         int      `json:"batchSize"`
	Epochs            int      `json:"epochs"`
	Seed              int64    `json:"seed,omitempty"`
	MinReplicas       int      `json:"minReplicas,omitempty"`
	MaxReplicas       int      `json:"maxReplicas,omitempty"`
	Weight            float64  `json:"weight,omitempty"`
	ChunkMaxBytes     int      `json:"chunkMaxBytes,omitempty"`
	OutputBufferBytes int64    `json:"outputBufferBytes,omitempty"`
	TrainerRate       float64  `json:"trainerRate,omitempty"`
	Count             int      `json:"count,omitempty"`
	Trials            []Trial  `json:"trials,omitempty"`
}

// Trial is one trial of a SluiceSweep (wire.Trial).
type Trial struct {
	Name     string   `json:"name"`
	Dataset  string   `json:"dataset,omitempty"`
	Sources  []Source `json:"sources,omitempty"`
	Pipeline string   `json:"pipeline,omitempty"`
	Seed     *int64   `json:"seed,omitempty"`
	Epochs   int      `json:"epochs,omitempty"`
}

// Wire is the sweep spec submitted for the object.
func (s SweepSpec) Wire(id string) wire.SweepSpec {
	out := wire.SweepSpec{
		ID: id, Dataset: s.Dataset, Sources: wireSources(s.Sources), EpochShards: s.EpochShards,
		Pipeline: s.Pipeline, BatchSize: s.BatchSize, Epochs: s.Epochs,
		Seed: uint64(s.Seed), MinReplicas: s.MinReplicas, MaxReplicas: s.MaxReplicas, Weight: s.Weight,
		ChunkMaxBytes: s.ChunkMaxBytes, OutputBufferBytes: s.OutputBufferBytes, TrainerRate: s.TrainerRate,
		Count: s.Count,
	}
	for _, t := range s.Trials {
		wt := wire.Trial{Name: t.Name, Dataset: t.Dataset, Sources: wireSources(t.Sources), Pipeline: t.Pipeline, Epochs: t.Epochs}
		if t.Seed != nil {
			seed := uint64(*t.Seed)
			wt.Seed = &seed
		}
		out.Trials = append(out.Trials, wt)
	}
	return out
}

// SweepStatus is a SluiceSweep's status.
type SweepStatus struct {
	SweepID            string          `json:"sweepID,omitempty"`
	State              string          `json:"state,omitempty"`
	Reason             string          `json:"reason,omitempty"`
	TeamKeySecret      string          `json:"teamKeySecret,omitempty"`
	ObservedGeneration int64           `json:"observedGeneration,omitempty"`
	JobCount           int             `json:"jobCount"`
	Jobs               []SweepJobState `json:"jobs,omitempty"`
	TrialsDone         int             `json:"trialsDone"`
	EpochsDone         int             `json:"epochsDone"`
	SamplesPerSecond   int64           `json:"samplesPerSecond"`
	Stall              string          `json:"stall,omitempty"`
	Replicas           int             `json:"replicas"`
}

// SweepJobState is one job of a sweep as its status lists it.
type SweepJobState struct {
	JobID  string   `json:"jobID"`
	State  string   `json:"state"`
	Trials []string `json:"trials,omitempty"`
}

// IDSeparator joins an object's namespace and name into its job (or
// sweep) id. Neither a namespace nor a name allowed by the CRDs holds
// it, so two objects never map to one id, and a job submitted with the
// CLI gets an id with it only if its user chose one.
const IDSeparator = "_"

// ObjectID is the job store id of the object namespace/name: namespace_name.
// It fails where the id would pass max characters (64 for a job, 60 for
// a sweep, whose jobs add "-<index>").
func ObjectID(namespace, name string, max int) (string, error) {
	id := namespace + IDSeparator + name
	if err := wire.ValidateJobID(id); err != nil || len(id) > max {
		return "", fmt.Errorf("its id <namespace>%s<name> would be %q, %d characters: want at most %d of [A-Za-z0-9_-]; use a shorter name",
			IDSeparator, id, len(id), max)
	}
	return id, nil
}
