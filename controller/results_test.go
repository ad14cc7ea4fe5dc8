package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// shardJob is a job of shards shards (keys s0, s1, ...) over epochs epochs.
func shardJob(id string, shards, epochs int) wire.Job {
	j := wire.Job{Spec: wire.JobSpec{ID: id, Epochs: epochs}.WithDefaults()}
	for i := range shards {
		j.Shards = append(j.Shards, fmt.Sprintf("s%d", i))
	}
	return j
}

func done(job string, epoch, shard, samples int, cache string) wire.ShardResult {
	return wire.ShardResult{Agent: "a", Key: fmt.Sprintf("s%d", shard), Sends: 1,
		End: wire.ShardEnd{Job: job, Epoch: epoch, Shard: shard, Samples: samples, Chunks: 1, Cache: cache, S3Bytes: 10, CacheBytes: 1}}
}

func failed(job string, epoch, shard int, why string) wire.ShardResult {
	return wire.ShardResult{Agent: "a", Key: fmt.Sprintf("s%d", shard), Sends: 3, Error: why,
		End: wire.ShardEnd{Job: job, Epoch: epoch, Shard: shard}}
}

func TestJobResultsCountsDistinctTasks(t *testing.T) {
	j := newJobResults(shardJob("j", 4, 2))
	withFailure := done("j", 0, 1, 3, "hit_memory")
	withFailure.End.AddFailed("s1#7", "bad jpeg")
	withFailure.End.FailedOmitted = 2
	retried := done("j", 1, 0, 4, "hit_disk")
	retried.Sends = 2
	replay := done("j", 0, 0, 4, "hit_memory")
	replay.Replay = true
	replayFailed := failed("j", 0, 2, "gone")
	replayFailed.Replay = true
	for _, r := range []wire.ShardResult{
		done("j", 0, 0, 4, "miss"),
		withFailure,
		done("j", 0, 0, 4, "miss"),       // done again by another agent: counted once
		failed("j", 1, 0, "bad request"), // failed, then done by another agent
		retried,
		failed("j", 1, 3, "too many failed sends"),
		failed("j", 1, 3, "too many failed sends"), // reported twice
		replay,
		replayFailed,
		done("other", 0, 0, 4, "miss"), // another job's
		done("j", 2, 0, 4, "miss"),     // no such epoch
		done("j", 0, 4, 4, "miss"),     // no such shard
	} {
		j.add(r)
	}
	got := j.snapshot()
	want := resultCounts{
		Done: 3, Failed: 1, DonePerEpoch: map[int]int{0: 2, 1: 1},
		Samples: 11, SampleFailures: 3, Redeliveries: 1 + 1 + 2 + 2 + 2 + 2,
		FailedShards: []wire.FailedSample{
			{Key: "s3", Reason: "epoch 1 shard 3: too many failed sends", Epoch: 1},
			{Key: "s2", Reason: "replay of epoch 0 shard 2: gone", Epoch: 0},
		},
		FirstFailedSample: &wire.FailedSample{Key: "s1#7", Reason: "bad jpeg", Epoch: 0},
		Replays:           1, ReplayFailed: 1, Malformed: 3,
		Reads: map[int]ShardReads{
			0: {S3Bytes: 40, CacheBytes: 4, Hits: 2, MemoryHits: 2, Misses: 2},
			1: {S3Bytes: 10, CacheBytes: 1, Hits: 1},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

// TestJobResultsBoundsFailedShards: a job whose every task fails lists the
// first wire.MaxFailedShardsListed of them; Failed counts them all.
func TestJobResultsBoundsFailedShards(t *testing.T) {
	j := newJobResults(shardJob("j", 500, 1))
	for s := range 500 {
		j.add(failed("j", 0, s, strings.Repeat("x", 2*wire.MaxReasonBytes)))
	}
	got := j.snapshot()
	if got.Failed != 500 || len(got.FailedShards) != wire.MaxFailedShardsListed {
		t.Fatalf("%d failed, %d listed; want 500 and %d", got.Failed, len(got.FailedShards), wire.MaxFailedShardsListed)
	}
	if f := got.FailedShards[0]; f.Key != "s0" || len(f.Reason) > wire.MaxReasonBytes+64 {
		t.Errorf("first failure %s, reason of %d bytes: want s0's, its reason cut", f.Key, len(f.Reason))
	}
	s := buildStatus(statusInputs{job: shardJob("j", 500, 1), results: got,
		prev: wire.JobStatus{FailedShards: make([]wire.FailedSample, 60)}}, time.Now())
	if len(s.FailedShards) != wire.MaxFailedShardsListed || s.Tasks.Failed != 500 {
		t.Errorf("status lists %d failed shards of %d; want %d of 500", len(s.FailedShards), s.Tasks.Failed, wire.MaxFailedShardsListed)
	}
}

// TestStatusCarriesAnEarlierOwnersCounts: a controller that took a job
// over adds its results to the status it found, and counts the tasks the
// consumer no longer holds as done when their results reached no one.
func TestStatusCarriesAnEarlierOwnersCounts(t *testing.T) {
	job := shardJob("j", 5, 2) // 10 tasks
	prev := wire.JobStatus{Job: "j", Tasks: wire.TaskCounts{Done: 3, Failed: 1, Redeliveries: 2},
		TasksDonePerEpoch: []int{3, 0}, SamplesProcessed: 30, SamplesFailed: 1}
	r := newJobResults(job)
	r.add(done("j", 1, 0, 10, ""))
	in := statusInputs{job: job, results: r.snapshot(), prev: prev}
	s := buildStatus(in, time.Now())
	if s.Tasks.Done != 4 || s.Tasks.Failed != 1 || s.Tasks.Redeliveries != 2 || s.SamplesProcessed != 40 ||
		!cmp.Equal(s.TasksDonePerEpoch, []int{3, 1}) {
		t.Errorf("status %+v per epoch %v, samples %d: want 4 done, 1 failed, 2 redeliveries, [3 1], 40 samples",
			s.Tasks, s.TasksDonePerEpoch, s.SamplesProcessed)
	}
	// The consumer holds 2 tasks: 8 settled, of which 1 failed.
	in.backlog = backlogCounts{Known: true, Queued: 2, Pending: 2}
	if s := buildStatus(in, time.Now()); s.Tasks.Done != 7 || s.Tasks.Pending != 2 {
		t.Errorf("tasks %+v, want 7 done (8 acked less 1 failed), 2 pending", s.Tasks)
	}
}

// TestStatusFromShardResults: the owner builds the job's status from the
// shard results its agents publish, and finishes it once its reader is
// through.
func TestStatusFromShardResults(t *testing.T) {
	e := newEnv(t, 3)
	e.startController(t, "c1", Options{})
	job := e.submit(t, spec("results", "img", 2))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if _, err := e.status("results"); err != nil {
			return err
		}
		return nil
	})
	key := func(shard int) string { return job.Shards[shard] }
	publish := func(r wire.ShardResult) {
		t.Helper()
		r.Key = key(r.End.Shard)
		data, _ := json.Marshal(r)
		if err := e.nc.Publish(wire.ResultSubject("results"), data); err != nil {
			t.Fatal(err)
		}
	}
	publish(done("results", 0, 0, 5, "miss"))
	publish(done("results", 0, 1, 5, "hit_disk"))
	publish(done("results", 0, 1, 5, "hit_disk")) // again: counted once
	publish(failed("results", 1, 2, "unknown pipeline"))
	if err := e.nc.Publish(wire.ResultSubject("results"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		s, err := e.status("results")
		if err != nil {
			return err
		}
		want := wire.TaskCounts{Total: 6, Done: 2, Failed: 1, Pending: 6, Redeliveries: 1 + 2}
		if diff := cmp.Diff(want, s.Tasks); diff != "" {
			return fmt.Errorf("tasks (-want +got):\n%s", diff)
		}
		if s.SamplesProcessed != 10 || !cmp.Equal(s.TasksDonePerEpoch, []int{2, 0}) || s.CacheHits != 2 || s.CacheMisses != 1 ||
			len(s.FailedShards) != 1 || s.FailedShards[0].Key != key(2) || !strings.Contains(s.FailedShards[0].Reason, "unknown pipeline") {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	e.readerDone(job, wire.DefaultReader, nil)
	s := e.waitState(t, "results", wire.JobSucceeded, 10*time.Second)
	if s.Tasks.Done != 2 || s.Tasks.Failed != 1 {
		t.Errorf("final tasks %+v, want the counts before the end", s.Tasks)
	}
}

// TestJobResultsTrustNoSizeFromAResult: a failure is listed under the
// shard's key in the job's record, not the key the result gives, and
// the first failed sample (which may become the job's reason) is cut to
// wire.MaxReasonBytes: anyone who may publish results could send a
// megabyte in each, and the status must stay one NATS message.
func TestJobResultsTrustNoSizeFromAResult(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	j := newJobResults(shardJob("j", 2, 1))
	bad := failed("j", 0, 0, huge)
	bad.Key = huge
	j.add(bad)
	withFailure := done("j", 0, 1, 3, "miss")
	withFailure.End.Failed = []wire.FailedSample{{Key: huge, Reason: huge}}
	j.add(withFailure)
	got := j.snapshot()
	if len(got.FailedShards) != 1 || got.FailedShards[0].Key != "s0" || len(got.FailedShards[0].Reason) > wire.MaxReasonBytes+64 {
		t.Errorf("failed shards %d, the first under a key of %d bytes with %d bytes of reason; want s0 with a cut reason",
			len(got.FailedShards), len(got.FailedShards[0].Key), len(got.FailedShards[0].Reason))
	}
	if f := got.FirstFailedSample; f == nil || len(f.Key) > wire.MaxReasonBytes+3 || len(f.Reason) > wire.MaxReasonBytes+3 {
		t.Errorf("first failed sample of %d+%d bytes, want each cut to %d", len(f.Key), len(f.Reason), wire.MaxReasonBytes)
	}
}

// TestStatusCountsFailedReplays: failed replays are listed after the
// tasks given up on, and counted, also over a takeover.
func TestStatusCountsFailedReplays(t *testing.T) {
	job := shardJob("j", 2, 1)
	j := newJobResults(job)
	r := failed("j", 0, 1, "gone")
	r.Replay = true
	j.add(r)
	s := buildStatus(statusInputs{job: job, results: j.snapshot(), prev: wire.JobStatus{ReplaysFailed: 2}}, time.Now())
	if s.ReplaysFailed != 3 || len(s.FailedShards) != 1 || s.Tasks.Failed != 0 {
		t.Errorf("replays failed %d, listed %d, tasks failed %d; want 3, 1, 0", s.ReplaysFailed, len(s.FailedShards), s.Tasks.Failed)
	}
}

// TestTasksGivenUpCountWithTheirResultsLost: a task an agent gave up on
// while no controller owned the job (a takeover) has no result here, but
// the agents' record of tasks given up (wire.ShardsFailedKey) has it: the
// final status counts it failed and lists it, not done.
func TestTasksGivenUpCountWithTheirResultsLost(t *testing.T) {
	e := newEnv(t, 3)
	e.startController(t, "c1", Options{})
	job := e.submit(t, spec("lost", "img", 1))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := e.status("lost")
		return err
	})
	for shard := range 2 {
		r := done("lost", 0, shard, 5, "miss")
		r.Key = job.Shards[shard]
		data, _ := json.Marshal(r)
		if err := e.nc.Publish(wire.ResultSubject("lost"), data); err != nil {
			t.Fatal(err)
		}
	}
	rec := wire.ShardsFailed{Submitted: job.Submitted}
	rec.Add(wire.FailedSample{Key: job.Shards[2], Epoch: 0, Reason: "shard not found"})
	data, _ := json.Marshal(rec)
	readers, err := e.js.KeyValue(context.Background(), wire.ReadersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readers.Put(context.Background(), wire.ShardsFailedKey("lost"), data); err != nil {
		t.Fatal(err)
	}
	// Every task left the queue (the agents acked them).
	cons, err := e.js.Consumer(context.Background(), wire.TaskStream, wire.DispatchConsumer("lost"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b, err := cons.Fetch(1)
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			if err := m.DoubleAck(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.readerDone(job, wire.DefaultReader, nil)
	s := e.waitState(t, "lost", wire.JobSucceeded, 10*time.Second)
	if s.Tasks.Done != 2 || s.Tasks.Failed != 1 || len(s.FailedShards) != 1 || s.FailedShards[0].Key != job.Shards[2] ||
		!strings.Contains(s.FailedShards[0].Reason, "shard not found") {
		t.Errorf("final tasks %+v, failed shards %+v; want 2 done, 1 failed: %s", s.Tasks, s.FailedShards, job.Shards[2])
	}
}

// TestForgedCountsNeitherWrapNorCount: results whose counts are past
// their bounds (sends 2^62, as forged on the result subject) are dropped
// as malformed, and the job's sums stay within range whatever an earlier
// owner's stored status holds: job status never shows a negative count.
func TestForgedCountsNeitherWrapNorCount(t *testing.T) {
	job := shardJob("j", 2, 1)
	j := newJobResults(job)
	j.add(done("j", 0, 0, 4, "miss"))
	forged := []wire.ShardResult{}
	for range 3 {
		r := done("j", 0, 0, 4, "miss")
		r.Sends = 1 << 62
		forged = append(forged, r)
	}
	huge := done("j", 0, 1, 1<<40, "miss")
	huge.End.S3Bytes = 1 << 62
	negative := done("j", 0, 1, -5, "miss")
	forged = append(forged, huge, negative)
	for _, r := range forged {
		if kind, _ := j.add(r); kind != resultMalformed {
			t.Errorf("result %+v: %v, want malformed", r, kind)
		}
	}
	c := j.snapshot()
	if c.Redeliveries != 0 || c.Samples != 4 || c.Malformed != len(forged) {
		t.Errorf("after forged results: redeliveries %d samples %d malformed %d, want 0, 4, %d", c.Redeliveries, c.Samples, c.Malformed, len(forged))
	}

	// Counts in bounds, on top of a stored status near the top of the
	// range: held there, not wrapped.
	again := done("j", 0, 0, 4, "miss")
	again.Sends = wire.MaxShardSends
	j.add(again)
	prev := wire.JobStatus{Job: "j", Tasks: wire.TaskCounts{Redeliveries: math.MaxInt - 1}, SamplesProcessed: math.MaxInt64 - 1}
	s := buildStatus(statusInputs{job: job, results: j.snapshot(), prev: prev}, time.Now())
	if s.Tasks.Redeliveries != math.MaxInt || s.SamplesProcessed != math.MaxInt64 {
		t.Errorf("redeliveries %d, samples processed %d: want held at the top of the range", s.Tasks.Redeliveries, s.SamplesProcessed)
	}
}

// TestEndedJobHasNothingPending: a succeeded job's status shows no task
// pending or in flight, whatever the agents' last signals wanted.
func TestEndedJobHasNothingPending(t *testing.T) {
	job := shardJob("j", 5, 2)
	in := statusInputs{job: job, results: newJobResults(job).snapshot(),
		backlog: backlogCounts{Known: true, Queued: 0, Pending: 14, InFlight: 2}}
	if s := buildStatus(in, time.Now()); s.Tasks.Pending != 14 || s.Tasks.InFlight != 2 {
		t.Fatalf("running: tasks %+v, want 14 pending, 2 in flight", s.Tasks)
	}
	in.job.State = wire.JobSucceeded
	if s := buildStatus(in, time.Now()); s.Tasks.Pending != 0 || s.Tasks.InFlight != 0 {
		t.Errorf("succeeded: tasks %+v, want nothing pending or in flight", s.Tasks)
	}
}
