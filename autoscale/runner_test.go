package autoscale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/testenv"
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

type fakeBacklog struct {
	mu                sync.Mutex
	pending, inflight int
	done              bool
}

func (b *fakeBacklog) Backlog() (int, int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending, b.inflight, b.done
}

func (b *fakeBacklog) set(pending, inflight int, done bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending, b.inflight, b.done = pending, inflight, done
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
	r, err := NewRunner(nil, act, cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b, idle := &fakeBacklog{pending: 40}, &fakeBacklog{pending: 40}, &fakeBacklog{}
	r.AddJob("a", Job{Backlog: a})
	r.AddJob("b", Job{Backlog: b})
	r.AddJob("idle", Job{Backlog: idle})

	r.Tick(ctx, sec(0))
	if diff := cmp.Diff([]string{"a=1", "b=1", "idle=0"}, act.takeCalls()); diff != "" {
		t.Fatalf("first tick scale calls (-want +got):\n%s", diff)
	}
	// Both trainers starve: each wants more; the cluster has 5.
	for i := 1; i <= 3; i++ {
		r.Observe(stalled("a"), sec(float64(i)))
		r.Observe(stalled("b"), sec(float64(i)))
		r.Tick(ctx, sec(float64(i)))
	}
	if a, b := r.Replicas("a"), r.Replicas("b"); a+b != 5 || a != 3 || b != 2 {
		t.Fatalf("replicas a=%d b=%d, want 3 and 2 of the cluster's 5", a, b)
	}
	if act.count("a") != 3 || act.count("b") != 2 {
		t.Fatalf("actuator a=%d b=%d, want 3 and 2", act.count("a"), act.count("b"))
	}
	// Every tick scales every job, so an actuator can replace dead replicas.
	act.takeCalls()
	r.Tick(ctx, sec(3.5))
	if diff := cmp.Diff([]string{"a=3", "b=2", "idle=0"}, act.takeCalls()); diff != "" {
		t.Errorf("steady tick scale calls (-want +got):\n%s", diff)
	}

	// A new job gets its fair share at once, taken from the biggest.
	r.AddJob("c", Job{Backlog: &fakeBacklog{pending: 5}})
	r.Observe(stalled("a"), sec(4))
	r.Observe(stalled("b"), sec(4))
	r.Tick(ctx, sec(4))
	if diff := cmp.Diff([]string{"a=2", "b=2", "c=1", "idle=0"}, act.takeCalls()); diff != "" {
		t.Errorf("scale calls with a third job (-want +got):\n%s", diff)
	}

	// An older signal does not replace a newer one.
	r.Observe(wire.Demand{Job: "a", StallFraction: 0, BufferedSamples: 50, BufferCapacity: 100}, sec(4.9))
	r.Observe(wire.Demand{Job: "a", Done: true}, sec(0.5))
	b.set(0, 0, true)
	r.RemoveJob("idle")
	r.Tick(ctx, sec(5))
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
	r, err := NewRunner(nil, act, DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.AddJob("a", Job{Backlog: &fakeBacklog{pending: 3}})
	r.Tick(context.Background(), sec(0))
	r.Tick(context.Background(), sec(1))
	if diff := cmp.Diff([]string{"a=1", "a=1"}, act.takeCalls()); diff != "" {
		t.Errorf("scale calls (-want +got):\n%s", diff)
	}
}

func TestNewRunnerRejectsBadConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxReplicas = 0
	if _, err := NewRunner(nil, newFakeActuator(), cfg, nil, nil); err == nil {
		t.Error("NewRunner accepted max replicas 0")
	}
	if _, err := NewRunner(nil, nil, DefaultConfig(), nil, nil); err == nil {
		t.Error("NewRunner accepted no actuator")
	}
	r, _ := NewRunner(nil, newFakeActuator(), DefaultConfig(), nil, nil)
	if err := r.Run(context.Background(), nil); err == nil {
		t.Error("Run without a nats connection succeeded")
	}
}

func TestRunnerRunReadsDemandOverNATS(t *testing.T) {
	_, nc := testenv.NATS(t)
	act := newFakeActuator()
	r, err := NewRunner(nc, act, DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.AddJob("job-7", Job{Backlog: &fakeBacklog{pending: 20}})
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, tick) }()

	tick <- time.Now()
	testenv.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if n := r.Replicas("job-7"); n != 1 {
			return fmt.Errorf("%d replicas, want 1 (activation)", n)
		}
		return nil
	})
	// The trainer starves: its signal, published like an agent does, makes
	// the next ticks add replicas. The subject names the job, whatever the body says.
	d := stalled("someone-else")
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if err := nc.Publish(wire.DemandSubject("job-7"), data); err != nil {
			return err
		}
		if err := nc.Flush(); err != nil {
			return err
		}
		tick <- time.Now()
		if n := act.count("job-7"); n < 2 {
			return fmt.Errorf("%d replicas, want more after a stall", n)
		}
		return nil
	})
	ev := r.Events()
	if len(ev) < 2 || !strings.Contains(ev[1].Reason, "stalled 100%") {
		t.Errorf("events %+v: want activation then a stall", ev)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
}

