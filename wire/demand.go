package wire

import "time"

// Demand is the signal a trainer agent publishes on DemandSubject(job) about
// once a second: how fast the trainer eats, how much of the interval it
// waited for data, and how much is buffered ahead of it.
type Demand struct {
	Job string `json:"job"`
	// Reader names the reader (agent) speaking; a job with several readers
	// has a signal from each (empty means DefaultReader).
	Reader string    `json:"reader,omitempty"`
	Time   time.Time `json:"time"`
	// IntervalS is the length of the window the rates cover.
	IntervalS float64 `json:"interval_s"`
	// ConsumedPerS is samples handed to the trainer per second.
	ConsumedPerS float64 `json:"consumed_per_s"`
	// ArrivedPerS is samples received from functions per second.
	ArrivedPerS float64 `json:"arrived_per_s"`
	// StallFraction is the share of the window the trainer spent waiting for a batch.
	StallFraction float64 `json:"stall_fraction"`
	// GPUUtilization is the mean GPU utilisation in [0,1] over the window,
	// or -1 when there is no GPU to read (NVML unavailable).
	GPUUtilization float64 `json:"gpu_utilization"`
	// BufferedSamples is what the agent holds ready; BufferCapacity its bound.
	BufferedSamples int `json:"buffered_samples"`
	BufferCapacity  int `json:"buffer_capacity"`
	// SamplesDone and SamplesTotal give progress over all epochs (total 0 if unknown).
	SamplesDone  int64 `json:"samples_done"`
	SamplesTotal int64 `json:"samples_total"`
	// Done is set on the last signal of a job, once every epoch is delivered.
	Done bool `json:"done"`
}
