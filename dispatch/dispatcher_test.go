package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// TestDispatchDeliversEveryShardAndAcksOnSettle: a job of 4 shards x 2
// epochs over 2 replicas: every shard's chunks reach the sink, End comes
// once per task, and the tasks stay unacked (pinged) until Settle, which
// acks them and publishes their results.
func TestDispatchDeliversEveryShardAndAcksOnSettle(t *testing.T) {
	e := newEnv(t)
	job := testJob("j1", 4, 2)
	e.queue(t, job)
	a, b := newFakeFn(t, nil), newFakeFn(t, nil)
	// PerEndpoint 0: endpoints as a Knative Service's, the least loaded
	// taken, ties in turn (TestLocality has replicas one by one).
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{a.URL, b.URL}, InFlight: 4,
		Shares: map[string]int{"a": 4}})
	results := e.results(t, job.Spec.ID)
	sink := newRecSink(t)
	reg := prometheus.NewRegistry()
	d, err := New(context.Background(), e.nc, e.js, job, sink, Options{Agent: "a"}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)

	tasks := allTasks(job)
	sink.waitEnds(t, len(tasks))
	sink.checkShards(t, tasks)
	if got := len(a.received()) + len(b.received()); got != len(tasks) {
		t.Errorf("replicas got %d requests, want %d", got, len(tasks))
	}
	if len(a.received()) == 0 || len(b.received()) == 0 {
		t.Errorf("requests split %d/%d between the replicas, want both used", len(a.received()), len(b.received()))
	}
	info := e.consumerInfo(t, job.Spec.ID)
	if info.NumAckPending != len(tasks) || info.NumPending != 0 {
		t.Fatalf("before Settle: %d tasks unacked, %d pending; want %d, 0", info.NumAckPending, info.NumPending, len(tasks))
	}
	if st := d.Stats(); st.Held != len(tasks) || st.InFlight != 0 || st.Sends != len(tasks) || st.Retries != 0 {
		t.Errorf("stats before Settle: %+v", st)
	}

	for _, task := range tasks {
		d.Settle(task.Epoch, task.Shard)
	}
	checkFor(t, func() error {
		if n := e.consumerInfo(t, job.Spec.ID).NumAckPending; n != 0 {
			return fmt.Errorf("%d tasks unacked after Settle", n)
		}
		if n := len(results()); n != len(tasks) {
			return fmt.Errorf("%d results, want %d", n, len(tasks))
		}
		return nil
	})
	for _, r := range results() {
		task := job.Task(r.End.Epoch, r.End.Shard)
		if r.Agent != "a" || r.Key != task.Key || r.Error != "" || r.Replay || r.Sends != 1 {
			t.Errorf("result %+v", r)
		}
		if diff := cmp.Diff(endOf(task), r.End); diff != "" {
			t.Errorf("result of %s: end (-want +got):\n%s", task.ID(), diff)
		}
	}
	d.Settle(0, 0) // settled already: a no-op
	if st := d.Stats(); st.Held != 0 || st.Settled != len(tasks) {
		t.Errorf("stats after Settle: %+v", st)
	}
	if n := metricValue(t, reg, "sluice_dispatch_sends_total", "outcome", "ok"); n != float64(len(tasks)) {
		t.Errorf("sluice_dispatch_sends_total{outcome=ok} = %v, want %d", n, len(tasks))
	}
	if n := metricValue(t, reg, "sluice_dispatch_held", "job", job.Spec.ID); n != 0 {
		t.Errorf("sluice_dispatch_held = %v after Settle, want 0", n)
	}
}

