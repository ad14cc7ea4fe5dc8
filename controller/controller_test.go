package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

func TestFinishedJobSucceedsAndReleasesEverything(t *testing.T) {
	e := newEnv(t, 6)
	e.gate.release()
	e.startController(t, "c1", Options{})
	job := e.submit(t, spec("done", "img", 2))
	e.startAgent(t, job, "node-a")

	s := e.waitState(t, "done", wire.JobSucceeded, time.Minute)
	if s.Tasks.Done != job.Tasks() || s.Tasks.Failed != 0 || s.SamplesProcessed != int64(job.Tasks()*samplesPerShard) || s.Owner != "c1" {
		t.Errorf("final status %+v, want %d tasks done, %d samples, owner c1", s, job.Tasks(), job.Tasks()*samplesPerShard)
	}
	if !slices.Equal(s.TasksDonePerEpoch, []int{6, 6}) || !slices.Equal(s.S3BytesPerEpoch, []int64{600, 600}) || s.CacheMisses != 12 {
		t.Errorf("final status per epoch: done %v, s3 bytes %v, %d cache misses; want 6 tasks and 600 bytes each, 12 misses",
			s.TasksDonePerEpoch, s.S3BytesPerEpoch, s.CacheMisses)
	}
	rec, err := e.b.Job(context.Background(), "done")
	if err != nil || rec.State != wire.JobSucceeded {
		t.Errorf("record %s (%v), want succeeded", rec.State, err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return e.released("done") })
}

func TestJobWithoutASinglePreprocessedSampleFails(t *testing.T) {
	e := newEnv(t, 2)
	e.gate.release()
	e.startController(t, "c1", Options{})
	s := spec("text", "txt", 1)
	s.Pipeline = "imagenet-train" // text shards through an image pipeline
	job := e.submit(t, s)
	e.startAgent(t, job, "node-a")

	st := e.waitState(t, "text", wire.JobFailed, time.Minute)
	if !strings.Contains(st.Reason, "no sample could be preprocessed") || !strings.Contains(st.Reason, "not an image") {
		t.Errorf("reason %q, want it to say no sample could be preprocessed, and why", st.Reason)
	}
	rec, err := e.b.Job(context.Background(), "text")
	if err != nil || rec.State != wire.JobFailed || rec.Reason != st.Reason {
		t.Errorf("record %s %q (%v), want failed with the status's reason", rec.State, rec.Reason, err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return e.released("text") })
}

// TestStandbyTakesOverACrashedOwner runs two controllers on one NATS: only
// one owns the job; the owner "crashes" (stops without releasing
// anything) mid-job; its agents go on with the plan they have; the standby
// takes the job once the lease expires, writes its own plan, carries the
// status over, and the job completes with every task processed once.
func TestStandbyTakesOverACrashedOwner(t *testing.T) {
	e := newEnv(t, 8)
	e.gate.hold(3)
	a := e.startController(t, "a", Options{Abandon: true})
	job := e.submit(t, spec("takeover", "img", 2))
	e.startAgent(t, job, "node-a")
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		s, err := e.status("takeover")
		if err != nil {
			return err
		}
		if s.Tasks.Done < 3 || s.Owner != "a" {
			return fmt.Errorf("status %+v owner %q, want 3 tasks done by a", s.Tasks, s.Owner)
		}
		return nil
	})
	b := e.startController(t, "b", Options{})
	// Only one owns it while a lives.
	time.Sleep(500 * time.Millisecond) // a few lease rounds of b (TTL 2s)
	if got := b.c.Owned(); len(got) != 0 {
		t.Fatalf("standby owns %v while the owner lives", got)
	}
	if got := a.c.Owned(); !slices.Equal(got, []string{"takeover"}) {
		t.Fatalf("owner runs %v, want [takeover]", got)
	}

	crashed := time.Now()
	a.stop(t) // Abandon: the lease and the plan stay until the lease expires
	if l, err := e.lease("takeover"); err != nil || l == nil || l.Owner != "a" {
		t.Fatalf("lease after the crash %+v (%v), want a's, unreleased", l, err)
	}
	if _, ok, err := e.plan("takeover"); err != nil || !ok {
		t.Fatalf("plan after the crash: %v, %v; want a's, for the agents to go on", ok, err)
	}
	e.gate.release()
	// The agent may finish every task before the lease expires: the
	// standby then finishes the job as soon as it takes it.
	s := e.waitState(t, "takeover", wire.JobSucceeded, time.Minute)
	if s.Owner != "b" || s.Tasks.Done != job.Tasks() {
		t.Errorf("final status %+v by %q, want every task done, owner b", s.Tasks, s.Owner)
	}
	if waited := s.Updated.Sub(crashed); waited < time.Second {
		t.Errorf("standby finished the job %v after the crash, before the lease (TTL 2s) could expire", waited)
	}
	for task, n := range e.gate.callsPerTask() {
		if n != 1 {
			t.Errorf("task %s reached a function %d times, want once", task, n)
		}
	}
	if n := len(e.gate.callsPerTask()); n != job.Tasks() {
		t.Errorf("%d tasks reached a function, want %d", n, job.Tasks())
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return e.released("takeover") })
}

