package readerstate

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/sluice-project/sluice/traineragent/internal/demand"
	"github.com/sluice-project/sluice/wire"
)

// ErrStopped is returned by Next once Run has ended before the job was delivered.
var ErrStopped = errors.New("trainer agent stopped")

// Stats describe the agent's progress.
type Stats struct {
	SamplesArrived   int64 // samples received from functions (duplicates excluded)
	SamplesDelivered int64
	BatchesDelivered int64
	// ShedShards counts the shards this reader did not keep while it
	// lagged (assembly's lag.go): they were produced again when its ranks got there.
	ShedShards int64
	// DuplicateChunks counts output messages (chunks and shard ends)
	// dropped because the agent had already seen them.
	DuplicateChunks int64
	// FailedSamples are those that functions could not preprocess (from
	// ShardEnd messages), lost in a corrupt chunk, or reported with Fail:
	// the first MaxFailedSamplesListed; FailedSamplesOmitted counts the
	// rest.
	FailedSamples        []wire.FailedSample
	FailedSamplesOmitted int64
	// StallTime is the time the trainer spent waiting in Next, an ongoing
	// wait included; RunTime and TimeToFirstBatch count from New.
	StallTime        time.Duration
	RunTime          time.Duration
	TimeToFirstBatch time.Duration
	// Epochs is the number of epochs whose every batch was handed out.
	Epochs int
	// BufferedSamples are held by the agent: in ready batches, in partial
	// ones and in ranks' parts not taken yet.
	BufferedSamples int
	// WorldSize is the number of ranks served (0 until fixed), DropLast
	// their drop_last setting, DroppedSamples the samples of epochs'
	// partial last steps that drop_last left out.
	WorldSize      int
	DropLast       bool
	DroppedSamples int64
	// Ranks has what each rank took.
	Ranks []RankStats
	// Steps are the step times each rank's client reported, by rank.
	Steps []demand.RankSteps
}

// RankStats is what one rank took: parts (batches) and samples, the epoch
// and step of its last part (-1 before the first), and whether it was told
// that every step was delivered.
type RankStats struct {
	Rank    int   `json:"rank"`
	Batches int64 `json:"batches"`
	Samples int64 `json:"samples"`
	Epoch   int   `json:"epoch"`
	Step    int   `json:"step"`
	Ended   bool  `json:"ended"`
}

// MarshalJSON writes durations in seconds, for trainers in any language.
func (s Stats) MarshalJSON() ([]byte, error) {
	failed := s.FailedSamples
	if failed == nil {
		failed = []wire.FailedSample{}
	}
	ranks := s.Ranks
	if ranks == nil {
		ranks = []RankStats{}
	}
	return json.Marshal(struct {
		SamplesArrived     int64               `json:"samples_arrived"`
		SamplesDelivered   int64               `json:"samples_delivered"`
		BatchesDelivered   int64               `json:"batches_delivered"`
		DuplicateChunks    int64               `json:"duplicate_chunks"`
		ShedShards         int64               `json:"shed_shards"`
		FailedSamples      []wire.FailedSample `json:"failed_samples"`
		FailedOmitted      int64               `json:"failed_samples_omitted,omitempty"`
		StallS             float64             `json:"stall_s"`
		RunS               float64             `json:"run_s"`
		TimeToFirstBatchS  float64             `json:"time_to_first_batch_s"`
		Epochs             int                 `json:"epochs"`
		BufferedSamples    int                 `json:"buffered_samples"`
		StallFractionTotal float64             `json:"stall_fraction_total"`
		WorldSize          int                 `json:"world_size"`
		DropLast           bool                `json:"drop_last"`
		DroppedSamples     int64               `json:"dropped_samples"`
		Ranks              []RankStats         `json:"ranks"`
		Steps              []demand.RankSteps  `json:"steps"`
	}{
		s.SamplesArrived, s.SamplesDelivered, s.BatchesDelivered, s.DuplicateChunks, s.ShedShards, failed, s.FailedSamplesOmitted,
		s.StallTime.Seconds(), s.RunTime.Seconds(), s.TimeToFirstBatch.Seconds(), s.Epochs, s.BufferedSamples,
		ratio(s.StallTime, s.RunTime), s.WorldSize, s.DropLast, s.DroppedSamples, ranks, s.Steps,
	})
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return a.Seconds() / b.Seconds()
}

// ErrJobEnded means the job was cancelled, failed or deleted while the agent
// read it: its output is gone and nothing more will come.
var ErrJobEnded = errors.New("job ended")
