package autoscale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/wire"
)

// fakeActuator records Scale calls; every replica is ready at once unless
// ready overrides it.
type fakeActuator struct {
	mu     sync.Mutex
	counts map[string]int
	calls  []string
	ready  map[string]int
	err    error
}

func newFakeActuator() *fakeActuator {
	return &fakeActuator{counts: map[string]int{}, ready: map[string]int{}}
}

func (f *fakeActuator) Scale(_ context.Context, job string, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s=%d", job, n))
	if f.err != nil {
		return f.err
	}
	f.counts[job] = n
	return nil
}

func (f *fakeActuator) Ready(job string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.ready[job]; ok {
		return n
	}
	return f.counts[job]
}

func (f *fakeActuator) count(job string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[job]
}

func (f *fakeActuator) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// fakeBacklog is a job's tasks as a test sets them.
type fakeBacklog struct {
	mu                sync.Mutex
	pending, inflight int
	done              bool
}

func (b *fakeBacklog) get() (int, int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending, b.inflight, b.done
}

func (b *fakeBacklog) set(pending, inflight int, done bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending, b.inflight, b.done = pending, inflight, done
}

// feed stands in for the controller, which owns the agents' signals: it
// keeps each job's backlog and the latest signal of each of its readers,
// and ticks the runner with them aggregated (Aggregate), as plain inputs.
type feed struct {
	backlogs map[string]*fakeBacklog
	readers  map[string][]string
	signals  map[string]map[string]Signal
}

func newFeed() *feed {
	return &feed{backlogs: map[string]*fakeBacklog{}, readers: map[string][]string{}, signals: map[string]map[string]Signal{}}
}

// add gives job j to r, with its backlog (nil: none) and declared readers.
func (f *feed) add(r *Runner, name string, j Job, b *fakeBacklog, readers ...string) {
	f.backlogs[name], f.readers[name] = b, readers
	r.AddJob(name, j)
}

// observe keeps d as its reader's latest signal, received at at; an
// older one than kept is ignored.
func (f *feed) observe(d wire.Demand, at time.Time) {
	reader := d.Reader
	if reader == "" {
		reader = wire.DefaultReader
	}
	m := f.signals[d.Job]
	if m == nil {
		m = map[string]Signal{}
		f.signals[d.Job] = m
	}
	if o, ok := m[reader]; ok && o.At.After(at) {
		return
	}
	m[reader] = Signal{d, at}
}

// tick ticks r at now with every job's inputs.
func (f *feed) tick(ctx context.Context, r *Runner, now time.Time) {
	in := map[string]Inputs{}
	for name, b := range f.backlogs {
		var i Inputs
		if b != nil {
			i.Pending, i.InFlight, i.Done = b.get()
		}
		i.Demand, i.DemandAt = Aggregate(f.signals[name], f.readers[name], now, r.cfg.DemandStale)
		in[name] = i
	}
	r.Tick(ctx, now, in)
}

func stalled(job string) wire.Demand {
	return wire.Demand{Job: job, StallFraction: 1, BufferCapacity: 100}
}