// TestShutdownHandsJobsOverAtOnce: a controller stopped cleanly deletes
// its jobs' plans and releases their leases, so the standby takes over
// well before the TTL.
func TestShutdownHandsJobsOverAtOnce(t *testing.T) {
	e := newEnv(t, 4)
	e.gate.hold(0)
	ttl := time.Minute
	a := e.startController(t, "a", Options{LeaseTTL: ttl})
	job := e.submit(t, spec("handover", "img", 1))
	e.startAgent(t, job, "node-a")
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if e.pool.replicas("handover") == 0 {
			return errors.New("no replica yet")
		}
		return nil
	})
	b := e.startController(t, "b", Options{LeaseTTL: ttl})
	a.stop(t)
	if n := e.pool.replicas("handover"); n != 0 && len(b.c.Owned()) == 0 {
		t.Errorf("%d replicas after the owner stopped, want 0", n)
	}
	if _, ok, _ := e.plan("handover"); ok && len(b.c.Owned()) == 0 {
		t.Errorf("the stopped owner left its plan")
	}
	stopped := time.Now()
	e.gate.release()
	// The standby takes the job at once, and may finish it as soon.
	s := e.waitState(t, "handover", wire.JobSucceeded, 10*time.Second)
	if s.Owner != "b" || s.Updated.Sub(stopped) > ttl/2 {
		t.Errorf("job finished by %q %v after the owner stopped, want by the standby at once (TTL %v)", s.Owner, s.Updated.Sub(stopped), ttl)
	}
}

func TestCancelledJobReleasesReplicasAndLeavesNothing(t *testing.T) {
	e := newEnv(t, 4)
	e.gate.hold(1)
	e.startController(t, "c1", Options{})
	job := e.submit(t, spec("cancel", "img", 2))
	e.startAgent(t, job, "node-a")
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if s, err := e.status("cancel"); err != nil || s.Tasks.Done < 1 || e.pool.replicas("cancel") == 0 {
			return fmt.Errorf("status %+v (%v), %d replicas: want a task done and replicas", s.Tasks, err, e.pool.replicas("cancel"))
		}
		return nil
	})
	// What `sluice job cancel` does.
	if _, err := e.b.Cancel(context.Background(), "cancel", "test cancels it"); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error { return e.released("cancel") })
	s := e.waitState(t, "cancel", wire.JobCancelled, 10*time.Second)
	if s.Reason != "test cancels it" {
		t.Errorf("status reason %q, want the cancel's", s.Reason)
	}
}

