package broker

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

func TestTransitionLetsExactlyOneOfConcurrentChangesWin(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	e.submit(t, testSpec("race", 1))

	// Two controllers (and more) take the queued job at once: only one
	// may move it to running.
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = e.b.Transition(ctx, "race", wire.JobRunning, "", func(from wire.JobState) bool { return from == wire.JobQueued })
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrTransition) || !strings.Contains(err.Error(), "job race is running"):
			t.Errorf("losing transition: %v, want ErrTransition naming the state it found", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d transitions won, want exactly 1", won)
	}
	job, err := e.b.Job(ctx, "race")
	if err != nil {
		t.Fatal(err)
	}
	if job.State != wire.JobRunning || job.Updated.Before(job.Submitted) {
		t.Errorf("record state %s updated %v (submitted %v): want running, updated after submission", job.State, job.Updated, job.Submitted)
	}

	// Changes allowed from any state all land, one after the other.
	for i := range n {
		errs[i] = nil
	}
	for i := range n {
		wg.Go(func() {
			_, errs[i] = e.b.Transition(ctx, "race", wire.JobRunning, "renewed", func(wire.JobState) bool { return true })
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("unconditional transition: %v", err)
		}
	}

	if _, err := e.b.Transition(ctx, "nope", wire.JobRunning, "", func(wire.JobState) bool { return true }); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("transition of an unknown job: %v, want ErrJobNotFound", err)
	}
}