func TestRunnerTick(t *testing.T) {
	act := newFakeActuator()
	cfg := DefaultConfig()
	cfg.ClusterCapacity = 5
	// The fair split's shares, which this test spells out; the marginal
	// allocator's are TestRunnerTickMarginal's.
	cfg.Allocator = AllocatorFair
	reg := prometheus.NewRegistry()
	r, err := NewRunner(act, cfg, nil, reg)
	f := newFeed()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b, idle := &fakeBacklog{pending: 40}, &fakeBacklog{pending: 40}, &fakeBacklog{}
	f.add(r, "a", Job{}, a)
	f.add(r, "b", Job{}, b)
	f.add(r, "idle", Job{}, idle)

	f.tick(ctx, r, sec(0))
	if diff := cmp.Diff([]string{"a=1", "b=1", "idle=0"}, act.takeCalls()); diff != "" {
		t.Fatalf("first tick scale calls (-want +got):\n%s", diff)
	}
	// Both trainers starve: each wants more; the cluster has 5.
	for i := 1; i <= 3; i++ {
		f.observe(stalled("a"), sec(float64(i)))
		f.observe(stalled("b"), sec(float64(i)))
		f.tick(ctx, r, sec(float64(i)))
	}
	if a, b := r.Replicas("a"), r.Replicas("b"); a+b != 5 || a != 3 || b != 2 {
		t.Fatalf("replicas a=%d b=%d, want 3 and 2 of the cluster's 5", a, b)
	}
	if act.count("a") != 3 || act.count("b") != 2 {
		t.Fatalf("actuator a=%d b=%d, want 3 and 2", act.count("a"), act.count("b"))
	}
	// Every tick scales every job, so an actuator can replace dead replicas.
	act.takeCalls()
	f.tick(ctx, r, sec(3.5))
	if diff := cmp.Diff([]string{"a=3", "b=2", "idle=0"}, act.takeCalls()); diff != "" {
		t.Errorf("steady tick scale calls (-want +got):\n%s", diff)
	}

	// A new job gets its fair share at once, taken from the biggest.
	f.add(r, "c", Job{}, &fakeBacklog{pending: 5})
	f.observe(stalled("a"), sec(4))
	f.observe(stalled("b"), sec(4))
	f.tick(ctx, r, sec(4))
	if diff := cmp.Diff([]string{"a=2", "b=2", "c=1", "idle=0"}, act.takeCalls()); diff != "" {
		t.Errorf("scale calls with a third job (-want +got):\n%s", diff)
	}

	// An older signal does not replace a newer one.
	f.observe(wire.Demand{Job: "a", StallFraction: 0, BufferedSamples: 50, BufferCapacity: 100}, sec(4.9))
	f.observe(wire.Demand{Job: "a", Done: true}, sec(0.5))
	b.set(0, 0, true)
	r.RemoveJob("idle")
	f.tick(ctx, r, sec(5))
	// The removed job and the one done first: their replicas go before
	// the others get theirs.
	if diff := cmp.Diff([]string{"idle=0", "b=0", "a=2", "c=1"}, act.takeCalls()); diff != "" {
		t.Errorf("scale calls after done and remove (-want +got):\n%s", diff)
	}

	var got []string
	for _, e := range r.Events() {
		if e.Time.After(sec(3.5)) {
			got = append(got, fmt.Sprintf("%s=%d %s", e.Job, e.Replicas, e.Reason))
		}
	}
	want := []string{
		"a=2 trainer stalled 100% and no per-replica rate to size by yet: add one; 2 granted of cluster capacity 5",
		"c=1 activate from zero: 5 tasks pending",
		"b=0 job done",
		"idle=0 job removed",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events of the last ticks (-want +got):\n%s", diff)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	desired := map[string]float64{}
	ups := 0.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "sluice_autoscale_desired_replicas":
				desired[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			case "sluice_autoscale_scale_events_total":
				if m.GetLabel()[0].GetValue() == "up" {
					ups += m.GetCounter().GetValue()
				}
			}
		}
	}
	if diff := cmp.Diff(map[string]float64{"a": 2, "b": 0, "c": 1}, desired); diff != "" {
		t.Errorf("desired replicas gauge (-want +got):\n%s", diff)
	}
	if ups == 0 {
		t.Error("no scale-up events counted")
	}
}

func TestRunnerKeepsDecidingWhenScaleFails(t *testing.T) {
	act := newFakeActuator()
	act.err = errors.New("quota exceeded")
	r, err := NewRunner(act, DefaultConfig(), nil, nil)
	f := newFeed()
	if err != nil {
		t.Fatal(err)
	}
	f.add(r, "a", Job{}, &fakeBacklog{pending: 3})
	f.tick(context.Background(), r, sec(0))
	f.tick(context.Background(), r, sec(1))
	if diff := cmp.Diff([]string{"a=1", "a=1"}, act.takeCalls()); diff != "" {
		t.Errorf("scale calls (-want +got):\n%s", diff)
	}
}

func TestNewRunnerRejectsBadConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxReplicas = 0
	if _, err := NewRunner(newFakeActuator(), cfg, nil, nil); err == nil {
		t.Error("NewRunner accepted max replicas 0")
	}
	if _, err := NewRunner(nil, DefaultConfig(), nil, nil); err == nil {
		t.Error("NewRunner accepted no actuator")
	}
}

