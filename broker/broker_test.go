package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/jobspec"
	"github.com/sluice-project/sluice/wire"
)

func TestSubmitQueuesEveryShardOfEveryEpochInShardOrder(t *testing.T) {
	e := newEnv(t, 5)
	ctx := context.Background()
	job := e.submit(t, testSpec("j1", 3))

	if len(job.Shards) != 5 || job.Bucket != "data" || job.Spec.ChunkMaxBytes != wire.DefaultChunkMaxBytes {
		t.Fatalf("job = %+v, want 5 shards in bucket data, default chunk size", job)
	}
	if !slices.IsSorted(job.Shards) || !strings.HasPrefix(job.Shards[0], "ds/") {
		t.Fatalf("shards %v: want sorted keys under ds/", job.Shards)
	}
	tasks := storedTasks(t, e.js, "j1")
	if len(tasks) != job.Tasks() || len(tasks) != 15 {
		t.Fatalf("%d tasks in stream, want %d", len(tasks), job.Tasks())
	}
	ids := map[string]bool{}
	for epoch := range 3 {
		var order []int
		for _, st := range tasks[epoch*5 : (epoch+1)*5] {
			task := st.task
			if task.Epoch != epoch {
				t.Fatalf("task %s among epoch %d's", task.ID(), epoch)
			}
			order = append(order, task.Shard)
			want := wire.ShardTask{
				Job: "j1", Epoch: epoch, Shard: task.Shard, Bucket: "data", Key: job.Shards[task.Shard],
				Pipeline: "imagenet-train", Seed: 11, ChunkMaxBytes: wire.DefaultChunkMaxBytes,
			}
			if diff := cmp.Diff(want, task, cmpopts.EquateComparable(wire.Columns{})); diff != "" {
				t.Errorf("task (-want +got):\n%s", diff)
			}
			if err := task.Validate(); err != nil {
				t.Error(err)
			}
			if !strings.HasPrefix(st.msgID, task.ID()+"@") || ids[st.msgID] {
				t.Errorf("task %s has msg id %q: want a unique id starting %q", task.ID(), st.msgID, task.ID()+"@")
			}
			ids[st.msgID] = true
		}
		if diff := cmp.Diff(ShardOrder(11, epoch, 5), order); diff != "" {
			t.Errorf("epoch %d queued out of ShardOrder (-want +got):\n%s", epoch, diff)
		}
	}

	got, err := e.b.Job(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(job, got); diff != "" {
		t.Errorf("stored job record (-submitted +stored):\n%s", diff)
	}

	// The job's agents share one durable consumer, holding every task.
	cons, err := e.js.Consumer(ctx, wire.TaskStream, wire.DispatchConsumer("j1"))
	if err != nil {
		t.Fatalf("task consumer: %v", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Config; c.FilterSubject != wire.TaskSubject("j1") || c.AckPolicy != jetstream.AckExplicitPolicy ||
		c.AckWait != streams.DispatchAckWait || c.MaxDeliver != -1 || info.NumPending != 15 {
		t.Errorf("task consumer %+v with %d pending: want the job's subject, explicit acks, the default ack wait, no delivery limit, 15 tasks", c, info.NumPending)
	}

	_, err = e.b.Submit(ctx, testSpec("j1", 1))
	if !errors.Is(err, ErrJobExists) || !strings.Contains(err.Error(), "j1") {
		t.Errorf("resubmitting j1: err = %v, want ErrJobExists naming j1", err)
	}
	if n := taskCount(t, e.js, "j1"); n != 15 {
		t.Errorf("after refused resubmit: %d tasks, want 15", n)
	}
}

func TestSubmitRefusesBadJobsClearlyAndLeavesNothing(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	spec := func(f func(*wire.JobSpec)) wire.JobSpec {
		s := testSpec("bad", 1)
		f(&s)
		return s
	}
	for _, c := range []struct {
		name string
		spec wire.JobSpec
		want []string
		is   error
	}{
		{"missing bucket", spec(func(s *wire.JobSpec) { s.Dataset = "s3://nope/ds/" }), []string{"nope", "NoSuchBucket"}, nil},
		{"empty prefix", spec(func(s *wire.JobSpec) { s.Dataset = "s3://data/empty/" }), []string{"s3://data/empty/", "no shards"}, objstore.ErrNoShards},
		{"not s3", spec(func(s *wire.JobSpec) { s.Dataset = "http://data/ds/" }), []string{"http://data/ds/", "s3://bucket/prefix/"}, nil},
		{"batch size", spec(func(s *wire.JobSpec) { s.BatchSize = 0 }), []string{"batch_size: 0"}, nil},
		{"epochs", spec(func(s *wire.JobSpec) { s.Epochs = 0 }), []string{"epochs: 0"}, nil},
		{"no pipeline", spec(func(s *wire.JobSpec) { s.Pipeline = "" }), []string{"pipeline"}, nil},
		{"job id", spec(func(s *wire.JobSpec) { s.ID = "a.b" }), []string{`id: "a.b"`}, nil},
		{"chunk too large", spec(func(s *wire.JobSpec) { s.ChunkMaxBytes = 128 << 20 }), []string{"chunk_max_bytes: 134217728"}, jobspec.ErrInvalid},
		{"unknown pipeline", spec(func(s *wire.JobSpec) { s.Pipeline = "nosuch" }),
			[]string{`pipeline: unknown pipeline "nosuch": known pipelines are`, "imagenet-train", "text-wordpiece"}, jobspec.ErrInvalid},
		{"bad inline pipeline", spec(func(s *wire.JobSpec) {
			s.Pipeline = "ops:\n  - decode\n  - op: resize\n    size: 0\n  - to_uint8_hwc\n"
		}),
			[]string{"pipeline: line 4: ops[1] (resize): size 0: want 1..8192"}, jobspec.ErrInvalid},
		{"every problem at once", spec(func(s *wire.JobSpec) { s.BatchSize, s.Epochs, s.Pipeline = 0, 0, "nosuch" }),
			[]string{"3 problems", "batch_size: 0", "epochs: 0", `unknown pipeline "nosuch"`}, jobspec.ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.b.Submit(ctx, c.spec)
			if err == nil {
				t.Fatal("submitted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %q is not %v", err, c.is)
			}
			if _, err := e.b.Job(ctx, "bad"); !errors.Is(err, ErrJobNotFound) {
				t.Errorf("job record after refused submit: %v", err)
			}
			if _, err := e.js.Consumer(ctx, wire.TaskStream, wire.DispatchConsumer("bad")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Errorf("task consumer after refused submit: %v", err)
			}
			if n := taskCount(t, e.js, "bad"); n != 0 {
				t.Errorf("%d tasks after refused submit", n)
			}
		})
	}
}

func TestDeleteRemovesJobAndOnlyItsTasks(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	e.submit(t, testSpec("gone", 2))
	e.submit(t, testSpec("kept", 2))
	putPlan(t, e, "gone")
	putPlan(t, e, "kept")

	if err := e.b.Delete(ctx, "gone", false); !errors.Is(err, ErrJobActive) || err.Error() != "job gone is queued: cancel it first or use --force" {
		t.Fatalf("deleting a queued job without force: %v, want ErrJobActive saying what to do", err)
	}
	if n := taskCount(t, e.js, "gone"); n != 8 {
		t.Fatalf("refused delete left %d tasks, want 8", n)
	}
	if err := e.b.Delete(ctx, "gone", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Job(ctx, "gone"); !errors.Is(err, ErrJobNotFound) || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Job after Delete: %v, want ErrJobNotFound naming it", err)
	}
	if _, err := e.js.Consumer(ctx, wire.TaskStream, wire.DispatchConsumer("gone")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("task consumer after Delete: %v", err)
	}
	if hasPlan(t, e, "gone") || !hasPlan(t, e, "kept") {
		t.Errorf("dispatch plans after Delete: gone's %v, kept's %v; want only kept's", hasPlan(t, e, "gone"), hasPlan(t, e, "kept"))
	}
	if n := taskCount(t, e.js, "gone"); n != 0 {
		t.Errorf("%d tasks of the deleted job left", n)
	}
	if n := taskCount(t, e.js, "kept"); n != 8 {
		t.Errorf("other job has %d tasks after Delete, want 8", n)
	}
	if _, err := e.b.Job(ctx, "kept"); err != nil {
		t.Errorf("other job after Delete: %v", err)
	}
	if err := e.b.Delete(ctx, "gone", false); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("deleting twice: %v, want ErrJobNotFound", err)
	}

	// The same id again, within the duplicate window: its tasks must not be
	// dropped as duplicates of the deleted job's.
	e.submit(t, testSpec("gone", 2))
	if n := taskCount(t, e.js, "gone"); n != 8 {
		t.Errorf("resubmitted job has %d tasks, want 8", n)
	}
}

func TestQueueTasksInWindows(t *testing.T) {
	e := newEnv(t, 1)
	if err := streams.Ensure(context.Background(), e.js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	job := manyTaskJob("big", 250, 10) // 2500 tasks: past two publish windows
	if err := e.b.queueTasks(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	tasks := storedTasks(t, e.js, "big")
	if len(tasks) != 2500 {
		t.Fatalf("%d tasks stored, want 2500", len(tasks))
	}
	seen := map[string]bool{}
	for i, st := range tasks {
		if seen[st.task.ID()] {
			t.Fatalf("task %s stored twice", st.task.ID())
		}
		seen[st.task.ID()] = true
		if st.task.Epoch != i/250 {
			t.Fatalf("task %d is of epoch %d, want %d", i, st.task.Epoch, i/250)
		}
	}
}

// TestSubmitKeepsTheControllersAckWait: a controller that takes the job
// between its record and its consumer creates the consumer with its own
// ack wait; Submit then keeps it rather than resetting the default.
func TestSubmitKeepsTheControllersAckWait(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	if err := streams.Ensure(ctx, e.js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateConsumer(ctx, wire.TaskStream, streams.Dispatch("early", 3*time.Second)); err != nil {
		t.Fatal(err)
	}
	e.submit(t, testSpec("early", 1))
	cons, err := e.js.Consumer(ctx, wire.TaskStream, wire.DispatchConsumer("early"))
	if err != nil {
		t.Fatal(err)
	}
	if wait := cons.CachedInfo().Config.AckWait; wait != 3*time.Second {
		t.Errorf("task consumer ack wait %v, want the controller's 3s", wait)
	}
	// The consumer counts the tasks Submit queued (once read 0 right
	// after, with every package's tests on two cores).
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 2 {
			return fmt.Errorf("%d tasks pending, want 2", info.NumPending)
		}
		return nil
	})
}

func TestEnsureStreamsIsIdempotent(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	for range 2 {
		if err := streams.Ensure(ctx, e.js, streams.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := e.js.Stream(ctx, wire.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if cfg.Retention != jetstream.WorkQueuePolicy || cfg.Storage != jetstream.FileStorage ||
		!slices.Equal(cfg.Subjects, []string{wire.TaskSubjects}) || cfg.Duplicates < time.Minute {
		t.Errorf("task stream config %+v", cfg)
	}
	if _, err := e.js.KeyValue(ctx, wire.JobsBucket); err != nil {
		t.Error(err)
	}
}

func manyTaskJob(id string, shards, epochs int) wire.Job {
	spec := testSpec(id, epochs)
	spec.ChunkMaxBytes = wire.DefaultChunkMaxBytes
	job := wire.Job{Spec: spec, Bucket: "data", Submitted: time.Now()}
	for i := range shards {
		job.Shards = append(job.Shards, fmt.Sprintf("ds/shard-%06d.tar", i))
	}
	return job
}

func BenchmarkQueueTasks(b *testing.B) {
	e := newEnv(b, 1)
	if err := streams.Ensure(context.Background(), e.js, streams.Options{}); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		job := manyTaskJob(fmt.Sprintf("bench%d", i), 1000, 10)
		if err := e.b.queueTasks(context.Background(), job); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(10000, "tasks/op")
}

func TestSubmitThatFailsToQueueRollsBack(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	if _, err := e.b.jobsBucket(ctx); err != nil { // the broker ensures streams once, now
		t.Fatal(err)
	}
	// A task stream that takes only 3 messages refuses the 4th task.
	s, err := e.js.Stream(ctx, wire.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs, cfg.Discard = 3, jetstream.DiscardNew
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Submit(ctx, testSpec("jx", 1)); err == nil || !strings.Contains(err.Error(), "jx") {
		t.Fatalf("Submit into a full task stream: %v, want an error naming the job", err)
	}
	if _, err := e.b.Job(ctx, "jx"); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("record after failed submit: %v", err)
	}
	if _, err := e.js.Consumer(ctx, wire.TaskStream, wire.DispatchConsumer("jx")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("task consumer after failed submit: %v", err)
	}
	if n := taskCount(t, e.js, "jx"); n != 0 {
		t.Errorf("%d tasks left after failed submit", n)
	}

	if err := streams.Ensure(ctx, e.js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	e.submit(t, testSpec("jx", 1))
	if n := taskCount(t, e.js, "jx"); n != 4 {
		t.Errorf("retried submit queued %d tasks, want 4", n)
	}
}

// TestSubmitRefusesAJobOverTheTaskBounds: a job whose tasks (shards x
// epochs) or their stored bytes would pass the bounds is refused at
// Submit, the error naming the bound and the job's figure, and nothing is
// stored; a job just under them is queued.
func TestSubmitRefusesAJobOverTheTaskBounds(t *testing.T) {
	e := newEnv(t, 101)
	ctx := context.Background()
	// 101 shards x 10,000 epochs: 1,010,000 tasks.
	_, err := e.b.Submit(ctx, testSpec("many", 10000))
	if err == nil || !strings.Contains(err.Error(), "1010000 tasks (101 shards x 10000 epochs)") ||
		!strings.Contains(err.Error(), fmt.Sprintf("limit of %d tasks", MaxJobTasks)) {
		t.Errorf("submitting 101 shards x 10000 epochs: %v, want refused naming 1010000 tasks and the limit", err)
	}
	if got := leftovers(t, e, "many"); len(got) != 0 {
		t.Errorf("a refused submit left %v", got)
	}

	// 26 shards with keys of 1,000 bytes x 10,000 epochs: 260,000 tasks,
	// under MaxJobTasks, but about 300 MB of them.
	for i := range 26 {
		key := fmt.Sprintf("long/%s-%03d.tar", strings.Repeat("k", 985), i)
		if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String(key), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	spec := testSpec("long", 10000)
	spec.Dataset = "s3://data/long/"
	_, err = e.b.Submit(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), "260000 tasks (26 shards x 10000 epochs)") ||
		!strings.Contains(err.Error(), fmt.Sprintf("limit of %d MiB", MaxJobTaskBytes>>20)) || !strings.Contains(err.Error(), "998 bytes on average") {
		t.Errorf("submitting 26 long keys x 10000 epochs: %v, want refused naming the bytes, the limit and the keys' length", err)
	}
	if got := leftovers(t, e, "long"); len(got) != 0 {
		t.Errorf("a refused submit left %v", got)
	}
	// Under both: queued.
	spec = testSpec("fits", 3)
	spec.Dataset = "s3://data/long/"
	if job := e.submit(t, spec); taskCount(t, e.js, "fits") != job.Tasks() {
		t.Errorf("a job under the bounds: %d tasks stored, want %d", taskCount(t, e.js, "fits"), job.Tasks())
	}
}
