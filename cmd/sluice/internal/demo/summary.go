package demo

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// ScaleEvent is one replica-count change, relative to the run's start.
type ScaleEvent struct {
	TS       float64 `json:"t_s"`
	Replicas int     `json:"replicas"`
	Reason   string  `json:"reason"`
}

// Summary is what `sluice demo --json` prints. Counts are over all epochs.
type Summary struct {
	Job string `json:"job"`
	// State is the job's final state (succeeded, failed) and Reason why it failed.
	State            string `json:"state"`
	Reason           string `json:"reason,omitempty"`
	SamplesExpected  int64  `json:"samples_expected"`
	SamplesDelivered int64  `json:"samples_delivered"`
	// Duplicates counts samples the trainer got more than once.
	Duplicates int64 `json:"duplicates"`
	// Lost counts samples neither delivered nor reported as failed.
	Lost          int64               `json:"lost"`
	FailedSamples []wire.FailedSample `json:"failed_samples"`
	// FailedSamplesOmitted are failures beyond those the agent lists.
	FailedSamplesOmitted int64 `json:"failed_samples_omitted,omitempty"`
	// FailedShards are shard tasks given up on (each names its shard key).
	FailedShards          []wire.FailedSample `json:"failed_shards"`
	Epochs                int                 `json:"epochs"`
	ThroughputSamplesPerS float64             `json:"throughput_samples_per_s"`
	// StallFraction is the share of the trainer's time spent getting
	// batches (waiting for data, and the HTTP transfer itself);
	// AgentStallFraction the share the agent had no batch ready for it.
	StallFraction      float64 `json:"stall_fraction"`
	AgentStallFraction float64 `json:"agent_stall_fraction"`
	TimeToFirstBatchS  float64 `json:"time_to_first_batch_s"`
	WallS              float64 `json:"wall_s"`
	ReplicasMax        int     `json:"replicas_max"`
	ReplicasFinal      int     `json:"replicas_final"`
	ReplicasKilled     int     `json:"replicas_killed"`
	// ReplicaCPUS is the CPU time the replicas used, in seconds.
	ReplicaCPUS      float64      `json:"replica_cpu_s"`
	TaskRedeliveries int          `json:"task_redeliveries"`
	DuplicateChunks  int64        `json:"duplicate_chunks_dropped"`
	ScaleEvents      []ScaleEvent `json:"scale_events"`
	// EpochS is each epoch's time at the trainer: from the previous
	// epoch's last batch (the first epoch: from submission) to its own.
	EpochS []float64 `json:"epoch_s"`
	// DatasetBytes is the shards' size; S3BytesPerEpoch, CacheHits and
	// CacheMisses are the job status's (where the replicas read shards);
	// S3LinkBytes counts the bytes through the slow S3 link, when one is
	// set up.
	DatasetBytes    int64   `json:"dataset_bytes"`
	S3BytesPerEpoch []int64 `json:"s3_bytes_per_epoch,omitempty"`
	CacheHits       int64   `json:"cache_hits,omitempty"`
	CacheMisses     int64   `json:"cache_misses,omitempty"`
	CacheMemoryHits int64   `json:"cache_memory_hits,omitempty"`
	S3LinkBytes     int64   `json:"s3_link_bytes,omitempty"`
}

// Problems says, one line each, what makes the run a failure: no sample
// preprocessed at all (with the first reason given), samples lost or
// duplicated, replicas left running. None means the run is OK; failed
// samples alone (a corrupt JPEG) are not a problem while others get
// through. `sluice demo` exits non-zero when there are any.
func (s Summary) Problems() []string {
	var p []string
	if s.State != "" && s.State != string(wire.JobSucceeded) {
		p = append(p, fmt.Sprintf("job %s: %s", s.State, s.Reason))
	}
	if s.SamplesExpected > 0 && s.SamplesDelivered == 0 && s.State != string(wire.JobFailed) {
		p = append(p, "no sample could be preprocessed: "+s.firstFailure())
	}
	if s.Lost != 0 {
		p = append(p, fmt.Sprintf("%d samples lost (neither delivered nor reported as failed)", s.Lost))
	}
	if s.Duplicates != 0 {
		p = append(p, fmt.Sprintf("%d samples delivered more than once", s.Duplicates))
	}
	if s.ReplicasFinal != 0 {
		p = append(p, fmt.Sprintf("%d replicas still running at the end", s.ReplicasFinal))
	}
	return p
}

