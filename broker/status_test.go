package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

func TestListIsInSubmissionOrder(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	jobs, err := e.b.List(ctx)
	if err != nil || len(jobs) != 0 {
		t.Fatalf("List with no jobs: %v, %v", jobs, err)
	}
	for _, id := range []string{"b", "a", "c"} {
		e.submit(t, testSpec(id, 1))
	}
	jobs, err = e.b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.Spec.ID)
	}
	if !slices.Equal(ids, []string{"b", "a", "c"}) {
		t.Errorf("List = %v, want b, a, c (submission order)", ids)
	}
}

// putStatus writes st as job's controller would.
func putStatus(t *testing.T, e env, st wire.JobStatus) {
	t.Helper()
	kvs, err := e.b.buckets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvs.status.Put(context.Background(), st.Job, data); err != nil {
		t.Fatal(err)
	}
}

func TestStatus(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	e.submit(t, testSpec("s", 1))

	job, st, err := e.b.Status(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if job.State != wire.JobQueued || HasStatus(st) {
		t.Errorf("queued job: state %s, status %+v: want queued, no status", job.State, st)
	}

	want := wire.JobStatus{Job: "s", State: wire.JobRunning, Owner: "ctl", Updated: time.Now().UTC(),
		Tasks: wire.TaskCounts{Total: 2, Done: 1}, TasksDonePerEpoch: []int{1}, SamplesProcessed: 2}
	putStatus(t, e, want)
	_, st, err = e.b.Status(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if !HasStatus(st) || st.Tasks != want.Tasks || st.Owner != "ctl" {
		t.Errorf("status %+v, want %+v", st, want)
	}

	// A status older than the job is an earlier job's of the same id.
	want.Updated = job.Submitted.Add(-time.Second)
	putStatus(t, e, want)
	if _, st, _ = e.b.Status(ctx, "s"); HasStatus(st) {
		t.Errorf("stale status %+v taken for the job's", st)
	}

	if _, _, err := e.b.Status(ctx, "nope"); !errors.Is(err, ErrJobNotFound) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("status of an unknown job: %v", err)
	}
}

// watchLog collects what Watch shows.
type watchLog struct {
	mu   sync.Mutex
	seen []string
}

func (w *watchLog) add(j wire.Job, st wire.JobStatus) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := string(j.State)
	if HasStatus(st) {
		s += fmt.Sprintf("/%s:%d", st.State, st.Tasks.Done)
	}
	w.seen = append(w.seen, s)
	return nil
}

func (w *watchLog) waitFor(t *testing.T, want string) {
	t.Helper()
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.seen) == 0 || w.seen[len(w.seen)-1] != want {
			return fmt.Errorf("watch saw %v, want it to end with %s", w.seen, want)
		}
		return nil
	})
}

func TestWatchFollowsRecordAndStatusUntilTerminal(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	e.submit(t, testSpec("w", 1))

	var log watchLog
	done := make(chan error, 1)
	go func() { done <- e.b.Watch(ctx, "w", log.add) }()
	log.waitFor(t, "queued")

	if _, err := e.b.Transition(ctx, "w", wire.JobRunning, "", func(wire.JobState) bool { return true }); err != nil {
		t.Fatal(err)
	}
	log.waitFor(t, "running")
	st := wire.JobStatus{Job: "w", State: wire.JobRunning, Updated: time.Now().UTC(), Tasks: wire.TaskCounts{Total: 2, Done: 1}}
	putStatus(t, e, st)
	log.waitFor(t, "running/running:1")

	if _, err := e.b.Cancel(ctx, "w", "test"); err != nil {
		t.Fatal(err)
	}
	log.waitFor(t, "cancelled/running:1") // waits for the controller's last word
	st.State, st.Updated = wire.JobCancelled, time.Now().UTC()
	putStatus(t, e, st)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch of a job that ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return once the job was cancelled")
	}
	log.waitFor(t, "cancelled/cancelled:1")

	// A finished job: one call, then nil.
	log = watchLog{}
	if err := e.b.Watch(ctx, "w", log.add); err != nil || len(log.seen) != 1 {
		t.Errorf("Watch of a finished job: %v, saw %v", err, log.seen)
	}
}

func TestWatchEnds(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	e.submit(t, testSpec("w", 1))

	// The job's record disappears while watched (Delete of a queued job
	// cancels it first, which ends the watch too).
	var log watchLog
	done := make(chan error, 1)
	go func() { done <- e.b.Watch(ctx, "w", log.add) }()
	log.waitFor(t, "queued")
	if _, err := e.b.remove(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrJobNotFound) {
		t.Errorf("Watch of a deleted job: %v, want ErrJobNotFound", err)
	}

	if err := e.b.Watch(ctx, "nope", log.add); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("Watch of an unknown job: %v, want ErrJobNotFound", err)
	}

	// Its context ends; the callback's error is returned as it is.
	e.submit(t, testSpec("w2", 1))
	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- e.b.Watch(cctx, "w2", func(wire.Job, wire.JobStatus) error { cancel(); return nil }) }()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Watch after its context ended: %v", err)
	}
	stop := errors.New("enough")
	if err := e.b.Watch(ctx, "w2", func(wire.Job, wire.JobStatus) error { return stop }); err != stop {
		t.Errorf("Watch whose callback failed: %v, want that error", err)
	}
}

func TestBrokerCreatesMissingStreamsAndLeavesExistingOnesAlone(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	if _, err := e.js.Stream(ctx, wire.TaskStream); err == nil {
		t.Fatal("task stream before any use")
	}
	if _, err := e.b.List(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := e.js.Stream(ctx, wire.TaskStream)
	if err != nil {
		t.Fatalf("task stream after first use: %v", err)
	}
	// As an operator may have tuned it (replicas on a cluster, limits).
	cfg := s.CachedInfo().Config
	cfg.Description = "tuned"
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(e.js, e.s3, StreamOptions{}, nil).List(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err = e.js.Stream(ctx, wire.TaskStream); err != nil || s.CachedInfo().Config.Description != "tuned" {
		t.Errorf("a broker's first use changed the existing task stream: %v", err)
	}
}
