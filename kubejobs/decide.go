package kubejobs

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// MaxJobIDBytes bounds a SluiceJob's id (wire.ValidateJobID).
const MaxJobIDBytes = 64

// JobObject is what the decision needs of a SluiceJob.
type JobObject struct {
	Namespace, Name, UID string
	Generation           int64
	// Deleting: the object has a deletion timestamp. Finalized: it holds
	// Finalizer.
	Deleting, Finalized bool
	Spec                JobSpec
	Status              JobStatus
}

// ID is the object's job id, or why it has none.
func (o JobObject) ID() (string, error) { return ObjectID(o.Namespace, o.Name, MaxJobIDBytes) }

// TeamKeySecretName is the Secret holding the team key of the object's job.
func TeamKeySecretName(name string) string { return name + "-teamkey" }

// JobRecord is what the job store holds under the object's id.
type JobRecord struct {
	// Found: a record has the id. Ours: its AgentAuth is that of the
	// object's team key, which only a submit for this object (its uid)
	// gives it: a job the CLI submitted under the same id is not ours,
	// and is never cancelled or deleted for the object.
	Found, Ours bool
	Job         wire.Job
	// Status is the owning controller's last status (zero: none yet).
	Status wire.JobStatus
}

// Action is what the shell does for an object, one at a time: each
// changes what the next reconcile reads.
type Action int

const (
	// ActNone: nothing but the status, where it changed.
	ActNone Action = iota
	// ActAddFinalizer: add Finalizer, before anything is submitted, so
	// that a delete never leaves a job running.
	ActAddFinalizer
	// ActSubmit: create the team key's Secret and submit the job.
	ActSubmit
	// ActCancel: cancel the object's job (it is being deleted).
	ActCancel
	// ActDelete: remove the object's finished job from the job store.
	ActDelete
	// ActRemoveFinalizer: the job store holds nothing of the object's.
	ActRemoveFinalizer
)

var actionNames = [...]string{"none", "add-finalizer", "submit", "cancel", "delete", "remove-finalizer"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "unknown"
}

// JobDecision is what to do for one SluiceJob and the status it should show.
type JobDecision struct {
	Action Action
	Status JobStatus
	// Active: the job may still change; the shell reads it again within
	// its poll period, which keeps the status current while it runs.
	Active bool
}

// DecideJob is the reconcile policy of a SluiceJob: a pure function of the
// object and what the job store holds under its id. The shell reads r
// only for an object with a valid id.
func DecideJob(o JobObject, r JobRecord) JobDecision {
	id, idErr := o.ID()
	ours := r.Found && r.Ours
	if o.Deleting {
		d := JobDecision{Status: o.Status}
		switch {
		case !o.Finalized:
			d.Action = ActNone
		case ours && !r.Job.State.Terminal():
			d.Action, d.Active = ActCancel, true
		case ours:
			d.Action, d.Active = ActDelete, true
		default:
			d.Action = ActRemoveFinalizer
		}
		if ours {
			d.Status = recordStatus(o, r)
		}
		return d
	}
	if !o.Finalized {
		return JobDecision{Action: ActAddFinalizer, Status: o.Status, Active: true}
	}
	st := o.Status
	st.ObservedGeneration = o.Generation
	switch {
	case idErr != nil:
		return JobDecision{Status: failed(st, idErr.Error())}
	case !r.Found && o.Status.Submitted != "":
		// Submitted once, gone now: `sluice job delete` removed it. Not
		// run again behind the user's back.
		st.JobID = id
		return JobDecision{Status: failed(st, "the job was deleted from the job store outside Kubernetes (sluice job delete): delete this object and apply it again to run it again")}
	case !r.Found:
		st.JobID, st.State, st.TeamKeySecret = id, StatePending, TeamKeySecretName(o.Name)
		return JobDecision{Action: ActSubmit, Status: st, Active: true}
	case !r.Ours:
		st.JobID = id
		return JobDecision{Status: failed(st, fmt.Sprintf("job id %s is taken by a job this object did not submit (sluice job submit, or an object of another uid): "+
			"it is left alone; apply this job under another name", id))}
	}
	st = recordStatus(o, r)
	return JobDecision{Status: st, Active: !r.Job.State.Terminal()}
}

// failed is st turned Failed with reason, its progress kept.
func failed(st JobStatus, reason string) JobStatus {
	st.State, st.Reason = StateFailed, reason
	st.SamplesPerSecond, st.Replicas, st.ReadyReplicas, st.Stall = 0, 0, 0, ""
	return st
}

// SubmitFailed is the status of an object whose submit failed with err: still
// Pending (the shell tries again), with the error as its reason.
func SubmitFailed(st JobStatus, err error) JobStatus {
	st.State, st.Reason = StatePending, truncate("submitting: "+err.Error(), wire.MaxReasonBytes)
	return st
}

// recordStatus is the status of the object's job, from its record (the
// state, which a cancel changes) and the controller's status (progress).
func recordStatus(o JobObject, r JobRecord) JobStatus {
	job, cs := r.Job, r.Status
	st := JobStatus{
		JobID: job.Spec.ID, State: stateOf(job.State), Reason: job.Reason,
		TeamKeySecret: TeamKeySecretName(o.Name), ObservedGeneration: o.Generation,
		Submitted:  job.Submitted.UTC().Format(time.RFC3339),
		TasksTotal: job.Tasks(),
	}
	if cs.Job == "" { // no controller has taken the job yet
		return st
	}
	st.Updated = cs.Updated.UTC().Format(time.RFC3339)
	if st.Reason == "" {
		st.Reason = cs.Reason
	}
	for _, done := range cs.TasksDonePerEpoch {
		if len(job.Shards) > 0 && done >= len(job.Shards) {
			st.EpochsDone++
		}
	}
	st.TasksDone, st.TasksFailed = cs.Tasks.Done, cs.Tasks.Failed
	st.SamplesProcessed, st.SamplesFailed = cs.SamplesProcessed, cs.SamplesFailed
	if job.State.Terminal() {
		return st // a finished job has no replicas and takes no samples
	}
	var rate, stall float64
	for _, rd := range cs.Readers {
		if !rd.Done {
			rate += rd.ConsumedPerS
			stall = max(stall, rd.StallFraction)
		}
	}
	if len(cs.Readers) > 0 {
		st.Stall = fmt.Sprintf("%.0f%%", 100*min(max(stall, 0), 1))
	}
	if rate > 0 && !math.IsInf(rate, 0) {
		st.SamplesPerSecond = int64(math.Round(min(rate, math.MaxInt32)))
	}
	st.Replicas, st.ReadyReplicas = cs.Replicas, cs.ReadyReplicas
	return st
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