func TestRunnerAppliesEachJobsBoundsAndWeight(t *testing.T) {
	act := newFakeActuator()
	cfg := DefaultConfig()
	cfg.ClusterCapacity = 9
	r, err := NewRunner(nil, act, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.AddJob("capped", Job{Backlog: &fakeBacklog{pending: 100}, MaxReplicas: 2})
	r.AddJob("heavy", Job{Backlog: &fakeBacklog{pending: 100}, Weight: 2})
	r.AddJob("light", Job{Backlog: &fakeBacklog{pending: 100}, Weight: 1})
	r.AddJob("floor", Job{Backlog: &fakeBacklog{}, MinReplicas: 1})
	for i := range 6 {
		for _, j := range []string{"capped", "heavy", "light"} {
			r.Observe(stalled(j), sec(float64(i)))
		}
		r.Tick(ctx, sec(float64(i)))
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
	r, err := NewRunner(nil, act, DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.AddJob("j", Job{Backlog: &fakeBacklog{pending: 100}, Readers: []string{"fast", "slow"}})
	r.Tick(ctx, sec(0)) // activation: 1
	for i := 1; i <= 2; i++ {
		r.Observe(wire.Demand{Job: "j", Reader: "fast", StallFraction: 0, BufferedSamples: 90, BufferCapacity: 100}, sec(float64(i)))
		r.Observe(wire.Demand{Job: "j", Reader: "slow", StallFraction: 1, BufferCapacity: 100}, sec(float64(i)))
		r.Tick(ctx, sec(float64(i)))
	}
	if n := act.count("j"); n <= 1 {
		t.Fatalf("%d replicas: the stalled reader should have added some", n)
	}
	if got := r.Signals("j"); len(got) != 2 {
		t.Errorf("signals %v, want one per reader", got)
	}
	// One reader done is not the job done.
	r.Observe(wire.Demand{Job: "j", Reader: "fast", Done: true}, sec(3))
	r.Tick(ctx, sec(3))
	if n := act.count("j"); n == 0 {
		t.Fatal("scaled to zero while a reader still reads")
	}
	r.Observe(wire.Demand{Job: "j", Reader: "slow", Done: true}, sec(3.5))
	r.Tick(ctx, sec(4))
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
			r, err := NewRunner(nil, act, cfg, nil, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for name := range appetite {
				r.AddJob(name, Job{Backlog: &fakeBacklog{pending: 100}})
			}
			progress := 0.0
			for i := range 20 {
				now := sec(float64(i))
				progress = 0
				for name, want := range appetite {
					arrived := 100 * float64(act.count(name))
					consumed := min(arrived, want)
					r.Observe(wire.Demand{Job: name, ArrivedPerS: arrived, ConsumedPerS: consumed,
						StallFraction: 1 - consumed/want, BufferCapacity: 100}, now)
					progress += consumed / want
				}
				r.Tick(ctx, now)
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

// TestRunnerKeepsEachAgentsLatestSignal: several agents of one job (one per
// node) serve the same reader; each one's latest signal is kept apart, an
// older one does not replace it, and they go with the job.
func TestRunnerKeepsEachAgentsLatestSignal(t *testing.T) {
	r, err := NewRunner(nil, newFakeActuator(), DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.AddJob("j", Job{})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.Observe(wire.Demand{Job: "j", Agent: "node-a", InFlight: 3}, t0.Add(2*time.Second))
	r.Observe(wire.Demand{Job: "j", Agent: "node-a", InFlight: 9}, t0) // older: ignored
	r.Observe(wire.Demand{Job: "j", Agent: "node-b", InFlight: 2}, t0.Add(time.Second))
	r.Observe(wire.Demand{Job: "j", InFlight: 7}, t0.Add(time.Second)) // names no agent
	r.Observe(wire.Demand{Job: "other", Agent: "node-a", InFlight: 1}, t0)
	got := map[string]int{}
	for name, s := range r.Agents("j") {
		got[name] = s.Demand.InFlight
	}
	if diff := cmp.Diff(map[string]int{"node-a": 3, "node-b": 2}, got); diff != "" {
		t.Errorf("agents' in flight (-want +got):\n%s", diff)
	}
	if n := len(r.Signals("j")); n != 1 {
		t.Errorf("%d readers' signals, want 1 (the default reader)", n)
	}
	r.RemoveJob("j")
	if a := r.Agents("j"); len(a) != 0 {
		t.Errorf("agents of a removed job: %v", a)
	}
}
