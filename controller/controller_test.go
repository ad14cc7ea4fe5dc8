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
	e := newEnv(t, 24, 6)
	e.gate.release()
	e.startController(t, "c1", Options{})
	job := e.submit(t, spec("done", "img", 2))
	r := e.startReader(t, "done", wire.DefaultReader)

	s := e.waitState(t, "done", wire.JobSucceeded, time.Minute)
	if s.Tasks.Done != job.Tasks() || s.Tasks.Failed != 0 || s.SamplesProcessed != int64(2*e.samples) || s.Owner != "c1" {
		t.Errorf("final status %+v, want %d tasks done, %d samples, owner c1", s, job.Tasks(), 2*e.samples)
	}
	r.exactlyOnce(t, 2*e.samples)
	rec, err := e.b.Job(context.Background(), "done")
	if err != nil || rec.State != wire.JobSucceeded {
		t.Errorf("record %s (%v), want succeeded", rec.State, err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return e.released("done") })
}

func TestJobWithoutASinglePreprocessedSampleFails(t *testing.T) {
	e := newEnv(t, 8, 2)
	e.gate.release()
	e.startController(t, "c1", Options{})
	s := spec("text", "txt", 1)
	s.Pipeline = "imagenet-train" // text shards through an image pipeline
	e.submit(t, s)
	e.startReader(t, "text", wire.DefaultReader)

	st := e.waitState(t, "text", wire.JobFailed, time.Minute)
	if !strings.Contains(st.Reason, "no sample could be preprocessed") {
		t.Errorf("reason %q, want it to say no sample could be preprocessed", st.Reason)
	}
	rec, err := e.b.Job(context.Background(), "text")
	if err != nil || rec.State != wire.JobFailed || rec.Reason != st.Reason {
		t.Errorf("record %s %q (%v), want failed with the status's reason", rec.State, rec.Reason, err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return e.released("text") })
}

// TestStandbyTakesOverACrashedOwner runs two controllers on one NATS: only
// one owns the job; the owner "crashes" (stops without releasing
// anything) mid-job; the standby takes the job once the lease expires,
// resumes on the durable consumer, and the job completes with every task
// processed once and every sample delivered once.
func TestStandbyTakesOverACrashedOwner(t *testing.T) {
	e := newEnv(t, 32, 8)
	e.gate.hold(3)
	a := e.startController(t, "a", Options{Abandon: true})
	job := e.submit(t, spec("takeover", "img", 2))
	r := e.startReader(t, "takeover", wire.DefaultReader)
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
	a.stop(t) // Abandon: dispatching stops, the lease stays until it expires
	if l, err := e.lease("takeover"); err != nil || l == nil || l.Owner != "a" {
		t.Fatalf("lease after the crash %+v (%v), want a's, unreleased", l, err)
	}
	e.gate.release()
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if got := b.c.Owned(); !slices.Equal(got, []string{"takeover"}) {
			l, _ := e.lease("takeover")
			return fmt.Errorf("standby runs %v (lease %+v), want the job", got, l)
		}
		return nil
	})
	if waited := time.Since(crashed); waited < time.Second {
		t.Errorf("standby took over %v after the crash, before the lease (TTL 2s) could expire", waited)
	}
	s := e.waitState(t, "takeover", wire.JobSucceeded, time.Minute)
	if s.Owner != "b" || s.Tasks.Done != job.Tasks() {
		t.Errorf("final status %+v by %q, want every task done, owner b", s.Tasks, s.Owner)
	}
	r.exactlyOnce(t, 2*e.samples)
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

// TestShutdownHandsJobsOverAtOnce: a controller stopped cleanly releases
// its leases, so the standby takes over well before the TTL.
func TestShutdownHandsJobsOverAtOnce(t *testing.T) {
	e := newEnv(t, 8, 4)
	e.gate.hold(0)
	ttl := time.Minute
	a := e.startController(t, "a", Options{LeaseTTL: ttl})
	e.submit(t, spec("handover", "img", 1))
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
	e.gate.release()
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if got := b.c.Owned(); len(got) != 1 {
			return fmt.Errorf("standby runs %v, want the job at once (TTL %v)", got, ttl)
		}
		return nil
	})
	e.startReader(t, "handover", wire.DefaultReader)
	e.waitState(t, "handover", wire.JobSucceeded, time.Minute)
}

