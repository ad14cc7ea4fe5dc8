package kubejobs

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/wire"
)

func obj() JobObject {
	return JobObject{Namespace: "team-a", Name: "train", UID: "u1", Generation: 1, Finalized: true,
		Spec: JobSpec{Dataset: "s3://d/x/", Pipeline: "imagenet-train", BatchSize: 4, Epochs: 2}}
}

func record(state wire.JobState) JobRecord {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return JobRecord{Found: true, Ours: true, Job: wire.Job{
		Spec: wire.JobSpec{ID: "team-a_train", Epochs: 2}, Shards: []string{"a", "b", "c"},
		State: state, Submitted: t0,
	}}
}

func TestDecideJobLifecycle(t *testing.T) {
	o := obj()
	o.Finalized = false
	if d := DecideJob(o, JobRecord{}); d.Action != ActAddFinalizer || !d.Active {
		t.Errorf("no finalizer: %v, want add-finalizer first", d.Action)
	}
	o.Finalized = true
	d := DecideJob(o, JobRecord{})
	if d.Action != ActSubmit || d.Status.State != StatePending || d.Status.JobID != "team-a_train" || d.Status.TeamKeySecret != "train-teamkey" {
		t.Errorf("not in the store: %v %+v, want submit, Pending, id team-a_train", d.Action, d.Status)
	}
	r := record(wire.JobRunning)
	r.Status = wire.JobStatus{Job: "team-a_train", State: wire.JobRunning, Updated: r.Job.Submitted.Add(time.Second),
		Tasks: wire.TaskCounts{Total: 6, Done: 4}, TasksDonePerEpoch: []int{3, 1}, SamplesProcessed: 400,
		Replicas: 3, ReadyReplicas: 2,
		Readers: map[string]wire.ReaderStatus{"a": {ConsumedPerS: 100.4, StallFraction: 0.25}, "b": {ConsumedPerS: 50, StallFraction: 0.5}}}
	d = DecideJob(o, r)
	want := JobStatus{JobID: "team-a_train", State: StateRunning, TeamKeySecret: "train-teamkey", ObservedGeneration: 1,
		Submitted: "2026-01-02T03:04:05Z", Updated: "2026-01-02T03:04:06Z", EpochsDone: 1, TasksTotal: 6, TasksDone: 4,
		SamplesProcessed: 400, SamplesPerSecond: 150, Stall: "50%", Replicas: 3, ReadyReplicas: 2}
	if d.Action != ActNone || !d.Active || d.Status != want {
		t.Errorf("running: %v active %v\n got %+v\nwant %+v", d.Action, d.Active, d.Status, want)
	}
	r.Job.State = wire.JobSucceeded
	d = DecideJob(o, r)
	if d.Active || d.Status.State != StateSucceeded || d.Status.Replicas != 0 || d.Status.SamplesPerSecond != 0 || d.Status.TasksDone != 4 {
		t.Errorf("succeeded: active %v %+v, want inactive, Succeeded, no replicas or rate, progress kept", d.Active, d.Status)
	}
}

func TestDecideJobDelete(t *testing.T) {
	o := obj()
	o.Deleting = true
	for _, c := range []struct {
		name string
		r    JobRecord
		want Action
	}{
		{"running", record(wire.JobRunning), ActCancel},
		{"queued", record(wire.JobQueued), ActCancel},
		{"cancelled", record(wire.JobCancelled), ActDelete},
		{"succeeded", record(wire.JobSucceeded), ActDelete},
		{"gone", JobRecord{}, ActRemoveFinalizer},
		{"not ours", JobRecord{Found: true, Job: record(wire.JobRunning).Job}, ActRemoveFinalizer},
	} {
		if d := DecideJob(o, c.r); d.Action != c.want {
			t.Errorf("%s: %v, want %v", c.name, d.Action, c.want)
		}
	}
	o.Finalized = false
	if d := DecideJob(o, record(wire.JobRunning)); d.Action != ActNone {
		t.Errorf("deleting without our finalizer: %v, want none", d.Action)
	}
}

func TestDecideJobLeavesOthersJobsAlone(t *testing.T) {
	r := record(wire.JobRunning)
	r.Ours = false
	d := DecideJob(obj(), r)
	if d.Action != ActNone || d.Status.State != StateFailed || !strings.Contains(d.Status.Reason, "taken") || d.Active {
		t.Errorf("a CLI job of the id: %v %+v, want no action, Failed naming the collision", d.Action, d.Status)
	}
}

func TestDecideJobDoesNotResubmitADeletedJob(t *testing.T) {
	o := obj()
	o.Status = JobStatus{JobID: "team-a_train", State: StateRunning, Submitted: "2026-01-02T03:04:05Z"}
	d := DecideJob(o, JobRecord{})
	if d.Action != ActNone || d.Status.State != StateFailed || !strings.Contains(d.Status.Reason, "sluice job delete") {
		t.Errorf("record deleted with the CLI: %v %+v, want Failed, not submitted again", d.Action, d.Status)
	}
}