// failedCount is every failure the agent reported, listed or not.
func (s Summary) failedCount() int64 { return int64(len(s.FailedSamples)) + s.FailedSamplesOmitted }

// firstFailure says why the first sample (or shard) failed, and how many
// did.
func (s Summary) firstFailure() string {
	switch {
	case len(s.FailedSamples) > 0:
		f := s.FailedSamples[0]
		return fmt.Sprintf("%d of %d samples failed; the first, epoch %d sample %s: %s",
			s.failedCount(), s.SamplesExpected, f.Epoch, f.Key, f.Reason)
	case len(s.FailedShards) > 0:
		f := s.FailedShards[0]
		return fmt.Sprintf("%d shard tasks failed; the first, shard %s: %s", len(s.FailedShards), f.Key, f.Reason)
	}
	return fmt.Sprintf("0 of %d samples delivered and no failure reported", s.SamplesExpected)
}

// WriteText prints the summary for a person.
func (s Summary) WriteText(w io.Writer) {
	problems := s.Problems()
	verdict := "OK"
	if len(problems) > 0 {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "\njob %s: %s\n", s.Job, verdict)
	for _, p := range problems {
		fmt.Fprintf(w, "  problem      %s\n", p)
	}
	fmt.Fprintf(w, "  samples      %d delivered of %d expected, %d failed, %d lost, %d duplicates (%d epochs)\n",
		s.SamplesDelivered, s.SamplesExpected, s.failedCount(), s.Lost, s.Duplicates, s.Epochs)
	fmt.Fprintf(w, "  speed        %.1f samples/s, trainer waited %.1f%% of the time (%.1f%% with no batch ready), first batch after %.2fs, %.1fs in all\n",
		s.ThroughputSamplesPerS, 100*s.StallFraction, 100*s.AgentStallFraction, s.TimeToFirstBatchS, s.WallS)
	fmt.Fprintf(w, "  replicas     max %d, final %d, killed %d, %.1f CPU-seconds; %d task redeliveries, %d duplicate chunks dropped\n",
		s.ReplicasMax, s.ReplicasFinal, s.ReplicasKilled, s.ReplicaCPUS, s.TaskRedeliveries, s.DuplicateChunks)
	for i, f := range s.FailedSamples {
		if i == 5 {
			fmt.Fprintf(w, "  ... and %d more failed samples (see --json)\n", s.failedCount()-5)
			break
		}
		fmt.Fprintf(w, "  failed       epoch %d, sample %s: %s\n", f.Epoch, f.Key, f.Reason)
	}
	for _, f := range s.FailedShards {
		fmt.Fprintf(w, "  failed shard %s: %s\n", f.Key, f.Reason)
	}
	fmt.Fprintln(w, "  scaling:")
	for _, e := range s.ScaleEvents {
		fmt.Fprintf(w, "    %6.1fs -> %d  %s\n", e.TS, e.Replicas, e.Reason)
	}
}

// Progress is a live snapshot for the status line.
type Progress struct {
	Elapsed       time.Duration
	Delivered     int64
	Expected      int64
	SamplesPerS   float64
	StallFraction float64
	Replicas      int
	Killed        int
}

// Line renders the snapshot as one status line.
func (p Progress) Line() string {
	pct := 0.0
	if p.Expected > 0 {
		pct = 100 * float64(p.Delivered) / float64(p.Expected)
	}
	const width = 20
	filled := int(pct / 100 * width)
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	s := fmt.Sprintf("[%s] %5.1f%% %d/%d samples  %6.1f/s  stall %4.1f%%  replicas %d  %5.1fs",
		bar, pct, p.Delivered, p.Expected, p.SamplesPerS, 100*p.StallFraction, p.Replicas, p.Elapsed.Seconds())
	if p.Killed > 0 {
		s += fmt.Sprintf("  killed %d", p.Killed)
	}
	return s
}