func TestDeletedJobStopsAndReleases(t *testing.T) {
	e := newEnv(t, 4)
	e.gate.hold(0)
	c := e.startController(t, "c1", Options{})
	e.submit(t, spec("gone", "img", 1))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if e.pool.replicas("gone") == 0 {
			return errors.New("no replica yet")
		}
		return nil
	})
	kv, err := e.js.KeyValue(context.Background(), wire.JobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	// What `job delete --force` ends with: the record goes.
	if err := kv.Delete(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if got := c.c.Owned(); len(got) != 0 {
			return fmt.Errorf("still runs %v", got)
		}
		if l, err := e.lease("gone"); err != nil || l != nil {
			return fmt.Errorf("lease %+v (%v), want none", l, err)
		}
		if n := e.pool.replicas("gone"); n != 0 {
			return fmt.Errorf("%d replicas", n)
		}
		return nil
	})
}

// TestTwoJobsShareTheCapacity: two jobs whose trainers both starve want
// more than the cluster has; they run at the same time, split it by
// weight, never exceed it, and both complete.
func TestTwoJobsShareTheCapacity(t *testing.T) {
	e := newEnv(t, 8)
	e.gate.hold(0)
	e.startController(t, "c1", Options{MaxReplicas: 3})
	heavy, light := spec("heavy", "img", 2), spec("light", "img", 2)
	heavy.Weight = 2
	// Both trainers report a full stall, as their agents would.
	starved := func(a *agent) { a.stall = 1 }
	e.startAgent(t, e.submit(t, heavy), "node-a", starved)
	e.startAgent(t, e.submit(t, light), "node-a", starved)
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if h, l := e.pool.replicas("heavy"), e.pool.replicas("light"); h != 2 || l != 1 {
			return fmt.Errorf("replicas heavy=%d light=%d, want 2 and 1 of 3 (weights 2:1)", h, l)
		}
		return nil
	})
	e.gate.release()
	e.waitState(t, "heavy", wire.JobSucceeded, time.Minute)
	e.waitState(t, "light", wire.JobSucceeded, time.Minute)
	e.pool.mu.Lock()
	defer e.pool.mu.Unlock()
	if e.pool.maxTotal > 3 {
		t.Errorf("%d replicas at once, over the capacity of 3", e.pool.maxTotal)
	}
	if !e.pool.together["heavy"] || !e.pool.together["light"] {
		t.Errorf("the jobs never had replicas at the same time (%v)", e.pool.together)
	}
}

// TestJobWaitsForEveryDeclaredReader: a job with two readers succeeds only
// once both are through; the status shows each reader's signal.
func TestJobWaitsForEveryDeclaredReader(t *testing.T) {
	e := newEnv(t, 2)
	e.gate.release()
	e.startController(t, "c1", Options{})
	s := spec("two", "img", 1)
	s.Readers = []string{"train", "eval"}
	job := e.submit(t, s)
	e.startAgent(t, job, "node-a", func(a *agent) { a.finishes = []string{"train"} })
	d, _ := json.Marshal(wire.Demand{Job: "two", Reader: "eval", Time: time.Now(), StallFraction: 0.25, SamplesTotal: 8})
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if err := e.nc.Publish(wire.DemandSubject("two"), d); err != nil {
			return err
		}
		st, err := e.status("two")
		if err != nil {
			return err
		}
		if st.Tasks.Done != job.Tasks() || st.Readers["eval"].StallFraction != 0.25 || st.SamplesExpected != 8 {
			return fmt.Errorf("status %+v readers %+v: want every task done and eval's signal", st.Tasks, st.Readers)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // a few ticks: eval is not through
	if st, _ := e.status("two"); st.State != wire.JobRunning {
		t.Fatalf("job is %s while reader eval is not through, want running", st.State)
	}
	e.readerDone(job, "eval", nil)
	e.waitState(t, "two", wire.JobSucceeded, 20*time.Second)
}

// TestOwnerStopsAJobWhoseLeaseWasTaken: when the lease names another
// owner (taken over after this controller was cut off), the job stops here
// at the next lease round, its replicas go, and the other's lease stays.
func TestOwnerStopsAJobWhoseLeaseWasTaken(t *testing.T) {
	e := newEnv(t, 4)
	e.gate.hold(0)
	c := e.startController(t, "a", Options{})
	e.submit(t, spec("taken", "img", 1))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if e.pool.replicas("taken") == 0 {
			return errors.New("no replica yet")
		}
		return nil
	})
	kv, err := e.js.KeyValue(context.Background(), wire.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := json.Marshal(wire.Lease{Owner: "intruder", Acquired: time.Now(), Expires: time.Now().Add(time.Minute)})
	if _, err := kv.Put(context.Background(), "taken", other); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if got := c.c.Owned(); len(got) != 0 {
			return fmt.Errorf("still runs %v", got)
		}
		if n := e.pool.replicas("taken"); n != 0 {
			return fmt.Errorf("%d replicas", n)
		}
		return nil
	})
	if l, err := e.lease("taken"); err != nil || l == nil || l.Owner != "intruder" {
		t.Errorf("lease %+v (%v), want the intruder's left alone", l, err)
	}
	e.gate.release()
}