func TestRunnerAppliesEachJobsBoundsAndWeight(t *testing.T) {
	act := newFakeActuator()
	cfg := DefaultConfig()
	cfg.ClusterCapacity = 9
	r, err := NewRunner(act, cfg, nil, nil)
	f := newFeed()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.add(r, "capped", Job{MaxReplicas: 2}, &fakeBacklog{pending: 100})
	f.add(r, "heavy", Job{Weight: 2}, &fakeBacklog{pending: 100})
	f.add(r, "light", Job{Weight: 1}, &fakeBacklog{pending: 100})
	f.add(r, "floor", Job{MinReplicas: 1}, &fakeBacklog{})
	for i := range 6 {
		for _, j := range []string{"capped", "heavy", "light"} {
			f.observe(stalled(j), sec(float64(i)))
		}
		f.tick(ctx, r, sec(float64(i)))
	}
	// 9 in all: the floor job keeps its 1, the capped job its max 2, and
	// the 6 left go 2:1 by weight.
	got := map[string]int{}
	for _, j := range []string{"capped", "heavy", "light", "floor"} {
		got[j] = act.count(j)
	}
	if diff := cmp.Diff(map[string]int{"capped": 2, "heavy": 4, "light": 2, "floor": 1}, got); diff != "" {
		t.Errorf("replicas (-want +got):\n%s", diff)
	}
}

func TestRunnerFollowsTheMostStalledReader(t *testing.T) {
	act := newFakeActuator()
	r, err := NewRunner(act, DefaultConfig(), nil, nil)
	f := newFeed()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.add(r, "j", Job{}, &fakeBacklog{pending: 100}, "fast", "slow")
	f.tick(ctx, r, sec(0)) // activation: 1
	for i := 1; i <= 2; i++ {
		f.observe(wire.Demand{Job: "j", Reader: "fast", StallFraction: 0, BufferedSamples: 90, BufferCapacity: 100}, sec(float64(i)))
		f.observe(wire.Demand{Job: "j", Reader: "slow", StallFraction: 1, BufferCapacity: 100}, sec(float64(i)))
		f.tick(ctx, r, sec(float64(i)))
	}
	if n := act.count("j"); n <= 1 {
		t.Fatalf("%d replicas: the stalled reader should have added some", n)
	}
	// One reader done is not the job done.
	f.observe(wire.Demand{Job: "j", Reader: "fast", Done: true}, sec(3))
	f.tick(ctx, r, sec(3))
	if n := act.count("j"); n == 0 {
		t.Fatal("scaled to zero while a reader still reads")
	}
	f.observe(wire.Demand{Job: "j", Reader: "slow", Done: true}, sec(3.5))
	f.tick(ctx, r, sec(4))
	if n, reason := r.Decision("j"); n != 0 || reason != "job done" {
		t.Errorf("decision %d %q, want 0 \"job done\" once every reader is", n, reason)
	}
}

// TestRunnerTickMarginal runs two jobs whose trainers eat 200/s and
// 1000/s from replicas of 100/s each on a cluster of 6: the marginal
// allocator covers the small trainer's need (2) and gives the rest to the
// big one, where the fair split gives 3 and 3 and the small job's third
// replica idles.
func TestRunnerTickMarginal(t *testing.T) {
	appetite := map[string]float64{"a": 200, "b": 1000}
	for _, tc := range []struct {
		allocator string
		want      map[string]int
		progress  float64 // the trainers' speeds, as shares of full, summed
	}{
		{AllocatorMarginal, map[string]int{"a": 2, "b": 4}, 1.4},
		{AllocatorFair, map[string]int{"a": 3, "b": 3}, 1.3},
	} {
		t.Run(tc.allocator, func(t *testing.T) {
			act := newFakeActuator()
			cfg := DefaultConfig()
			cfg.ClusterCapacity, cfg.Allocator = 6, tc.allocator
			r, err := NewRunner(act, cfg, nil, prometheus.NewRegistry())
			f := newFeed()
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for name := range appetite {
				f.add(r, name, Job{}, &fakeBacklog{pending: 100})
			}
			progress := 0.0
			for i := range 20 {
				now := sec(float64(i))
				progress = 0
				for name, want := range appetite {
					arrived := 100 * float64(act.count(name))
					consumed := min(arrived, want)
					f.observe(wire.Demand{Job: name, ArrivedPerS: arrived, ConsumedPerS: consumed,
						StallFraction: 1 - consumed/want, BufferCapacity: 100}, now)
					progress += consumed / want
				}
				f.tick(ctx, r, now)
			}
			got := map[string]int{"a": act.count("a"), "b": act.count("b")}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("replicas (-want +got):\n%s", diff)
			}
			if math.Abs(progress-tc.progress) > 1e-9 {
				t.Errorf("trainer progress %.2f, want %.2f", progress, tc.progress)
			}
		})
	}
}
