package kubejobs

import (
	"fmt"
	"math"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/wire"
)

// MaxSweepIDBytes bounds a SluiceSweep's id: its jobs' ids add "-<index>".
const MaxSweepIDBytes = 60

// SweepObject is what the decision needs of a SluiceSweep.
type SweepObject struct {
	Namespace, Name, UID string
	Generation           int64
	Deleting, Finalized  bool
	Spec                 SweepSpec
	Status               SweepStatus
}

// ID is the object's sweep id, or why it has none.
func (o SweepObject) ID() (string, error) { return ObjectID(o.Namespace, o.Name, MaxSweepIDBytes) }

// SweepRecord is what the job store holds under the object's sweep id.
type SweepRecord struct {
	Found bool
	Sweep broker.SweepStatus
	// Ours[i]: the sweep's i-th job is in the store and its record holds
	// the object's team key for it.
	Ours []bool
}

// ours reports whether the record is the object's: one of its jobs has
// the object's key, or none is left of a sweep the object submitted.
func (r SweepRecord) ours(o SweepObject) bool {
	left := 0
	for i, ok := range r.Ours {
		if ok {
			return true
		}
		if i < len(r.Sweep.Jobs) && r.Sweep.Jobs[i].Job.Spec.ID != "" {
			left++
		}
	}
	return left == 0 && o.Status.JobCount > 0
}

// DecideSweep is the reconcile policy of a SluiceSweep, DecideJob's for a
// sweep: add the finalizer, submit (every job of it), follow its jobs;
// on delete cancel and remove its jobs and its record (one ActDelete),
// then let the object go.
func DecideSweep(o SweepObject, r SweepRecord) (Action, SweepStatus, bool) {
	id, idErr := o.ID()
	ours := r.Found && r.ours(o)
	if o.Deleting {
		switch {
		case !o.Finalized:
			return ActNone, o.Status, false
		case ours:
			return ActDelete, o.Status, true
		}
		return ActRemoveFinalizer, o.Status, false
	}
	if !o.Finalized {
		return ActAddFinalizer, o.Status, true
	}
	st := o.Status
	st.ObservedGeneration = o.Generation
	fail := func(reason string) SweepStatus {
		st.State, st.Reason, st.SamplesPerSecond, st.Replicas, st.Stall = StateFailed, reason, 0, 0, ""
		return st
	}
	switch {
	case idErr != nil:
		return ActNone, fail(idErr.Error()), false
	case !r.Found && o.Status.JobCount > 0:
		st.SweepID = id
		return ActNone, fail("the sweep was removed from the job store outside Kubernetes: delete this object and apply it again to run it again"), false
	case !r.Found:
		st.SweepID, st.State, st.TeamKeySecret = id, StatePending, TeamKeySecretName(o.Name)
		return ActSubmit, st, true
	case !ours:
		st.SweepID = id
		return ActNone, fail(fmt.Sprintf("sweep id %s is taken by a sweep this object did not submit: it is left alone; apply this sweep under another name", id)), false
	}
	st = sweepStatus(o, r)
	return ActNone, st, st.State == StateRunning || st.State == StateQueued
}

// sweepStatus sums up the sweep's jobs.
func sweepStatus(o SweepObject, r SweepRecord) SweepStatus {
	st := SweepStatus{SweepID: r.Sweep.Sweep.Spec.ID, TeamKeySecret: TeamKeySecretName(o.Name), ObservedGeneration: o.Generation,
		JobCount: len(r.Sweep.Sweep.Jobs), EpochsDone: math.MaxInt}
	var queued, running, failed, cancelled, gone int
	var rate, stall float64
	readers := false
	for i, sj := range r.Sweep.Sweep.Jobs {
		js := SweepJobState{JobID: sj.ID, Trials: sj.Trials, State: StateFailed}
		var jst broker.SweepJobStatus
		if i < len(r.Sweep.Jobs) {
			jst = r.Sweep.Jobs[i]
		}
		if jst.Job.Spec.ID == "" {
			gone++
			st.EpochsDone = 0
			st.Jobs = append(st.Jobs, js)
			continue
		}
		js.State = stateOf(jst.Job.State)
		switch jst.Job.State {
		case wire.JobQueued:
			queued++
		case wire.JobRunning:
			running++
		case wire.JobFailed:
			failed++
		case wire.JobCancelled:
			cancelled++
		}
		for _, done := range jst.Done {
			if done {
				st.TrialsDone++
			}
		}
		epochs := 0
		for _, done := range jst.Status.TasksDonePerEpoch {
			if n := len(jst.Job.Shards); n > 0 && done >= n {
				epochs++
			}
		}
		st.EpochsDone = min(st.EpochsDone, epochs)
		if !jst.Job.State.Terminal() {
			for _, rd := range jst.Status.Readers {
				readers = true
				if !rd.Done {
					rate += rd.ConsumedPerS
					stall = max(stall, rd.StallFraction)
				}
			}
			st.Replicas += jst.Status.Replicas
		}
		st.Jobs = append(st.Jobs, js)
	}
	if st.EpochsDone == math.MaxInt {
		st.EpochsDone = 0
	}
	switch {
	case running > 0:
		st.State = StateRunning
	case queued > 0:
		st.State = StateQueued
	case gone > 0:
		st.State, st.Reason = StateFailed, fmt.Sprintf("%d of its jobs were deleted from the job store", gone)
	case failed > 0:
		st.State, st.Reason = StateFailed, fmt.Sprintf("%d of its jobs failed", failed)
	case cancelled > 0:
		st.State, st.Reason = StateCancelled, fmt.Sprintf("%d of its jobs were cancelled", cancelled)
	default:
		st.State = StateSucceeded
	}
	if readers {
		st.Stall = fmt.Sprintf("%.0f%%", 100*min(max(stall, 0), 1))
	}
	if rate > 0 && !math.IsInf(rate, 0) {
		st.SamplesPerSecond = int64(math.Round(min(rate, math.MaxInt32)))
	}
	return st
}