// leftovers lists what of job id exists in JetStream: record, tasks, its
// task consumer, dispatch plan, status, lease, reader positions and the
// record of tasks given up.
func leftovers(t *testing.T, e env, id string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	kvs, err := e.b.buckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []jetstream.KeyValue{kvs.jobs, kvs.status, kvs.leases} {
		if _, err := kv.Get(ctx, id); err == nil {
			out = append(out, kv.Bucket()+" key")
		}
	}
	keys, err := listKeys(ctx, kvs.readers, wire.ReaderKey(id, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		out = append(out, "reader position "+k)
	}
	done, err := listKeys(ctx, kvs.readers, wire.ReaderDoneKey(id, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range done {
		out = append(out, "reader done "+k)
	}
	if _, err := kvs.readers.Get(ctx, wire.ShardsFailedKey(id)); err == nil {
		out = append(out, "shards failed")
	}
	if n := taskCount(t, e.js, id); n > 0 {
		out = append(out, "tasks")
	}
	tasks, err := e.js.Stream(ctx, wire.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	names := tasks.ConsumerNames(ctx)
	for name := range names.Name() {
		if name == wire.DispatchConsumer(id) {
			out = append(out, "consumer "+name)
		}
	}
	if names.Err() != nil {
		t.Fatal(names.Err())
	}
	if hasPlan(t, e, id) {
		out = append(out, "dispatch plan")
	}
	return out
}

// controlled makes job id look as a controller and agents running it
// would: its task consumer, a lease, a status, a dispatch plan and reader
// positions.
func controlled(t *testing.T, e env, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.b.Transition(ctx, id, wire.JobRunning, "", func(from wire.JobState) bool { return from == wire.JobQueued }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateOrUpdateConsumer(ctx, wire.TaskStream, streams.Dispatch(id, 0)); err != nil {
		t.Fatal(err)
	}
	kvs, err := e.b.buckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	put := func(kv jetstream.KeyValue, key string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	put(kvs.leases, id, wire.Lease{Owner: "ctl-1", Expires: now.Add(time.Minute), Acquired: now})
	put(kvs.status, id, wire.JobStatus{Job: id, State: wire.JobRunning, Owner: "ctl-1", Updated: now})
	put(kvs.dispatch, id, wire.DispatchPlan{Job: id, Time: now, Endpoints: []string{"http://127.0.0.1:1"}, PerEndpoint: 1, InFlight: 1})
	job, err := e.b.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range job.Spec.Readers {
		put(kvs.readers, wire.ReaderKey(id, r), map[string]int{"delivered": 3})
	}
	put(kvs.readers, wire.ShardsFailedKey(id), wire.ShardsFailed{Submitted: job.Submitted, Total: 1})
}

func TestCancelReleasesEverythingWithoutAController(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	spec := testSpec("c", 2)
	spec.Readers = []string{"rank0", "rank1"}
	e.submit(t, spec)
	e.submit(t, testSpec("other", 2))
	controlled(t, e, "c")
	controlled(t, e, "other")
	before := leftovers(t, e, "c")
	for _, w := range []string{"tasks", "consumer " + wire.DispatchConsumer("c"), "dispatch plan"} {
		if !slices.Contains(before, w) {
			t.Fatalf("before cancel: %v lacks %s", before, w)
		}
	}

	job, err := e.b.Cancel(ctx, "c", "not needed")
	if err != nil {
		t.Fatal(err)
	}
	if job.State != wire.JobCancelled || job.Reason != "not needed" {
		t.Errorf("cancelled record: state %s reason %q", job.State, job.Reason)
	}
	// The record (now cancelled), status, lease and reader positions stay
	// for status and delete; no work, consumer or plan is left.
	want := []string{wire.JobsBucket + " key", wire.StatusBucket + " key", wire.LeasesBucket + " key",
		"reader position " + wire.ReaderKey("c", "rank0"), "reader position " + wire.ReaderKey("c", "rank1"), "shards failed"}
	if got := leftovers(t, e, "c"); !slices.Equal(got, want) {
		t.Errorf("after cancel: %v, want only %v", got, want)
	}
	if got := leftovers(t, e, "other"); len(got) != 8 {
		t.Errorf("other job after cancel: %v, want all it had", got)
	}

	_, err = e.b.Cancel(ctx, "c", "again")
	if !errors.Is(err, ErrTransition) || !strings.Contains(err.Error(), "job c is already cancelled") {
		t.Errorf("cancelling twice: %v, want ErrTransition naming the state", err)
	}
	if job, _ := e.b.Job(ctx, "c"); job.Reason != "not needed" {
		t.Errorf("refused cancel changed the reason to %q", job.Reason)
	}

	// A finished job is not cancelled, and keeps what it has.
	if _, err := e.b.Transition(ctx, "other", wire.JobSucceeded, "", func(wire.JobState) bool { return true }); err != nil {
		t.Fatal(err)
	}
	_, err = e.b.Cancel(ctx, "other", "")
	if !errors.Is(err, ErrTransition) || !strings.Contains(err.Error(), "job other is already succeeded") {
		t.Errorf("cancelling a succeeded job: %v, want ErrTransition naming the state", err)
	}
	if _, err := e.b.Cancel(ctx, "nope", ""); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("cancelling an unknown job: %v, want ErrJobNotFound", err)
	}
}

func TestDeleteRefusesRunningJobUnlessForcedThenRemovesEverything(t *testing.T) {
	e := newEnv(t, 3)
	ctx := context.Background()
	spec := testSpec("d", 2)
	spec.Readers = []string{"rank0", "rank1"}
	e.submit(t, spec)
	e.submit(t, testSpec("other", 1))
	controlled(t, e, "d")
	controlled(t, e, "other")
	before := leftovers(t, e, "d")

	err := e.b.Delete(ctx, "d", false)
	if !errors.Is(err, ErrJobActive) || err.Error() != "job d is running: cancel it first or use --force" {
		t.Fatalf("deleting a running job: %v, want ErrJobActive saying what to do", err)
	}
	if got := leftovers(t, e, "d"); !slices.Equal(got, before) {
		t.Errorf("refused delete changed what the job has: %v, had %v", got, before)
	}
	if job, _ := e.b.Job(ctx, "d"); job.State != wire.JobRunning {
		t.Errorf("refused delete left the job %s", job.State)
	}

	if err := e.b.Delete(ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, e, "d"); len(got) != 0 {
		t.Errorf("after forced delete: %v left", got)
	}
	if got := leftovers(t, e, "other"); len(got) != 8 {
		t.Errorf("other job after delete: %v, want all it had", got)
	}
	if err := e.b.Delete(ctx, "d", true); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("deleting twice: %v, want ErrJobNotFound", err)
	}

	// A finished job needs no force.
	if _, err := e.b.Cancel(ctx, "other", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Delete(ctx, "other", false); err != nil {
		t.Fatalf("deleting a cancelled job: %v", err)
	}
	if got := leftovers(t, e, "other"); len(got) != 0 {
		t.Errorf("after delete of a cancelled job: %v left", got)
	}
}

// TestCancelMidRunLeavesNoWorkBehind cancels a job while an agent holds
// one of its tasks unacked, as it does while the shard's samples are
// handed out: the agent's ack then finds nothing, and no task, consumer or
// plan is left.
func TestCancelMidRunLeavesNoWorkBehind(t *testing.T) {
	e := newEnv(t, 3)
	ctx := context.Background()
	e.submit(t, testSpec("m", 2))
	controlled(t, e, "m")
	cons, err := e.js.Consumer(ctx, wire.TaskStream, wire.DispatchConsumer("m"))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var held []jetstream.Msg
	for m := range batch.Messages() {
		held = append(held, m)
	}
	if len(held) != 1 {
		t.Fatalf("agent took %d tasks, want 1 (%v)", len(held), batch.Error())
	}
	if _, err := e.b.Cancel(ctx, "m", "mid-run"); err != nil {
		t.Fatal(err)
	}
	_ = held[0].Ack() // as the agent finishing its shard would
	want := []string{wire.JobsBucket + " key", wire.StatusBucket + " key", wire.LeasesBucket + " key", "reader position " + wire.ReaderKey("m", wire.DefaultReader), "shards failed"}
	if got := leftovers(t, e, "m"); !slices.Equal(got, want) {
		t.Errorf("after cancel mid-run: %v, want only %v", got, want)
	}
	if err := e.b.Delete(ctx, "m", false); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, e, "m"); len(got) != 0 {
		t.Errorf("after delete: %v left", got)
	}
}

// TestReaderRecordsOfJobsNamedLikeKeyKindsStayApart: a job named "failed"
// whose reader is "trainer" and a job named "trainer" both keep their
// records in the readers bucket (the reader's position, the tasks given
// up), and deleting one leaves the other's. With the position at
// job.reader, the first's position was the second's failed record.
func TestReaderRecordsOfJobsNamedLikeKeyKindsStayApart(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	for _, id := range []string{"failed", "trainer", "done", "pos"} {
		e.submit(t, testSpec(id, 1))
		controlled(t, e, id)
	}
	kvs, err := e.b.buckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"failed", "trainer", "done", "pos"} {
		want := []string{wire.JobsBucket + " key", wire.StatusBucket + " key", wire.LeasesBucket + " key",
			"reader position " + wire.ReaderKey(id, wire.DefaultReader), "shards failed", "tasks",
			"consumer " + wire.DispatchConsumer(id), "dispatch plan"}
		if got := leftovers(t, e, id); !slices.Equal(got, want) {
			t.Errorf("job %s: %v, want %v", id, got, want)
		}
		e, err := kvs.readers.Get(ctx, wire.ShardsFailedKey(id))
		if err != nil {
			t.Fatal(err)
		}
		var rec wire.ShardsFailed
		if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.Total != 1 {
			t.Errorf("job %s: record of tasks given up %s (%v), want Total 1", id, e.Value(), err)
		}
	}
	if err := e.b.Delete(ctx, "failed", true); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Delete(ctx, "done", true); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"trainer", "pos"} {
		if got := leftovers(t, e, id); len(got) != 8 {
			t.Errorf("job %s after deleting jobs failed and done: %v, want all it had", id, got)
		}
	}
}