// TestCutBodyIsSentAgain: a replica that cuts its reply mid-shard gets
// the task again; the chunks come again and the shard ends once.
func TestCutBodyIsSentAgain(t *testing.T) {
	e := newEnv(t)
	job := testJob("j2", 3, 1)
	e.queue(t, job)
	fn := newFakeFn(t, func(w http.ResponseWriter, task wire.ShardTask, n int) bool {
		if n == 0 {
			writeShard(w, task, chunksOf(task)) // every chunk, then cut before the end
			return true
		}
		return false
	})
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 4, InFlight: 4})
	sink := newRecSink(t)
	d, _ := e.start(t, job, sink, Options{})
	tasks := allTasks(job)
	sink.waitEnds(t, len(tasks))
	sink.checkShards(t, tasks)
	sink.mu.Lock()
	for _, task := range tasks {
		if got, want := sink.chunkCalls[task.ID()], 2*chunksOf(task); got != want {
			t.Errorf("task %s: %d chunks handed over, want %d (all of them twice)", task.ID(), got, want)
		}
	}
	sink.mu.Unlock()
	for _, task := range tasks {
		if n := fn.callsOf(task); n != 2 {
			t.Errorf("task %s sent %d times, want 2", task.ID(), n)
		}
	}
	if st := d.Stats(); st.Retries != len(tasks) || st.Failed != 0 {
		t.Errorf("stats %+v, want %d retries", st, len(tasks))
	}
}

