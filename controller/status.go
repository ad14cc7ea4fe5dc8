package controller

import (
	"slices"
	"time"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/internal/sat"
	"github.com/sluice-project/sluice/wire"
)

// statusInputs are what one status is built from.
type statusInputs struct {
	job   wire.Job
	owner string
	// results are the agents' shard results counted here; backlog the
	// task consumer's and the agents' counts.
	results resultCounts
	backlog backlogCounts
	// prev is the status found when this controller took the job: what an
	// earlier owner counted.
	prev wire.JobStatus
	// givenUp is the agents' record of the tasks they gave up, which
	// outlasts results lost in a takeover (read as the job ends).
	givenUp  wire.ShardsFailed
	signals  map[string]autoscale.Signal
	replicas int
	ready    int
	reason   string
	// stale is the age past which a reader's step times no longer count
	// in the job's (autoscale.Config.DemandStale); 0: never.
	stale time.Duration
}

// buildStatus is the job's status now: the results counted here on top of
// what an earlier owner had counted, and each reader's latest signal.
//
// Tasks done are at least the tasks the consumer no longer holds (acked:
// done or given up on) less those failed: results are core NATS messages,
// and those published while no controller owned the job (a takeover) are
// not counted here. Tasks failed are at least those the agents recorded
// as given up (givenUp), which a lost result does not take away. The per-epoch counts have only the results.
func buildStatus(in statusInputs, now time.Time) wire.JobStatus {
	r, prev, total := in.results, in.prev, in.job.Tasks()
	// prev is a stored status and givenUp a record agents write: their
	// counts are added without wrapping, and held within the job's tasks.
	failed := min(max(sat.Add(prev.Tasks.Failed, r.Failed), in.givenUp.Total, 0), total)
	done := sat.Add(prev.Tasks.Done, r.Done)
	if in.backlog.Known {
		done = max(done, total-in.backlog.Queued-failed)
	}
	done = max(min(done, total-failed), 0)
	s := wire.JobStatus{
		Job: in.job.Spec.ID, State: in.job.State, Reason: in.job.Reason, Owner: in.owner, Updated: now.UTC(),
		Tasks: wire.TaskCounts{
			Total:        total,
			Done:         done,
			Failed:       failed,
			InFlight:     in.backlog.InFlight,
			Pending:      in.backlog.Pending,
			Redeliveries: max(sat.Add(prev.Tasks.Redeliveries, r.Redeliveries), 0),
		},
		SamplesProcessed: max(sat.Add64(prev.SamplesProcessed, r.Samples), 0),
		SamplesFailed:    max(sat.Add64(prev.SamplesFailed, r.SampleFailures), 0),
		SamplesExpected:  prev.SamplesExpected,
		ReplaysFailed:    max(sat.Add(prev.ReplaysFailed, r.ReplayFailed), 0),
		Replicas:         in.replicas,
		ReadyReplicas:    in.ready,
		ScaleReason:      in.reason,
	}
	if in.job.State.Terminal() {
		// Nothing of an ended job runs again; the agents' last demand
		// signals may still name tasks they wanted before it ended.
		s.Tasks.InFlight, s.Tasks.Pending = 0, 0
	}
	for _, list := range [][]wire.FailedSample{prev.FailedShards, r.FailedShards, in.givenUp.Shards} {
		for _, f := range list {
			if len(s.FailedShards) == wire.MaxFailedShardsListed {
				break
			}
			if !slices.ContainsFunc(s.FailedShards, func(l wire.FailedSample) bool { return l.Key == f.Key && l.Epoch == f.Epoch }) {
				s.FailedShards = append(s.FailedShards, f)
			}
		}
	}
	s.TasksDonePerEpoch = make([]int, in.job.Spec.Epochs)
	for e := range s.TasksDonePerEpoch {
		if e < len(prev.TasksDonePerEpoch) {
			s.TasksDonePerEpoch[e] = prev.TasksDonePerEpoch[e]
		}
		s.TasksDonePerEpoch[e] = sat.Add(s.TasksDonePerEpoch[e], r.DonePerEpoch[e])
	}
	addReads(&s, prev, r.Reads, in.job.Spec.Epochs)
	for i, src := range in.job.Sources {
		p := wire.SourceProgress{Dataset: in.job.Spec.Sources[i].Dataset, Tasks: src.Slots * in.job.Spec.Epochs}
		if i < len(prev.Sources) { // an earlier owner's counts
			p.TasksDone, p.SamplesProcessed = prev.Sources[i].TasksDone, prev.Sources[i].SamplesProcessed
		}
		p.TasksDone = min(max(sat.Add(p.TasksDone, r.DonePerSource[i]), 0), p.Tasks)
		p.SamplesProcessed = max(sat.Add64(p.SamplesProcessed, r.SamplesPerSource[i]), 0)
		s.Sources = append(s.Sources, p)
	}
	if len(prev.Readers) > 0 || len(in.signals) > 0 {
		s.Readers = map[string]wire.ReaderStatus{}
	}
	// Declared readers only: the demand book refuses others' signals, and a
	// stored status may have been written by anyone.
	for name, rs := range prev.Readers {
		if slices.Contains(in.job.Spec.Readers, name) {
			s.Readers[name] = rs
		}
	}
	var steps []wire.StepTimes
	for name, sig := range in.signals {
		if !slices.Contains(in.job.Spec.Readers, name) {
			continue
		}
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
