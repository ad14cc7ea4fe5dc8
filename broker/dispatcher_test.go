package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// taskIDs lists job's task ids, epoch by epoch, shard by shard.
func taskIDs(job wire.Job) []string {
	var ids []string
	for e := range job.Spec.Epochs {
		for s := range job.Shards {
			ids = append(ids, wire.ShardTask{Job: job.Spec.ID, Epoch: e, Shard: s}.ID())
		}
	}
	return ids
}

// readyFunc adapts a function to ReadyReplicas.
type readyFunc func() int

func (f readyFunc) Ready(string) int { return f() }

func capacity(n int) ReadyReplicas { return readyFunc(func() int { return n }) }

// runAsync runs d until it returns, reporting on the channel.
func runAsync(ctx context.Context, d *Dispatcher) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	return errc
}

func wait(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(time.Minute):
		t.Fatal("dispatcher did not return")
		return nil
	}
}

func TestDispatcherRetriesTransientAndReportsPermanentFailures(t *testing.T) {
	e := newEnv(t, 6)
	ctx := context.Background()
	job := e.submit(t, testSpec("jf", 2))
	ids := taskIDs(job)
	f := &fakeTarget{
		failFirst: map[string]bool{ids[0]: true, ids[3]: true, ids[7]: true},
		permanent: map[string]bool{ids[5]: true},
		always:    map[string]bool{ids[10]: true},
	}
	reg := prometheus.NewRegistry()
	d, err := NewDispatcher(ctx, e.js, job, f, DispatcherOptions{Replicas: capacity(4), AckWait: 2 * time.Second, MaxDeliver: 3}, nil, NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(t, runAsync(ctx, d)); err != nil {
		t.Fatal(err)
	}

	calls, succeeded, _ := f.snapshot()
	for _, id := range ids {
		wantCalls, wantOK := 1, 1
		switch {
		case f.permanent[id]:
			wantOK = 0
		case f.always[id]:
			wantCalls, wantOK = 3, 0
		case f.failFirst[id]:
			wantCalls = 2
		}
		if calls[id] != wantCalls || succeeded[id] != wantOK {
			t.Errorf("task %s: sent %d times, succeeded %d; want %d, %d", id, calls[id], succeeded[id], wantCalls, wantOK)
		}
	}

	st := d.Stats()
	want := DispatchStats{
		Total: 12, Done: 10, Failed: 2,
		Redeliveries: 3 + 2, SendErrors: 3 + 1 + 3,
		Results: map[int]int{0: 5, 1: 5},
		Samples: 20, Chunks: 10, Bytes: 1000,
	}
	if diff := cmp.Diff(want, st, cmpopts.IgnoreFields(DispatchStats{}, "FailedShards")); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	slices.SortFunc(st.FailedShards, func(a, b wire.FailedSample) int { return strings.Compare(a.Reason, b.Reason) })
	if len(st.FailedShards) != 2 ||
		st.FailedShards[0].Key != job.Shards[5] || !strings.Contains(st.FailedShards[0].Reason, "epoch 0 shard 5: ") ||
		!strings.Contains(st.FailedShards[0].Reason, "unknown pipeline") ||
		st.FailedShards[1].Key != job.Shards[4] || !strings.Contains(st.FailedShards[1].Reason, "epoch 1 shard 4: gave up after 3") {
		t.Errorf("failed shards %+v: want shard 5 of epoch 0 (permanent) and shard 4 of epoch 1 (3 failures)", st.FailedShards)
	}

	// Acked and terminated tasks leave the work queue.
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := taskCount(t, e.js, "jf"); n != 0 {
			return fmt.Errorf("%d tasks left in the stream", n)
		}
		return nil
	})

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_broker_tasks", map[string]string{"job": "jf"}, 12},
		{"sluice_broker_tasks_done_total", map[string]string{"job": "jf"}, 10},
		{"sluice_broker_tasks_failed_total", map[string]string{"job": "jf"}, 2},
		{"sluice_broker_epoch_tasks_done", map[string]string{"job": "jf", "epoch": "0"}, 5},
		{"sluice_broker_epoch_tasks_done", map[string]string{"job": "jf", "epoch": "1"}, 5},
		{"sluice_broker_task_redeliveries_total", map[string]string{"job": "jf"}, 5},
		{"sluice_broker_send_errors_total", map[string]string{"job": "jf", "kind": "transient"}, 6},
		{"sluice_broker_send_errors_total", map[string]string{"job": "jf", "kind": "permanent"}, 1},
		{"sluice_broker_tasks_inflight", map[string]string{"job": "jf"}, 0},
	} {
		if got := metricValue(t, reg, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

func TestDispatcherSendsNothingWithoutCapacity(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	job := e.submit(t, testSpec("jc", 2))
	f := &fakeTarget{}
	var capNow, polls atomic.Int64
	opts := DispatcherOptions{Replicas: readyFunc(func() int { polls.Add(1); return int(capNow.Load()) })}
	d, err := NewDispatcher(ctx, e.js, job, f, opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := runAsync(ctx, d)

	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if calls, _, _ := f.snapshot(); len(calls) != 0 {
			t.Fatalf("sent %v with capacity 0", calls)
		}
		if n := polls.Load(); n < 20 {
			return fmt.Errorf("capacity polled %d times, want 20", n)
		}
		return nil
	})
	if calls, _, _ := f.snapshot(); len(calls) != 0 {
		t.Fatalf("sent %v with capacity 0", calls)
	}
	if st := d.Stats(); st.InFlight != 0 || st.Pending != 8 || st.Done != 0 {
		t.Fatalf("with capacity 0: %+v", st)
	}

	capNow.Store(3)
	if err := wait(t, errc); err != nil {
		t.Fatal(err)
	}
	_, succeeded, maxInflight := f.snapshot()
	if len(succeeded) != 8 || maxInflight > 3 {
		t.Errorf("after raising capacity to 3: %d tasks done, %d at once; want 8, at most 3", len(succeeded), maxInflight)
	}
	if st := d.Stats(); st.Done != 8 || st.Pending != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestDispatcherKeepsInFlightWithinCapacity(t *testing.T) {
	e := newEnv(t, 6)
	ctx := context.Background()
	job := e.submit(t, testSpec("j2", 2))
	f := &fakeTarget{}
	twoInFlight := make(chan struct{})
	var once sync.Once
	f.hold = func(ctx context.Context, task wire.ShardTask) error {
		// The first sends wait until two overlap, which proves the
		// dispatcher uses its capacity; the pause after lets a third
		// overlap too, were the dispatcher to allow one.
		if f.inFlight() >= 2 {
			once.Do(func() { close(twoInFlight) })
		}
		select {
		case <-twoInFlight:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("never two sends in flight")
		}
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	d, err := NewDispatcher(ctx, e.js, job, f, DispatcherOptions{Replicas: capacity(2)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(t, runAsync(ctx, d)); err != nil {
		t.Fatal(err)
	}
	_, succeeded, maxInflight := f.snapshot()
	if maxInflight != 2 {
		t.Errorf("at most %d sends at once, want exactly 2 (capacity)", maxInflight)
	}
	if st := d.Stats(); len(succeeded) != 12 || st.Done != 12 || st.SendErrors != 0 {
		t.Errorf("%d tasks succeeded; stats %+v", len(succeeded), st)
	}
}

func TestDispatcherStopsOnCancelAndAnotherResumes(t *testing.T) {
	e := newEnv(t, 6)
	ctx := context.Background()
	job := e.submit(t, testSpec("jr", 2))
	var served atomic.Int64
	first := &fakeTarget{hold: func(ctx context.Context, task wire.ShardTask) error {
		if served.Add(1) <= 5 {
			return nil
		}
		<-ctx.Done() // a shard that takes until shutdown
		return ctx.Err()
	}}
	d1, err := NewDispatcher(ctx, e.js, job, first, DispatcherOptions{Replicas: capacity(1)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	errc := runAsync(runCtx, d1)
	testenv.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if st := d1.Stats(); st.Done != 5 || st.InFlight != 1 {
			return fmt.Errorf("stats %+v, want 5 done and 1 in flight", st)
		}
		return nil
	})
	cancel()
	if err := wait(t, errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v, want context.Canceled", err)
	}
	if st := d1.Stats(); st.InFlight != 0 || st.Done != 5 {
		t.Fatalf("after cancel: %+v", st)
	}

	// A stray message on the job's subject must not stall the next dispatcher.
	if _, err := e.js.Publish(ctx, wire.TaskSubject("jr"), []byte("{stray")); err != nil {
		t.Fatal(err)
	}
	second := &fakeTarget{}
	d2, err := NewDispatcher(ctx, e.js, job, second, DispatcherOptions{Replicas: capacity(3)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := d2.Stats(); st.Resumed != 5 || st.Pending != 7 {
		t.Fatalf("resumed dispatcher: %+v, want 5 resumed, 7 pending", st)
	}
	if err := wait(t, runAsync(ctx, d2)); err != nil {
		t.Fatal(err)
	}
	_, ok1, _ := first.snapshot()
	_, ok2, _ := second.snapshot()
	for _, id := range taskIDs(job) {
		if ok1[id]+ok2[id] != 1 {
			t.Errorf("task %s succeeded %d times before and %d after the restart, want once", id, ok1[id], ok2[id])
		}
	}
}

func TestDispatcherDropsMalformedTasks(t *testing.T) {
	e := newEnv(t, 3)
	ctx := context.Background()
	if err := streams.Ensure(ctx, e.js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	// Queued ahead of the job's tasks, so they are delivered first.
	other, _ := json.Marshal(wire.ShardTask{Job: "other", Bucket: "b", Key: "k", Pipeline: "p",
		OutputSubject: "o", ChunkMaxBytes: wire.DefaultChunkMaxBytes})
	for _, data := range [][]byte{[]byte("{not json"), other} {
		if _, err := e.js.Publish(ctx, wire.TaskSubject("jm"), data); err != nil {
			t.Fatal(err)
		}
	}
	job := e.submit(t, testSpec("jm", 1))
	f := &fakeTarget{}
	d, err := NewDispatcher(ctx, e.js, job, f, DispatcherOptions{Replicas: capacity(2)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(t, runAsync(ctx, d)); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Malformed != 2 || st.Done != 3 || st.Failed != 0 {
		t.Errorf("stats %+v, want 2 malformed, 3 done", st)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := taskCount(t, e.js, "jm"); n != 0 {
			return fmt.Errorf("%d messages left on the job's subject", n)
		}
		return nil
	})
}

func TestNewDispatcherRefusesAJobWithoutTasks(t *testing.T) {
	e := newEnv(t, 1)
	job := wire.Job{Spec: testSpec("empty", 1)}
	if _, err := NewDispatcher(context.Background(), e.js, job, &fakeTarget{}, DispatcherOptions{}, nil, nil); err == nil ||
		!strings.Contains(err.Error(), "no tasks") {
		t.Errorf("err = %v, want one saying the job has no tasks", err)
	}
}

// metricValue reads one series from reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func TestDispatcherStopsWhenJobIsDeleted(t *testing.T) {
	e := newEnv(t, 3)
	ctx := context.Background()
	job := e.submit(t, testSpec("jd", 1))
	release := make(chan struct{})
	f := &fakeTarget{hold: func(ctx context.Context, task wire.ShardTask) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	d, err := NewDispatcher(ctx, e.js, job, f, DispatcherOptions{Replicas: capacity(1)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := runAsync(ctx, d)
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := f.inFlight(); n != 1 {
			return fmt.Errorf("%d sends in flight, want 1", n)
		}
		return nil
	})
	if err := e.b.Delete(ctx, "jd", true); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := wait(t, errc); err == nil || !strings.Contains(err.Error(), "jd") {
		t.Errorf("Run after Delete = %v, want an error naming the job", err)
	}
}

// A shard that takes longer than AckWait is kept alive, not redelivered
// while it is still being processed.
func TestDispatcherKeepsLongTasksAlive(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	spec := testSpec("jl", 1)
	job := e.submit(t, spec)
	slow := wire.ShardTask{Job: "jl", Epoch: 0, Shard: ShardOrder(spec.Seed, 0, 2)[0]}.ID()
	other := wire.ShardTask{Job: "jl", Epoch: 0, Shard: ShardOrder(spec.Seed, 0, 2)[1]}.ID()
	var otherFails atomic.Int64
	f := &fakeTarget{hold: func(ctx context.Context, task wire.ShardTask) error {
		switch task.ID() {
		case slow:
			// Three ack waits: without progress pings the server would
			// redeliver it while the dispatcher keeps pulling for the other.
			select {
			case <-time.After(3 * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		case other:
			if otherFails.Add(1) <= 4 {
				return errors.New("keeps the dispatcher pulling")
			}
		}
		return nil
	}}
	d, err := NewDispatcher(ctx, e.js, job, f, DispatcherOptions{Replicas: capacity(2), AckWait: time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(t, runAsync(ctx, d)); err != nil {
		t.Fatal(err)
	}
	if calls, _, _ := f.snapshot(); calls[slow] != 1 {
		t.Errorf("slow task sent %d times, want once", calls[slow])
	}
	if st := d.Stats(); st.Done != 2 || st.Redeliveries != 4 {
		t.Errorf("stats %+v, want 2 done, 4 redeliveries (of the failing task)", st)
	}
}

func TestDispatcherPausesWhileTheOutputBufferIsFull(t *testing.T) {
	e := newEnv(t, 3)
	ctx := context.Background()
	spec := testSpec("jo", 1)
	spec.ChunkMaxBytes = 64 << 10
	spec.OutputBufferBytes = 4 * 64 << 10 // high water at 192 KiB
	job := e.submit(t, spec)
	// Chunks the trainer has not taken yet: 200 KiB, over the high water.
	for i := 0; i < 4; i++ {
		if _, err := e.js.Publish(ctx, wire.OutputSubject("jo"), make([]byte, 50<<10)); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	f := &fakeTarget{}
	d, err := NewDispatcher(ctx, e.js, job, f, DispatcherOptions{Replicas: capacity(2)}, nil, NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	errc := runAsync(ctx, d)
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		mfs, err := reg.Gather()
		if err != nil {
			return err
		}
		for _, mf := range mfs {
			if mf.GetName() == "sluice_broker_output_backlog_bytes" && len(mf.GetMetric()) == 1 {
				if b := mf.GetMetric()[0].GetGauge().GetValue(); b >= 200<<10 {
					return nil
				}
			}
		}
		return fmt.Errorf("output backlog gauge has not seen the 200 KiB published")
	})
	time.Sleep(3 * outputCheckEvery) // several more looks at the full buffer
	if calls, _, _ := f.snapshot(); len(calls) != 0 {
		t.Fatalf("sent %v while the output buffer was over its high water", calls)
	}

	// The trainer takes the chunks: dispatch resumes and finishes.
	out, err := e.js.Stream(ctx, wire.OutputStream("jo"))
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, errc); err != nil {
		t.Fatal(err)
	}
	if _, succeeded, _ := f.snapshot(); len(succeeded) != 3 {
		t.Errorf("%d tasks done after the buffer drained, want 3", len(succeeded))
	}
}

// publishingTarget plays a function that publishes size bytes of output
// per task, as one chunk, and fails the task when the stream refuses it.
type publishingTarget struct {
	js   jetstream.JetStream
	size int
}

func (p publishingTarget) Send(ctx context.Context, task wire.ShardTask) (wire.ShardResult, error) {
	if _, err := p.js.Publish(ctx, wire.OutputSubject(task.Job), make([]byte, p.size)); err != nil {
		return wire.ShardResult{}, fmt.Errorf("publishing task %s's chunk: %w", task.ID(), err)
	}
	return wire.ShardResult{Task: task.ID(), Samples: 1, Chunks: 1, Bytes: int64(p.size)}, nil
}

// TestDispatcherCountsOutputInFlightAgainstTheBuffer: sends in flight and
// tasks done since the stream was last read count against the high water,
// so concurrent sends never overflow the output buffer. An overflowing
// publish makes its task wait out a retry delay while later tasks take its
// room; with a reader that takes epochs in order that stalled the job for
// good (the flaky TestControllerKilledLeavesNoReplicasAndAStandbyFinishes).
func TestDispatcherCountsOutputInFlightAgainstTheBuffer(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	spec := testSpec("jo", 2)
	spec.ChunkMaxBytes = 64 << 10
	spec.OutputBufferBytes = 4 * 64 << 10 // high water at 192 KiB
	job := e.submit(t, spec)
	d, err := NewDispatcher(ctx, e.js, job, publishingTarget{js: e.js, size: 60 << 10}, DispatcherOptions{Replicas: capacity(2)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := runAsync(ctx, d)
	out, err := e.js.Stream(ctx, wire.OutputStream("jo"))
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reads: the dispatcher must stop short of the buffer's cap.
	// Then the trainer takes everything, and again, until the job is done.
	for rounds := 0; ; rounds++ {
		if rounds == 20 {
			t.Fatal("the job is not dispatched after 20 rounds of draining the output")
		}
		time.Sleep(4 * outputCheckEvery)
		if st := d.Stats(); st.SendErrors != 0 {
			t.Fatalf("%d sends failed: publishes overflowed the output buffer (stats %+v)", st.SendErrors, st)
		}
		if d.settled() {
			break
		}
		if err := out.Purge(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait(t, errc); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Done != 8 || st.Redeliveries != 0 {
		t.Errorf("stats %+v, want 8 done without redeliveries", st)
	}
}
