package controller

import (
	"fmt"
	"maps"

	"github.com/sluice-project/sluice/internal/sat"
	"github.com/sluice-project/sluice/wire"
)

// taskKey names one of a job's tasks.
type taskKey struct{ epoch, shard int }

// failedEntry is a failure in the order it was reported.
type failedEntry struct {
	key    taskKey
	replay bool
}

// jobResults adds up the shard results a job's agents report
// (wire.ShardResult on wire.ResultSubject): tasks done and failed, samples,
// reads. It is a plain type, not safe for concurrent use: the job's run
// locks around it.
type jobResults struct {
	job    string
	epochs int
	shards []string // the job's shard keys

	done         map[taskKey]bool
	failed       map[taskKey]wire.FailedSample
	replayFailed map[taskKey]wire.FailedSample
	// order lists failures as they came; an entry whose task later
	// succeeded is skipped when listing.
	order   []failedEntry
	donePer map[int]int
	// A mixed job's shards' sources, and per source the tasks done and
	// their samples (nil for a job of one dataset).
	source        func(shard int) int
	donePerSource map[int]int
	samplesPerSrc map[int]int64
	firstFailed   *wire.FailedSample
	reads         map[int]ShardReads
	counts        resultCounts // the plain counters
}

// resultCounts is a snapshot of a job's results.
type resultCounts struct {
	// Done and Failed count distinct tasks (epoch, shard) of the job; a
	// task that failed and was then done counts as done.
	Done, Failed int
	// DonePerEpoch is tasks done per epoch.
	DonePerEpoch map[int]int
	// DonePerSource and SamplesPerSource are a mixed job's tasks done
	// and their samples, per source.
	DonePerSource    map[int]int
	SamplesPerSource map[int]int64
	// Samples and SampleFailures add up the shard ends of done tasks.
	Samples, SampleFailures int64
	// Redeliveries is sends of a task beyond its first: an agent's
	// retries, and every send of a task reported done again.
	Redeliveries int
	// FailedShards lists the first wire.MaxFailedShardsListed failures
	// (tasks given up on, then replays), each under its shard's key in
	// the job's record (not the result's).
	FailedShards []wire.FailedSample
	// FirstFailedSample is the first sample a function reported failed,
	// to say why when none could be preprocessed.
	FirstFailedSample *wire.FailedSample
	// Replays and ReplayFailed count shards produced again for a resumed
	// reader (ShardResult.Replay), beyond the job's tasks.
	Replays, ReplayFailed int
	// Malformed is results dropped as naming no task of the job.
	Malformed int
	// Reads is where the shards were read from, per epoch.
	Reads map[int]ShardReads
}

func newJobResults(job wire.Job) *jobResults {
	j := &jobResults{
		job: job.Spec.ID, epochs: job.Spec.Epochs, shards: job.Shards,
		done: map[taskKey]bool{}, failed: map[taskKey]wire.FailedSample{},
		replayFailed: map[taskKey]wire.FailedSample{}, donePer: map[int]int{},
	}
	if len(job.Sources) > 0 {
		j.source, j.donePerSource, j.samplesPerSrc = job.SourceOf, map[int]int{}, map[int]int64{}
	}
	return j
}

// resultKind is what one result changed, for the job's metrics.
type resultKind int

const (
	resultIgnored   resultKind = iota // a task already counted
	resultMalformed                   // naming no task of the job
	resultDone                        // a task of the job done for the first time
	resultFailed                      // a task of the job failed for the first time
	resultReplay                      // a replay, done or failed
)

