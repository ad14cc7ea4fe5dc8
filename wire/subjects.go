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
	// restarted agent resumes where its delivered batches end. Keys are
	// ReaderKey(job, reader); the trainer agent owns the value's format.
	ReadersBucket = "sluice_readers"
	// PlansBucket holds each pipeline's learned per-replica throughput,
	// written by controllers as jobs run and read by `sluice plan` and
	// pre-warm; package planner owns the keys and the value's format.
	PlansBucket = "sluice_plans"

	taskSubjectPrefix   = "sluice.tasks."
	outputSubjectPrefix = "sluice.out."
	demandSubjectPrefix = "sluice.demand."
	outputStreamPrefix  = "SLUICE_OUT_"
)

// TaskSubjects is the subject filter of TaskStream.
const TaskSubjects = taskSubjectPrefix + ">"

// DemandSubjects matches every job's demand signal.
const DemandSubjects = demandSubjectPrefix + "*"

// TaskSubject is where the broker queues a job's shard tasks.
func TaskSubject(job string) string { return taskSubjectPrefix + job }

// OutputStream is the name of the per-job stream that holds preprocessed chunks.
func OutputStream(job string) string { return outputStreamPrefix + job }

// OutputSubject is where function replicas publish a job's chunks and shard ends.
func OutputSubject(job string) string { return outputSubjectPrefix + job }

// ReaderReplaySubject is where the replayed chunks of one reader of job go:
// in the job's output stream, outside OutputSubject(job), and in that
// reader's consumer's filter only, so only the reader that asked for a
// replay gets it; the interest-retention stream drops it once that reader
// acked it, whatever the others do.
func ReaderReplaySubject(job, reader string) string {
	return outputSubjectPrefix + job + ".r." + reader
}

// ReplayOutputSubjects matches every ReaderReplaySubject of job.
func ReplayOutputSubjects(job string) string { return outputSubjectPrefix + job + ".r.*" }

// ReplaySubject is where a job's replay tasks are queued (see
// ShardTask.Replay): on TaskStream, outside TaskSubject(job), so that its
// dispatcher can take them before the epochs still queued.
func ReplaySubject(job string) string { return taskSubjectPrefix + job + ".replay" }

// ReplayConsumer is the durable consumer on TaskStream through which the
// job's owning controller pulls its replay tasks.
func ReplayConsumer(job string) string { return "sluice_replay_" + job }

// ReaderDoneKey is the key in ReadersBucket that a reader's agent writes
// once every rank of the reader reached the end of the last epoch: the job
// succeeds only when each declared reader has it, so a trainer that
// crashes before its last batch can still resume from a checkpoint.
func ReaderDoneKey(job, reader string) string { return "done." + job + "." + reader }

// ReaderDone is the value under ReaderDoneKey.
type ReaderDone struct {
	// Submitted is the submission time of the job the reader finished: a
	// job deleted and submitted again under its id is not done.
	Submitted time.Time `json:"submitted"`
	Time      time.Time `json:"time"`
}

// DispatchConsumer is the durable consumer on TaskStream through which the
// job's owning controller pulls its tasks.
func DispatchConsumer(job string) string { return "sluice_dispatch_" + job }

// ReaderConsumer is the durable consumer on the job's output stream of one
// reader (a trainer agent, a trainer rank, a sweep trial).
func ReaderConsumer(reader string) string { return "sluice_reader_" + reader }

// ReaderKey is the key of a reader's position in ReadersBucket.
func ReaderKey(job, reader string) string { return job + "." + reader }

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