// TestFailures: how each kind of failed send ends, on one task each.
func TestFailures(t *testing.T) {
	errorFrame := func(permanent bool) func(http.ResponseWriter, wire.ShardTask) {
		return func(w http.ResponseWriter, task wire.ShardTask) {
			w.Header().Set("Content-Type", wire.ShardStreamMediaType)
			_ = wire.WriteFrame(w, wire.FrameChunk, 0, chunkData(task, 0))
			_ = wire.WriteFrame(w, wire.FrameError, 0, fmt.Appendf(nil, `{"permanent":%v,"message":"decoder exploded"}`, permanent))
		}
	}
	tests := []struct {
		name       string
		maxDeliver int
		// failUntil: requests 0..failUntil-1 get fail; later ones the shard.
		failUntil int
		fail      func(http.ResponseWriter, wire.ShardTask)
		wantCalls int
		// wantSends is the result's Sends when it differs from wantCalls:
		// a refused send (429, 503) did no work and is not one.
		wantSends  int
		wantFailed string // "" wants the shard to end
	}{
		{name: "400 is permanent", maxDeliver: 5, failUntil: 99, wantCalls: 1, wantFailed: "400 Bad Request: unknown pipeline",
			fail: func(w http.ResponseWriter, _ wire.ShardTask) {
				w.Header().Set(wire.HeaderTaskRejected, "true")
				http.Error(w, "unknown pipeline", http.StatusBadRequest)
			}},
		{name: "404 is permanent", maxDeliver: 5, failUntil: 99, wantCalls: 1, wantFailed: "404",
			fail: func(w http.ResponseWriter, _ wire.ShardTask) {
				w.Header().Set(wire.HeaderTaskRejected, "true")
				http.Error(w, "no such shard", http.StatusNotFound)
			}},
		// Whatever took a dead replica's port: its 404 is no verdict on the
		// shard (the standby-controller flake: a shard given up for it).
		{name: "a 404 not from a function is transient", maxDeliver: 5, failUntil: 2, wantCalls: 3,
			fail: func(w http.ResponseWriter, _ wire.ShardTask) { http.NotFound(w, nil) }},
		{name: "500 until MaxDeliver", maxDeliver: 3, failUntil: 99, wantCalls: 3, wantFailed: "gave up after 3 failed sends",
			fail: func(w http.ResponseWriter, _ wire.ShardTask) {
				http.Error(w, "s3 timeout", http.StatusInternalServerError)
			}},
		{name: "500 then fine", maxDeliver: 3, failUntil: 2, wantCalls: 3,
			fail: func(w http.ResponseWriter, _ wire.ShardTask) {
				http.Error(w, "s3 timeout", http.StatusInternalServerError)
			}},
		{name: "a permanent error frame", maxDeliver: 5, failUntil: 99, wantCalls: 1, wantFailed: "decoder exploded",
			fail: errorFrame(true)},
		{name: "a transient error frame is retried", maxDeliver: 2, failUntil: 1, wantCalls: 2,
			fail: errorFrame(false)},
		{name: "a malformed frame stream counts", maxDeliver: 2, failUntil: 99, wantCalls: 2, wantFailed: "malformed frame stream",
			fail: func(w http.ResponseWriter, _ wire.ShardTask) {
				w.Header().Set("Content-Type", wire.ShardStreamMediaType)
				_ = wire.WriteFrame(w, wire.FrameKind('Z'), 0, nil)
			}},
		{name: "429 does not count", maxDeliver: 1, failUntil: 2, wantCalls: 3, wantSends: 1,
			fail: func(w http.ResponseWriter, _ wire.ShardTask) { http.Error(w, "busy", http.StatusTooManyRequests) }},
		{name: "503 does not count", maxDeliver: 1, failUntil: 2, wantCalls: 3, wantSends: 1,
			fail: func(w http.ResponseWriter, _ wire.ShardTask) {
				http.Error(w, "draining", http.StatusServiceUnavailable)
			}},
		{name: "401 counts", maxDeliver: 2, failUntil: 99, wantCalls: 2, wantFailed: "401 Unauthorized: wrong bearer token (this agent sent none",
			fail: func(w http.ResponseWriter, _ wire.ShardTask) {
				http.Error(w, "wrong bearer token", http.StatusUnauthorized)
			}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			job := testJob(fmt.Sprintf("f%d", i), 1, 1)
			task := job.Task(0, 0)
			e.queue(t, job)
			fn := newFakeFn(t, func(w http.ResponseWriter, task wire.ShardTask, n int) bool {
				if n < tt.failUntil {
					tt.fail(w, task)
					return true
				}
				return false
			})
			e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 1, InFlight: 1})
			results := e.results(t, job.Spec.ID)
			sink := newRecSink(t)
			d, _ := e.start(t, job, sink, Options{MaxDeliver: tt.maxDeliver})
			checkFor(t, func() error {
				if sink.endCount()+len(sink.failures(task)) == 0 {
					return errors.New("the task neither ended nor failed")
				}
				return nil
			})
			if n := fn.callsOf(task); n != tt.wantCalls {
				t.Errorf("sent %d times, want %d", n, tt.wantCalls)
			}
			failures := sink.failures(task)
			if tt.wantFailed == "" {
				sink.checkShards(t, []wire.ShardTask{task})
				if len(failures) != 0 {
					t.Errorf("failed: %q", failures)
				}
			} else if len(failures) != 1 || !strings.Contains(failures[0], tt.wantFailed) || sink.endCount() != 0 {
				t.Errorf("failures %q and %d ends, want one failure saying %q", failures, sink.endCount(), tt.wantFailed)
			}
			// Held, unacked, until settled: also a failed task.
			if n := e.consumerInfo(t, job.Spec.ID).NumAckPending; n != 1 {
				t.Errorf("%d tasks unacked before Settle, want 1", n)
			}
			d.Settle(0, 0)
			checkFor(t, func() error {
				if n := e.consumerInfo(t, job.Spec.ID).NumAckPending; n != 0 {
					return fmt.Errorf("%d tasks unacked after Settle", n)
				}
				if len(results()) != 1 {
					return errors.New("no result")
				}
				return nil
			})
			r := results()[0]
			wantSends := tt.wantCalls
			if tt.wantSends > 0 {
				wantSends = tt.wantSends
			}
			if (r.Error != "") != (tt.wantFailed != "") || !strings.Contains(r.Error, tt.wantFailed) || r.Sends != wantSends {
				t.Errorf("result %+v", r)
			}
			// A task given up is recorded where a takeover cannot lose it.
			rec := e.shardsFailed(t, job)
			if tt.wantFailed == "" {
				if rec.Total != 0 {
					t.Errorf("record of tasks given up %+v, want none", rec)
				}
			} else if rec.Total != 1 || len(rec.Shards) != 1 || rec.Shards[0].Key != task.Key || !strings.Contains(rec.Shards[0].Reason, tt.wantFailed) ||
				!rec.Submitted.Equal(job.Submitted) {
				t.Errorf("record of tasks given up %+v, want %s saying %q", rec, task.Key, tt.wantFailed)
			}
		})
	}
}

