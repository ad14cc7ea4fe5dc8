package wire

import (
	"fmt"
	"regexp"
	"time"
)

// Stream and subject names. Job ids are restricted (ValidateJobID) so that
// they can be embedded in subject tokens and stream names as they are.
const (
	// TaskStream is the work-queue stream holding one task per shard per epoch.
	TaskStream = "SLUICE_TASKS"
	// JobsBucket is the JetStream key-value bucket holding job records (Job).
	JobsBucket = "sluice_jobs"
	// StatusBucket holds each job's live JobStatus, written by its owner.
	StatusBucket = "sluice_job_status"
	// LeasesBucket holds each job's Lease: which controller owns it.
	LeasesBucket = "sluice_leases"
	// ReadersBucket holds each reader's position in a job's output, so a
	// restarted agent resumes where its delivered batches end
	// (ReaderKey; the trainer agent owns the value's format), each
	// reader's done mark (ReaderDoneKey) and each job's tasks given up
	// (ShardsFailedKey). Each kind of record has a first token of its
	// own, so that no job or reader id makes one kind's key another's.
	ReadersBucket = "sluice_readers"
	// PlansBucket holds each pipeline's learned per-replica throughput,
	// written by controllers as jobs run and read by `sluice plan` and
	// pre-warm; package planner owns the keys and the value's format.
	PlansBucket = "sluice_plans"

	// DispatchBucket holds each running job's DispatchPlan under the job
	// id, written by its owning controller and read by the job's agents.
	DispatchBucket = "sluice_dispatch"

	taskSubjectPrefix   = "sluice.tasks."
	demandSubjectPrefix = "sluice.demand."
	resultSubjectPrefix = "sluice.results."
	teamSubjectPrefix   = "sluice.team."
)

// TeamSubjects matches every request between the agents of a reader's
// team (core NATS; no preprocessed byte).
const TeamSubjects = teamSubjectPrefix + ">"

// TeamSubject is where the agents of reader's team ask its planner (the
// agent serving rank 0) for op: join, chunk, end, failed, part, resume or
// status (the trainer agent owns the messages).
func TeamSubject(job, reader, op string) string {
	return teamSubjectPrefix + job + "." + reader + "." + op
}

// TeamProtocol is the version of the team protocol (the trainer agent's
// team messages on TeamSubject, their envelope in NATS headers): agents
// of one team must speak the same. 2: a resume names its rank and an id
// (TeamResume), each rank of a generation joining its resume once. 3:
// each message is sealed by its sender's node (NodeSeal in the
// NodeHeader* headers) instead of a MAC under the job's team key.
const TeamProtocol = "3"

// TaskSubjects is the subject filter of TaskStream.
const TaskSubjects = taskSubjectPrefix + ">"

// DemandSubjects matches every job's demand signal.
const DemandSubjects = demandSubjectPrefix + "*"

// ResultSubjects matches every job's shard results.
const ResultSubjects = resultSubjectPrefix + "*"

// TaskSubject is where the broker queues a job's shard tasks.
func TaskSubject(job string) string { return taskSubjectPrefix + job }

// DispatchConsumer is the durable consumer on TaskStream that every agent
// of the job pulls its tasks from: they share the queue, so a fast node
// takes more shards.
func DispatchConsumer(job string) string { return "sluice_dispatch_" + job }

// ResultSubject is where a job's agents publish a ShardResult for each
// task they settle (core NATS): the owning controller's view of progress.
func ResultSubject(job string) string { return resultSubjectPrefix + job }

// The first token of each kind of key in ReadersBucket. Job and reader
// ids hold no dot, so the first token alone tells the kinds apart: a job
// named "failed" or "done" cannot take another job's keys.
const (
	readerPosToken    = "pos"
	readerDoneToken   = "done"
	shardsFailedToken = "failed"
)

// ReaderDoneKey is the key in ReadersBucket that a reader's agent writes
// once every rank of the reader reached the end of the last epoch: the job
// succeeds only when each declared reader has it, so a trainer that
// crashes before its last batch can still resume from a checkpoint.
func ReaderDoneKey(job, reader string) string { return readerDoneToken + "." + job + "." + reader }

// ReaderDone is the value under ReaderDoneKey.
type ReaderDone struct {
	// Submitted is the submission time of the job the reader finished: a
	// job deleted and submitted again under its id is not done.
	Submitted time.Time `json:"submitted"`
	Time      time.Time `json:"time"`
}

// ReaderKey is the key of a reader's position in ReadersBucket. (Before
// the kinds had a token each it was job.reader, which ShardsFailedKey of
// the job named as the reader matched; such keys are not read any more.)
func ReaderKey(job, reader string) string { return readerPosToken + "." + job + "." + reader }

// DemandSubject is where a job's trainer agent publishes demand signals (core NATS).
func DemandSubject(job string) string { return demandSubjectPrefix + job }

var jobIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidateJobID reports whether id can name a job: 1-64 characters of
// letters, digits, '-' and '_', because it becomes a subject token and part
// of a stream name.
func ValidateJobID(id string) error {
	if !jobIDPattern.MatchString(id) {
		return fmt.Errorf("job id %q: want 1-64 characters of [A-Za-z0-9_-]", id)
	}
	return nil
}
