package controller

import (
	"maps"
	"time"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/wire"
)

// statusInputs are what one status is built from.
type statusInputs struct {
	job   wire.Job
	owner string
	stats broker.DispatchStats
	// prev is the status found when this controller took the job: what an
	// earlier owner counted.
	prev     wire.JobStatus
	signals  map[string]autoscale.Signal
	replicas int
	ready    int
	reason   string
	// stale is the age past which a reader's step times no longer count
	// in the job's (autoscale.Config.DemandStale); 0: never.
	stale time.Duration
}

// buildStatus is the job's status now: this dispatcher's counts on top of
// what an earlier owner had counted, and each reader's latest signal.
func buildStatus(in statusInputs, now time.Time) wire.JobStatus {
	st, prev := in.stats, in.prev
	s := wire.JobStatus{
		Job: in.job.Spec.ID, State: in.job.State, Reason: in.job.Reason, Owner: in.owner, Updated: now.UTC(),
		Tasks: wire.TaskCounts{
			Total:        st.Total,
			Done:         max(st.Resumed-prev.Tasks.Failed, 0) + st.Done,
			Failed:       prev.Tasks.Failed + st.Failed,
			InFlight:     st.InFlight,
			Pending:      st.Pending,
			Redeliveries: prev.Tasks.Redeliveries + st.Redeliveries,
		},
		SamplesProcessed: prev.SamplesProcessed + int64(st.Samples),
		SamplesFailed:    prev.SamplesFailed + int64(st.SampleFailures),
		SamplesExpected:  prev.SamplesExpected,
		FailedShards:     append(append([]wire.FailedSample(nil), prev.FailedShards...), st.FailedShards...),
		Replicas:         in.replicas,
		ReadyReplicas:    in.ready,
		ScaleReason:      in.reason,
	}
	if st.Total == 0 {
		s.Tasks.Total = in.job.Tasks()
	}
	s.TasksDonePerEpoch = make([]int, in.job.Spec.Epochs)
	for e := range s.TasksDonePerEpoch {
		if e < len(prev.TasksDonePerEpoch) {
			s.TasksDonePerEpoch[e] = prev.TasksDonePerEpoch[e]
		}
		s.TasksDonePerEpoch[e] += st.Results[e]
	}
	addReads(&s, prev, st.Reads, in.job.Spec.Epochs)
	if len(prev.Readers) > 0 || len(in.signals) > 0 {
		s.Readers = maps.Clone(prev.Readers)
		if s.Readers == nil {
			s.Readers = map[string]wire.ReaderStatus{}
		}
	}
	var steps []wire.StepTimes
	for name, sig := range in.signals {
		d := sig.Demand
		rs := wire.ReaderStatus{
			SamplesDelivered: d.SamplesDone, StallFraction: d.StallFraction,
			ConsumedPerS: d.ConsumedPerS, Done: d.Done, Seen: sig.At.UTC(),
			Step: d.Step,
		}
		if d.GPUUtilization >= 0 {
			rs.GPUUtilization = &d.GPUUtilization
		}
		s.Readers[name] = rs
		s.SamplesExpected = max(s.SamplesExpected, d.SamplesTotal)
		if !d.Done && (in.stale <= 0 || now.Sub(sig.At) <= in.stale) {
			steps = append(steps, d.Step)
		}
	}
	s.Step = autoscale.MergeSteps(steps...)
	return s
}