// TestNoShareNoSend: without a plan, or with a share of 0, nothing is
// taken from the queue; a plan with a share starts the job.
func TestNoShareNoSend(t *testing.T) {
	e := newEnv(t)
	job := testJob("j3", 3, 1)
	e.queue(t, job)
	fn := newFakeFn(t, nil)
	sink := newRecSink(t)
	sink.onEnd = func(task wire.ShardTask, _ wire.ShardEnd) {}
	d, _ := e.start(t, job, sink, Options{})
	idle := func(why string) {
		t.Helper()
		waitRounds(t, d, 5)
		if n := len(fn.received()); n != 0 {
			t.Fatalf("%s: %d tasks sent", why, n)
		}
		if info := e.consumerInfo(t, job.Spec.ID); info.NumAckPending != 0 || info.NumPending != 3 {
			t.Fatalf("%s: %d tasks taken, %d pending; want 0, 3", why, info.NumAckPending, info.NumPending)
		}
	}
	idle("no plan")

	plan := wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 1, InFlight: 2,
		Shares: map[string]int{"a": 0, "b": 2}}
	e.putPlan(t, plan)
	checkFor(t, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if !d.planSet || d.plan.Shares["b"] != 2 {
			return errors.New("plan not seen yet")
		}
		return nil
	})
	idle("share 0")

	plan.Shares = map[string]int{"a": 2}
	e.putPlan(t, plan)
	sink.waitEnds(t, 3)
	sink.checkShards(t, allTasks(job))
	if st := d.Stats(); st.Share != 2 {
		t.Errorf("share %d, want 2", st.Share)
	}
}

// TestSinkWithoutRoomTakesNothing: Room false stops the pulls.
func TestSinkWithoutRoomTakesNothing(t *testing.T) {
	e := newEnv(t)
	job := testJob("j4", 2, 1)
	e.queue(t, job)
	fn := newFakeFn(t, nil)
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 1, InFlight: 2})
	sink := newRecSink(t)
	sink.setFull(true)
	d, _ := e.start(t, job, sink, Options{})
	waitRounds(t, d, 5)
	if info := e.consumerInfo(t, job.Spec.ID); info.NumAckPending != 0 {
		t.Fatalf("%d tasks taken by a full sink", info.NumAckPending)
	}
	sink.setFull(false)
	sink.waitEnds(t, 2)
}

// TestStopReturnsHeldTasksAtOnce: an agent that stops Naks what it holds,
// and a second agent on the same queue gets every task at once (the
// consumer's AckWait is 30s, the test's bound 10s).
func TestStopReturnsHeldTasksAtOnce(t *testing.T) {
	e := newEnv(t)
	job := testJob("j5", 3, 2)
	e.queue(t, job)
	release := make(chan struct{})
	fn := newFakeFn(t, func(w http.ResponseWriter, task wire.ShardTask, n int) bool {
		if task.Epoch == 1 && task.Shard == 2 && n == 0 {
			<-release // a send still in flight when the agent stops
		}
		return false
	})
	defer close(release)
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 8, InFlight: 8})
	tasks := allTasks(job)

	first := newRecSink(t) // never settles
	d1, stop1 := e.start(t, job, first, Options{Agent: "a"})
	first.waitEnds(t, len(tasks)-1)
	checkFor(t, func() error {
		if st := d1.Stats(); st.Held != len(tasks) || st.InFlight != 1 {
			return fmt.Errorf("first agent: %+v", st)
		}
		return nil
	})
	if err := stop1(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if st := d1.Stats(); st.Held != 0 || st.InFlight != 0 {
		t.Errorf("stopped agent still holds: %+v", st)
	}

	second := newRecSink(t)
	d2, _ := e.start(t, job, second, Options{Agent: "b"})
	second.setOnEnd(func(task wire.ShardTask, _ wire.ShardEnd) { d2.Settle(task.Epoch, task.Shard) })
	second.waitEnds(t, len(tasks))
	second.checkShards(t, tasks)
	checkFor(t, func() error {
		if info := e.consumerInfo(t, job.Spec.ID); info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("%d tasks unacked, %d pending", info.NumAckPending, info.NumPending)
		}
		return nil
	})
}

