package wire

import (
	"fmt"
	"time"
)

// Demand is the signal a trainer agent publishes on DemandSubject(job) about
// once a second: how fast the trainer eats, how much of the interval it
// waited for data, and how much is buffered ahead of it.
type Demand struct {
	Job string `json:"job"`
	// Reader names the reader (agent) speaking; a job with several readers
	// has a signal from each (empty means DefaultReader).
	Reader string `json:"reader,omitempty"`
	// Agent names the agent speaking (several agents of one job serve the
	// ranks of their nodes, a reader's team each signalling for its own
	// ranks under the reader's name): the controller keeps each agent's
	// latest signal apart and merges a reader's team into one, and shares
	// the job's in-flight budget among the agents it hears
	// (DispatchPlan.Shares). Empty: one agent with no name.
	Agent string    `json:"agent,omitempty"`
	Time  time.Time `json:"time"`
	// InFlight is the tasks the agent is sending now; PendingTasks how many
	// more it would send were its share larger (its prefetch has room).
	InFlight     int `json:"in_flight"`
	PendingTasks int `json:"pending_tasks,omitempty"`
	// IntervalS is the length of the window the rates cover.
	IntervalS float64 `json:"interval_s"`
	// ConsumedPerS is samples handed to the trainer per second.
	ConsumedPerS float64 `json:"consumed_per_s"`
	// ArrivedPerS is samples received from functions per second.
	ArrivedPerS float64 `json:"arrived_per_s"`
	// StallFraction is the share of the window the trainer stalled for
	// want of data: WaitFraction, capped by the GPU's idle share
	// (1 - GPUUtilization) where a GPU is read, since a trainer waiting
	// while its GPU still runs queued work is not held up yet.
	StallFraction float64 `json:"stall_fraction"`
	// WaitFraction is the share of the window the trainer waited for a
	// batch, measured as WaitSource says.
	WaitFraction float64 `json:"wait_fraction"`
	// WaitSource is WaitClient when the trainer's clients report their
	// step times (the wait their training loops saw), WaitAgent when the
	// wait is the time a request was blocked in the agent.
	WaitSource string `json:"wait_source,omitempty"`
	// GPUUtilization is the mean GPU utilisation in [0,1] over the window,
	// or -1 when there is no GPU to read (NVML unavailable).
	GPUUtilization float64 `json:"gpu_utilization"`
	// Step is where the trainer's steps in the window went (zero when no
	// client reported a step in it).
	Step StepTimes `json:"step,omitzero"`
	// BufferedSamples is what the agent holds ready; BufferCapacity its bound.
	BufferedSamples int `json:"buffered_samples"`
	BufferCapacity  int `json:"buffer_capacity"`
	// SamplesDone and SamplesTotal give progress over all epochs (total 0 if unknown).
	SamplesDone  int64 `json:"samples_done"`
	SamplesTotal int64 `json:"samples_total"`
	// Done is set on the last signal of a job, once every epoch is delivered.
	Done bool `json:"done"`
}

// Bounds on the counts of a Demand, which anyone who may publish on a
// job's demand subject can send: far above a real agent's, low enough
// that the sums of a job's agents cannot overflow.
const (
	// MaxDemandTasks bounds InFlight and PendingTasks.
	MaxDemandTasks = 1 << 24
	// MaxDemandSamples bounds the sample counts and rates.
	MaxDemandSamples = 1 << 48
)

// CheckCounts names the first count or share of d out of its bounds:
// tasks and samples negative or past MaxDemandTasks, MaxDemandSamples;
// a share of the interval outside [0, 1]; a GPU utilisation outside
// [0, 1] but -1.
func (d Demand) CheckCounts() error {
	for _, c := range []struct {
		name     string
		v, bound float64
	}{
		{"in_flight", float64(d.InFlight), MaxDemandTasks},
		{"pending_tasks", float64(d.PendingTasks), MaxDemandTasks},
		{"buffered_samples", float64(d.BufferedSamples), MaxDemandSamples},
		{"buffer_capacity", float64(d.BufferCapacity), MaxDemandSamples},
		{"samples_done", float64(d.SamplesDone), MaxDemandSamples},
		{"samples_total", float64(d.SamplesTotal), MaxDemandSamples},
		{"consumed_per_s", d.ConsumedPerS, MaxDemandSamples},
		{"arrived_per_s", d.ArrivedPerS, MaxDemandSamples},
		{"interval_s", d.IntervalS, 86400},
		{"stall_fraction", d.StallFraction, 1},
		{"wait_fraction", d.WaitFraction, 1},
	} {
		if !(c.v >= 0 && c.v <= c.bound) { // NaN fails too
			return fmt.Errorf("demand %s %v: want 0..%v", c.name, c.v, c.bound)
		}
	}
	if g := d.GPUUtilization; g != -1 && !(g >= 0 && g <= 1) {
		return fmt.Errorf("demand gpu_utilization %v: want 0..1, or -1 for none", g)
	}
	return nil
}

// ReaderName is the reader d speaks for: Reader, DefaultReader if empty.
func (d Demand) ReaderName() string {
	if d.Reader == "" {
		return DefaultReader
	}
	return d.Reader
}

// Where a demand signal's wait was measured (Demand.WaitSource).
const (
	WaitClient = "client"
	WaitAgent  = "agent"
)

// StepTimes splits a trainer's mean step into data wait, compute and the
// rest, the breakdown of the PAI workload study (Wang et al., "Characterizing
// Deep Learning Training Workloads on Alibaba-PAI"), from the step times the
// trainer's clients report. A step is what the training loop does from
// asking for a batch to asking for the next: WaitS + ComputeS + OtherS.
type StepTimes struct {
	// Steps is how many rank-steps the means cover; Ranks how many ranks
	// reported them.
	Steps int64 `json:"steps"`
	Ranks int   `json:"ranks"`
	// WaitS is the mean time a step waited for its batch.
	WaitS float64 `json:"wait_s"`
	// ComputeS is the mean time the GPU worked for a step: the client's
	// compute time (batch in hand to asking for the next) times the share of
	// it the GPU was busy; all of it where no GPU is read.
	ComputeS float64 `json:"compute_s"`
	// OtherS is the rest of the client's compute time: host work with the
	// GPU idle (logging, checkpoints, host-side preprocessing, syncs).
	OtherS float64 `json:"other_s"`
}

// StepS is the mean step's length.
func (s StepTimes) StepS() float64 { return s.WaitS + s.ComputeS + s.OtherS }
