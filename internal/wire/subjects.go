package wire

import (
	"fmt"
	"regexp"
)

// Stream and subject names. Job ids are restricted (ValidateJobID) so that
// they can be embedded in subject tokens and stream names as they are.
const (
	// TaskStream is the work-queue stream holding one task per shard per epoch.
	TaskStream = "SLUICE_TASKS"
	// JobsBucket is the JetStream key-value bucket holding job records.
	JobsBucket = "sluice_jobs"

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