// TestLocality: each shard goes to its rendezvous home among the plan's
// replicas.
func TestLocality(t *testing.T) {
	e := newEnv(t)
	job := testJob("j6", 9, 2)
	e.queue(t, job)
	fns := []*fakeFn{newFakeFn(t, nil), newFakeFn(t, nil), newFakeFn(t, nil)}
	eps := []string{fns[0].URL, fns[1].URL, fns[2].URL}
	// One send at a time: the home is always free.
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: eps, PerEndpoint: 1, InFlight: 1})
	sink := newRecSink(t)
	d, _ := e.start(t, job, sink, Options{})
	sink.setOnEnd(func(task wire.ShardTask, _ wire.ShardEnd) { d.Settle(task.Epoch, task.Shard) })
	sink.waitEnds(t, len(allTasks(job)))
	homes := map[string]bool{}
	for i, fn := range fns {
		for _, task := range fn.received() {
			home := Rendezvous(shardKey(task.Bucket, task.Key), eps)[0]
			homes[home] = true
			if home != eps[i] {
				t.Errorf("task %s went to replica %d, not its home %s", task.ID(), i, home)
			}
		}
	}
	if len(homes) < 2 {
		t.Errorf("every shard had the same home: %v", homes)
	}
}

// TestReplay: a replay is sent before queued tasks, outside the queue,
// and its result says so.
func TestReplay(t *testing.T) {
	e := newEnv(t)
	job := testJob("j7", 3, 1)
	e.publishTask(t, job.Task(0, 0))
	e.publishTask(t, job.Task(0, 1))
	fn := newFakeFn(t, nil)
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 1, InFlight: 1})
	results := e.results(t, job.Spec.ID)
	sink := newRecSink(t)
	d := e.newDispatcher(t, job, sink, Options{})
	replay := job.Task(0, 2) // acked long ago: not in the queue
	d.Replay(replay)
	d.Replay(replay) // queued already: once
	run(t, d)
	sink.waitEnds(t, 3)
	sink.checkShards(t, allTasks(job))
	if got := fn.received(); got[0].ID() != replay.ID() {
		t.Errorf("first send %s, want the replay %s", got[0].ID(), replay.ID())
	}
	if info := e.consumerInfo(t, job.Spec.ID); info.NumAckPending != 2 {
		t.Errorf("%d tasks unacked, want the 2 queued ones", info.NumAckPending)
	}
	d.Settle(0, 2)
	checkFor(t, func() error {
		if len(results()) != 1 {
			return errors.New("no result")
		}
		return nil
	})
	if r := results()[0]; !r.Replay || r.End.Chunks != chunksOf(replay) {
		t.Errorf("replay result %+v", r)
	}
	if info := e.consumerInfo(t, job.Spec.ID); info.NumAckPending != 2 {
		t.Errorf("settling the replay acked a task: %d unacked, want 2", info.NumAckPending)
	}
	// A shard held and ended is sent again on Replay.
	d.Replay(job.Task(0, 0))
	checkFor(t, func() error {
		if n := fn.callsOf(job.Task(0, 0)); n != 2 {
			return fmt.Errorf("shard sent %d times", n)
		}
		return nil
	})
}