// TestOwnerThatCannotRenewStopsBeforeExpiry: with the lease bucket gone no
// renewal succeeds; the owner stops the job before its lease expires, so a
// standby could take it without two owners at once.
func TestOwnerThatCannotRenewStopsBeforeExpiry(t *testing.T) {
	e := newEnv(t, 4)
	e.gate.hold(0)
	c := e.startController(t, "a", Options{LeaseTTL: 2 * time.Second})
	e.submit(t, spec("cutoff", "img", 1))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if e.pool.replicas("cutoff") == 0 {
			return errors.New("no replica yet")
		}
		return nil
	})
	l, err := e.lease("cutoff")
	if err != nil || l == nil {
		t.Fatalf("lease %+v (%v)", l, err)
	}
	if err := e.js.DeleteKeyValue(context.Background(), wire.LeasesBucket); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if got := c.c.Owned(); len(got) != 0 {
			return fmt.Errorf("still runs %v", got)
		}
		return nil
	})
	// The last renewal before the bucket went was at most ttl/3 before
	// it; its lease ran at least 2/3 of the TTL from now on.
	if deadline := l.Expires.Add(renewEvery(2 * time.Second)); !time.Now().Before(deadline) {
		t.Errorf("stopped at %v, after the lease could have expired (%v)", time.Now(), deadline)
	}
	if n := e.pool.replicas("cutoff"); n != 0 {
		t.Errorf("%d replicas after losing the lease, want 0", n)
	}
	e.gate.release()
}

// A status left by an earlier job under the same id (deleted while no
// controller ran) must not be carried into the new job's counts.
func TestStaleStatusOfAnEarlierJobIsNotCarriedOver(t *testing.T) {
	e := newEnv(t, 2)
	e.gate.release()
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, wire.StatusBucket)
	if err != nil {
		t.Fatal(err)
	}
	stale := wire.JobStatus{Job: "again", Updated: time.Now().Add(-time.Hour), SamplesProcessed: 1000,
		Tasks: wire.TaskCounts{Failed: 5}}
	data, _ := json.Marshal(stale)
	if _, err := kv.Put(ctx, "again", data); err != nil {
		t.Fatal(err)
	}
	job := e.submit(t, spec("again", "img", 1))
	e.startController(t, "c1", Options{})
	e.startAgent(t, job, "node-a")
	s := e.waitState(t, "again", wire.JobSucceeded, time.Minute)
	if s.SamplesProcessed != int64(job.Tasks()*samplesPerShard) || s.Tasks.Failed != 0 || s.Tasks.Done != job.Tasks() {
		t.Errorf("final status: %d samples, %d failed, %d done; want %d, 0, %d (nothing of the stale status)",
			s.SamplesProcessed, s.Tasks.Failed, s.Tasks.Done, job.Tasks()*samplesPerShard, job.Tasks())
	}
}