// add counts r and says what it changed, and whether it read a shard. A
// result naming no task of the job, or with a count out of its bounds
// (wire.ShardResult.CheckCounts), is dropped as malformed; the counts add
// up without wrapping (sat), however many results come.
func (j *jobResults) add(r wire.ShardResult) (kind resultKind, read bool) {
	e := r.End
	if (e.Job != "" && e.Job != j.job) || e.Epoch < 0 || e.Epoch >= j.epochs || e.Shard < 0 || e.Shard >= len(j.shards) ||
		r.CheckCounts() != nil {
		j.counts.Malformed++
		return resultMalformed, false
	}
	k := taskKey{e.Epoch, e.Shard}
	if j.done[k] && !r.Replay {
		// Done again: its agent died before its ack and another did it,
		// so every send of this one was a redelivery.
		j.counts.Redeliveries = sat.Add(j.counts.Redeliveries, max(r.Sends, 1))
	} else {
		j.counts.Redeliveries = sat.Add(j.counts.Redeliveries, max(r.Sends-1, 0))
	}
	if r.Error == "" {
		read = j.addRead(e)
	}
	if r.Replay {
		if r.Error != "" {
			if _, seen := j.replayFailed[k]; !seen {
				j.replayFailed[k] = wire.FailedSample{Key: j.shards[e.Shard], Reason: "replay of " + failReason(e, r.Error), Epoch: e.Epoch}
				j.order = append(j.order, failedEntry{k, true})
				j.counts.ReplayFailed++
			}
		} else {
			j.counts.Replays++
		}
		return resultReplay, read
	}
	switch {
	case j.done[k]:
		return resultIgnored, read
	case r.Error != "":
		if _, seen := j.failed[k]; seen {
			return resultIgnored, read
		}
		j.failed[k] = wire.FailedSample{Key: j.shards[e.Shard], Reason: failReason(e, r.Error), Epoch: e.Epoch}
		j.order = append(j.order, failedEntry{k, false})
		return resultFailed, read
	}
	// A task that failed for one agent and was done by another is done.
	delete(j.failed, k)
	j.done[k] = true
	j.donePer[e.Epoch]++
	if j.source != nil {
		src := j.source(e.Shard)
		j.donePerSource[src]++
		j.samplesPerSrc[src] = sat.Add64(j.samplesPerSrc[src], int64(e.Samples))
	}
	j.counts.Samples = sat.Add64(j.counts.Samples, int64(e.Samples))
	j.counts.SampleFailures = sat.Add64(j.counts.SampleFailures, int64(e.FailedCount()))
	if j.firstFailed == nil && len(e.Failed) > 0 {
		// It may become the job's reason: bounded, whoever sent it.
		f := wire.FailedSample{Key: cut(e.Failed[0].Key), Reason: cut(e.Failed[0].Reason), Epoch: e.Epoch}
		j.firstFailed = &f
	}
	return resultDone, read
}

// addRead counts where a shard was read from.
func (j *jobResults) addRead(e wire.ShardEnd) bool {
	if j.reads == nil {
		j.reads = map[int]ShardReads{}
	}
	r := j.reads[e.Epoch]
	if !r.add(e) {
		return false
	}
	j.reads[e.Epoch] = r
	return true
}

// snapshot copies the counts out.
func (j *jobResults) snapshot() resultCounts {
	c := j.counts
	c.Done, c.Failed = len(j.done), len(j.failed)
	c.DonePerEpoch = maps.Clone(j.donePer)
	c.DonePerSource, c.SamplesPerSource = maps.Clone(j.donePerSource), maps.Clone(j.samplesPerSrc)
	c.Reads = maps.Clone(j.reads)
	if j.firstFailed != nil {
		f := *j.firstFailed
		c.FirstFailedSample = &f
	}
	for _, fe := range j.order {
		if len(c.FailedShards) == wire.MaxFailedShardsListed {
			break
		}
		m := j.failed
		if fe.replay {
			m = j.replayFailed
		}
		if f, ok := m[fe.key]; ok {
			c.FailedShards = append(c.FailedShards, f)
		}
	}
	return c
}

func failReason(e wire.ShardEnd, reason string) string {
	return fmt.Sprintf("epoch %d shard %d: %s", e.Epoch, e.Shard, cut(reason))
}

// cut bounds a failure's text from a result to wire.MaxReasonBytes.
func cut(s string) string {
	if len(s) > wire.MaxReasonBytes {
		return s[:wire.MaxReasonBytes] + "..."
	}
	return s
}