// TestRedeliveryWhileHeldIsNotSentAgain: when the server redelivers a task
// this agent holds (its pings lost), it is not sent again, and Settle acks
// it through the newer delivery.
func TestRedeliveryWhileHeldIsNotSentAgain(t *testing.T) {
	e := newEnv(t)
	job := testJob("j8", 1, 1)
	if _, err := e.js.CreateOrUpdateConsumer(context.Background(), wire.TaskStream, streams.Dispatch(job.Spec.ID, time.Second)); err != nil {
		t.Fatal(err)
	}
	e.queue(t, job)
	fn := newFakeFn(t, nil)
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 1, InFlight: 1})
	sink := newRecSink(t)
	d := e.newDispatcher(t, job, sink, Options{})
	if d.ping != time.Second/3 {
		t.Errorf("ping every %v, want a third of the consumer's AckWait", d.ping)
	}
	d.ping = time.Hour // lose the pings
	run(t, d)
	sink.waitEnds(t, 1)
	// The server redelivers after the ack wait, to the dispatcher's next
	// fetch: generous, as both once took over 10 s with every package's
	// tests on two cores.
	testenv.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		e := d.st.entries[taskKey{0, 0}]
		if e == nil {
			return errors.New("task not held")
		}
		md, err := e.msg.Metadata()
		if err != nil {
			return err
		}
		if md.NumDelivered < 2 {
			return fmt.Errorf("held delivery %d", md.NumDelivered)
		}
		return nil
	})
	if n := fn.callsOf(job.Task(0, 0)); n != 1 {
		t.Errorf("sent %d times, want 1", n)
	}
	d.Settle(0, 0)
	checkFor(t, func() error {
		if info := e.consumerInfo(t, job.Spec.ID); info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("%d tasks unacked, %d pending", info.NumAckPending, info.NumPending)
		}
		return nil
	})
}

// TestJobGone: deleting the task consumer ends Run with ErrJobGone.
func TestJobGone(t *testing.T) {
	e := newEnv(t)
	job := testJob("j9", 1, 1)
	sink := newRecSink(t)
	d := e.newDispatcher(t, job, sink, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	if err := e.js.DeleteConsumer(context.Background(), wire.TaskStream, wire.DispatchConsumer(job.Spec.ID)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrJobGone) {
			t.Fatalf("Run returned %v, want ErrJobGone", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10s after its consumer was deleted")
	}
	if err := d.Run(ctx); err == nil {
		t.Error("a second Run returned nil")
	}
}

// TestMalformedTaskIsTerminated: a message on the job's subject that is no
// task of the job is dropped, not sent.
func TestMalformedTaskIsTerminated(t *testing.T) {
	e := newEnv(t)
	job := testJob("j10", 1, 1)
	if _, err := e.js.Publish(context.Background(), wire.TaskSubject(job.Spec.ID), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	data := fmt.Appendf(nil, `{"job":"other","epoch":0,"shard":0,"bucket":"data","key":"k","pipeline":"p","chunk_max_bytes":%d}`, wire.DefaultChunkMaxBytes)
	if _, err := e.js.Publish(context.Background(), wire.TaskSubject(job.Spec.ID), data); err != nil {
		t.Fatal(err)
	}
	fn := newFakeFn(t, nil)
	e.putPlan(t, wire.DispatchPlan{Job: job.Spec.ID, Endpoints: []string{fn.URL}, PerEndpoint: 1, InFlight: 1})
	d, _ := e.start(t, job, newRecSink(t), Options{})
	checkFor(t, func() error {
		if st := d.Stats(); st.Malformed != 2 {
			return fmt.Errorf("%d malformed", st.Malformed)
		}
		if info := e.consumerInfo(t, job.Spec.ID); info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("%d tasks unacked, %d pending", info.NumAckPending, info.NumPending)
		}
		return nil
	})
	if n := len(fn.received()); n != 0 {
		t.Errorf("%d malformed tasks sent", n)
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	job := testJob("j11", 1, 1)
	for name, f := range map[string]func() error{
		"no agent": func() error {
			_, err := New(context.Background(), e.nc, e.js, job, newRecSink(t), Options{}, nil, nil)
			return err
		},
		"no sink": func() error {
			_, err := New(context.Background(), e.nc, e.js, job, nil, Options{Agent: "a"}, nil, nil)
			return err
		},
		"bad job id": func() error {
			_, err := New(context.Background(), e.nc, e.js, testJob("a b", 1, 1), newRecSink(t), Options{Agent: "a"}, nil, nil)
			return err
		},
	} {
		if err := f(); err == nil {
			t.Errorf("%s: New returned no error", name)
		}
	}
}