func TestCancelledJobReleasesReplicasAndLeavesNothing(t *testing.T) {
	e := newEnv(t, 16, 4)
	e.gate.hold(1)
	e.startController(t, "c1", Options{})
	e.submit(t, spec("cancel", "img", 2))
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
	e := newEnv(t, 8, 4)
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
	e := newEnv(t, 32, 8)
	e.gate.hold(0)
	e.startController(t, "c1", Options{MaxReplicas: 3})
	heavy, light := spec("heavy", "img", 2), spec("light", "img", 2)
	heavy.Weight = 2
	e.submit(t, heavy)
	e.submit(t, light)
	// Both trainers report a full stall, as their agents would.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			for _, j := range []string{"heavy", "light"} {
				d, _ := json.Marshal(wire.Demand{Job: j, Time: time.Now(), StallFraction: 1, BufferCapacity: 100})
				_ = e.nc.Publish(wire.DemandSubject(j), d)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if h, l := e.pool.replicas("heavy"), e.pool.replicas("light"); h != 2 || l != 1 {
			return fmt.Errorf("replicas heavy=%d light=%d, want 2 and 1 of 3 (weights 2:1)", h, l)
		}
		return nil
	})
	e.gate.release()
	rh, rl := e.startReader(t, "heavy", wire.DefaultReader), e.startReader(t, "light", wire.DefaultReader)
	e.waitState(t, "heavy", wire.JobSucceeded, time.Minute)
	e.waitState(t, "light", wire.JobSucceeded, time.Minute)
	rh.exactlyOnce(t, 2*e.samples)
	rl.exactlyOnce(t, 2*e.samples)
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
// once both have taken every chunk; the status shows each reader's signal.
func TestJobWaitsForEveryDeclaredReader(t *testing.T) {
	e := newEnv(t, 8, 2)
	e.gate.release()
	e.startController(t, "c1", Options{})
	s := spec("two", "img", 1)
	s.Readers = []string{"train", "eval"}
	job := e.submit(t, s)
	ra := e.startReader(t, "two", "train")
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
	ra.exactlyOnce(t, e.samples)
	time.Sleep(300 * time.Millisecond) // a few ticks: eval has not read
	if st, _ := e.status("two"); st.State != wire.JobRunning {
		t.Fatalf("job is %s while reader eval has read nothing, want running", st.State)
	}
	rb := e.startReader(t, "two", "eval")
	e.waitState(t, "two", wire.JobSucceeded, 20*time.Second)
	rb.exactlyOnce(t, e.samples)
}

// TestOwnerStopsAJobWhoseLeaseWasTaken: when the lease names another
// owner (taken over after this controller was cut off), the job stops here
// at the next lease round, its replicas go, and the other's lease stays.
func TestOwnerStopsAJobWhoseLeaseWasTaken(t *testing.T) {
	e := newEnv(t, 8, 4)
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
// standby could take it without two dispatchers at once.
func TestOwnerThatCannotRenewStopsBeforeExpiry(t *testing.T) {
	e := newEnv(t, 8, 4)
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
	e := newEnv(t, 8, 2)
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
	e.startReader(t, "again", wire.DefaultReader)
	s := e.waitState(t, "again", wire.JobSucceeded, time.Minute)
	if s.SamplesProcessed != int64(e.samples) || s.Tasks.Failed != 0 || s.Tasks.Done != job.Tasks() {
		t.Errorf("final status: %d samples, %d failed, %d done; want %d, 0, %d (nothing of the stale status)",
			s.SamplesProcessed, s.Tasks.Failed, s.Tasks.Done, e.samples, job.Tasks())
	}
}
