package wire

import (
	"fmt"
	"time"
)

// JobState is where a job is in its life. The transitions, and who makes
// them:
//
//	queued -> running            the controller that takes the job's lease
//	running -> succeeded|failed  its owner, once every task is settled and
//	                             every reader has taken every chunk
//	queued|running -> cancelled  `sluice job cancel` (compare-and-set on the record)
//
// The terminal states stay until `sluice job delete`.
type JobState string

const (
	JobQueued    JobState = "queued"
	JobRunning   JobState = "running"
	JobSucceeded JobState = "succeeded"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

// Terminal reports whether no more work happens for a job in state s.
func (s JobState) Terminal() bool {
	return s == JobSucceeded || s == JobFailed || s == JobCancelled
}

// Lease says which controller owns a job, stored in LeasesBucket under the
// job id and changed only by compare-and-set on the entry's revision. An
// owner renews it well before Expires; another controller may take it once
// Expires has passed.
type Lease struct {
	Owner   string    `json:"owner"`
	Expires time.Time `json:"expires"`
	// Acquired is when Owner took the lease (a renewal keeps it).
	Acquired time.Time `json:"acquired"`
}

// Expired reports whether the lease may be taken over at now.
func (l Lease) Expired(now time.Time) bool { return !now.Before(l.Expires) }

// TaskCounts sum up a job's shard tasks over all epochs.
type TaskCounts struct {
	Total    int `json:"total"`
	Done     int `json:"done"`
	Failed   int `json:"failed"`
	InFlight int `json:"in_flight"`
	Pending  int `json:"pending"`
	// Redeliveries is sends of a task beyond its first.
	Redeliveries int `json:"redeliveries"`
}

// ReaderStatus is one reader's progress, from its latest demand signal.
type ReaderStatus struct {
	SamplesDelivered int64     `json:"samples_delivered"`
	StallFraction    float64   `json:"stall_fraction"`
	ConsumedPerS     float64   `json:"consumed_per_s"`
	Done             bool      `json:"done"`
	Seen             time.Time `json:"seen"`

	// GPUUtilization is the reader's GPU reading (nil: none read); Step
	// its trainer's mean step in the signal's window (zero: no step
	// reported in it).
	GPUUtilization *float64  `json:"gpu_utilization,omitempty"`
	Step           StepTimes `json:"step,omitzero"`
}

// MaxFailedShardsListed bounds JobStatus.FailedShards, so that a job
// whose every shard fails still has a status of one NATS message.
const MaxFailedShardsListed = 100

// JobStatus is the live progress of a job, written by its owning
// controller to StatusBucket about once a second; `sluice job status`
// reads it.
type JobStatus struct {
	Job     string    `json:"job"`
	State   JobState  `json:"state"`
	Reason  string    `json:"reason,omitempty"`
	Owner   string    `json:"owner,omitempty"`
	Updated time.Time `json:"updated"`

	Tasks TaskCounts `json:"tasks"`
	// TasksDonePerEpoch has one entry per epoch.
	TasksDonePerEpoch []int `json:"tasks_done_per_epoch"`
	// SamplesProcessed and SamplesFailed add up the functions' results.
	SamplesProcessed int64 `json:"samples_processed"`
	SamplesFailed    int64 `json:"samples_failed"`
	// SamplesExpected is the dataset's samples x epochs, 0 while unknown.
	SamplesExpected int64 `json:"samples_expected"`
	// FailedShards lists the first MaxFailedShardsListed tasks given up
	// on, then failed replays; Tasks.Failed and ReplaysFailed count them
	// all.
	FailedShards  []FailedSample `json:"failed_shards,omitempty"`
	ReplaysFailed int            `json:"replays_failed,omitempty"`
	// S3BytesPerEpoch and CacheBytesPerEpoch (one entry per epoch) say
	// where done tasks read their shards: S3, or the replicas' shard
	// caches; CacheHits and CacheMisses count the shards, CacheMemoryHits
	// the hits served from a replica's memory.
	S3BytesPerEpoch    []int64 `json:"s3_bytes_per_epoch,omitempty"`
	CacheBytesPerEpoch []int64 `json:"cache_bytes_per_epoch,omitempty"`
	CacheHits          int64   `json:"cache_hits,omitempty"`
	CacheMisses        int64   `json:"cache_misses,omitempty"`
	CacheMemoryHits    int64   `json:"cache_memory_hits,omitempty"`

	// Sources is a mixed job's progress per source, in the spec's order.
	Sources []SourceProgress `json:"sources,omitempty"`

	Readers       map[string]ReaderStatus `json:"readers,omitempty"`
	Replicas      int                     `json:"replicas"`
	ReadyReplicas int                     `json:"ready_replicas"`
	ScaleReason   string                  `json:"scale_reason,omitempty"`

	// Step is the job's mean step: the step times of every reader that
	// signalled lately and is not done, merged (weighted by their steps).
	Step StepTimes `json:"step,omitzero"`
}

// SourceProgress is one source's part of a mixed job's progress: its
// tasks over all epochs (its shards of an epoch, repeats included, times
// the epochs), those done, and the samples they produced.
type SourceProgress struct {
	Dataset          string `json:"dataset"`
	Tasks            int    `json:"tasks"`
	TasksDone        int    `json:"tasks_done"`
	SamplesProcessed int64  `json:"samples_processed"`
}

// DefaultReader is the reader a job has when its spec names none: the one
// trainer (agent) that the job's output is for.
const DefaultReader = "trainer"

// ValidateReader reports whether name can name a reader of a job's output;
// it becomes part of a consumer name, so the job id rules apply.
func ValidateReader(name string) error {
	if !jobIDPattern.MatchString(name) {
		return fmt.Errorf("reader %q: want 1-64 characters of [A-Za-z0-9_-]", name)
	}
	return nil
}