func TestDecideJobIDTooLong(t *testing.T) {
	o := obj()
	o.Namespace = strings.Repeat("n", 40)
	o.Name = strings.Repeat("m", 30)
	d := DecideJob(o, JobRecord{})
	if d.Action != ActNone || d.Status.State != StateFailed || !strings.Contains(d.Status.Reason, "at most 64") {
		t.Errorf("71-character id: %v %+v, want Failed naming the bound", d.Action, d.Status)
	}
}

func TestObjectIDsDoNotCollide(t *testing.T) {
	a, _ := ObjectID("a-b", "c", 64)
	b, _ := ObjectID("a", "b-c", 64)
	if a == b {
		t.Errorf("a-b/c and a/b-c share id %s", a)
	}
}

func TestTeamKeyPerObjectAndJob(t *testing.T) {
	k := []byte(strings.Repeat("k", 32))
	if string(teamKey(k, "u1", "j")) == string(teamKey(k, "u2", "j")) || string(teamKey(k, "u1", "j")) == string(teamKey(k, "u1", "j2")) {
		t.Error("two objects or two jobs share a team key")
	}
	parsed, err := wire.ParseTeamKey(teamKeyFile(teamKey(k, "u1", "j")))
	if err != nil || string(parsed) != string(teamKey(k, "u1", "j")) {
		t.Errorf("the Secret's team key file does not parse back: %v", err)
	}
}

func sweepObj() SweepObject {
	return SweepObject{Namespace: "team-b", Name: "hp", UID: "u2", Generation: 1, Finalized: true,
		Spec: SweepSpec{Dataset: "s3://d/x/", Pipeline: "p", BatchSize: 4, Epochs: 1, Count: 2}}
}

func sweepRecord(states ...wire.JobState) SweepRecord {
	r := SweepRecord{Found: true}
	r.Sweep.Sweep.Spec.ID = "team-b_hp"
	for i, s := range states {
		id := fmt.Sprintf("team-b_hp-%d", i)
		r.Sweep.Sweep.Jobs = append(r.Sweep.Sweep.Jobs, wire.SweepJob{ID: id, Trials: []string{"t" + fmt.Sprint(i)}})
		js := broker.SweepJobStatus{Done: map[string]bool{"t" + fmt.Sprint(i): s == wire.JobSucceeded}}
		if s != "" {
			js.Job = wire.Job{Spec: wire.JobSpec{ID: id}, Shards: []string{"a"}, State: s}
			js.Status = wire.JobStatus{Job: id, TasksDonePerEpoch: []int{1}, Replicas: 2,
				Readers: map[string]wire.ReaderStatus{"t": {ConsumedPerS: 10, StallFraction: 0.1}}}
		}
		r.Sweep.Jobs = append(r.Sweep.Jobs, js)
		r.Ours = append(r.Ours, s != "")
	}
	return r
}

func TestDecideSweep(t *testing.T) {
	o := sweepObj()
	if a, st, _ := DecideSweep(o, SweepRecord{}); a != ActSubmit || st.State != StatePending || st.SweepID != "team-b_hp" {
		t.Errorf("not in the store: %v %+v, want submit", a, st)
	}
	a, st, active := DecideSweep(o, sweepRecord(wire.JobRunning, wire.JobSucceeded))
	if a != ActNone || !active || st.State != StateRunning || st.TrialsDone != 1 || st.Replicas != 2 || st.SamplesPerSecond != 10 || st.Stall != "10%" || st.EpochsDone != 1 {
		t.Errorf("one job running, one done: %v %v %+v", a, active, st)
	}
	a, st, active = DecideSweep(o, sweepRecord(wire.JobSucceeded, wire.JobSucceeded))
	if active || st.State != StateSucceeded || st.TrialsDone != 2 || st.Replicas != 0 {
		t.Errorf("every job done: %v %v %+v, want Succeeded, inactive", a, active, st)
	}
	if _, st, _ = DecideSweep(o, sweepRecord(wire.JobSucceeded, wire.JobFailed)); st.State != StateFailed {
		t.Errorf("a job failed: %+v, want Failed", st)
	}
	if _, st, _ = DecideSweep(o, sweepRecord(wire.JobSucceeded, "")); st.State != StateFailed || !strings.Contains(st.Reason, "deleted") {
		t.Errorf("a job deleted with the CLI: %+v, want Failed naming it", st)
	}
	other := sweepRecord(wire.JobRunning)
	other.Ours = []bool{false}
	if a, st, _ := DecideSweep(o, other); a != ActNone || st.State != StateFailed || !strings.Contains(st.Reason, "taken") {
		t.Errorf("another's sweep of the id: %v %+v, want Failed, untouched", a, st)
	}
	o.Deleting = true
	if a, _, _ := DecideSweep(o, sweepRecord(wire.JobRunning)); a != ActDelete {
		t.Errorf("deleting: %v, want delete", a)
	}
	if a, _, _ := DecideSweep(o, other); a != ActRemoveFinalizer {
		t.Errorf("deleting, the sweep another's: %v, want remove-finalizer only", a)
	}
	if a, _, _ := DecideSweep(o, SweepRecord{}); a != ActRemoveFinalizer {
		t.Errorf("deleting, nothing left: %v, want remove-finalizer", a)
	}
}
