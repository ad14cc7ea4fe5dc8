package controller

import (
	"fmt"

	"github.com/sluice-project/sluice/wire"
)

// Outcome decides how a job ended from its status once every reader is
// through: failed when every task failed, or when tasks were done but not
// one sample could be preprocessed (text shards through an image
// pipeline); succeeded otherwise. The reason says why a job failed.
//
// doneHere is how many tasks this controller saw done (their results): a
// job resumed after a takeover whose earlier owner wrote no status before
// it died has no sample counts from before, and is not failed for that.
func Outcome(s wire.JobStatus, doneHere int, firstFailedSample *wire.FailedSample) (wire.JobState, string) {
	t := s.Tasks
	if t.Total > 0 && t.Failed >= t.Total {
		reason := fmt.Sprintf("every task failed (%d of %d)", t.Failed, t.Total)
		if len(s.FailedShards) > 0 {
			f := s.FailedShards[0]
			reason += fmt.Sprintf("; first: %s: %s", f.Key, f.Reason)
		}
		return wire.JobFailed, reason
	}
	if s.SamplesProcessed == 0 && s.SamplesFailed > 0 {
		reason := fmt.Sprintf("no sample could be preprocessed: all %d failed", s.SamplesFailed)
		if firstFailedSample != nil {
			reason += fmt.Sprintf("; first: %s: %s", firstFailedSample.Key, firstFailedSample.Reason)
		}
		return wire.JobFailed, reason
	}
	if s.SamplesProcessed == 0 && doneHere > 0 {
		return wire.JobFailed, fmt.Sprintf("no sample could be preprocessed: %d tasks done without producing one", t.Done)
	}
	return wire.JobSucceeded, ""
}
