package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

func TestShareInFlight(t *testing.T) {
	for _, c := range []struct {
		name   string
		total  int
		agents []string
		want   map[string]int
	}{
		{"equal", 6, []string{"b", "a", "c"}, map[string]int{"a": 2, "b": 2, "c": 2}},
		{"remainder to the first in name order", 8, []string{"c", "b", "a"}, map[string]int{"a": 3, "b": 3, "c": 2}},
		{"one agent takes all", 5, []string{"a"}, map[string]int{"a": 5}},
		{"at least one each", 2, []string{"a", "b", "c", "d"}, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}},
		{"a name twice counts once", 4, []string{"a", "b", "a"}, map[string]int{"a": 2, "b": 2}},
		{"no budget", 0, []string{"a", "b"}, nil},
		{"no agent", 4, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := shareInFlight(c.total, c.agents)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("shares (-want +got):\n%s", diff)
			}
			sum := 0
			for _, n := range got {
				sum += n
			}
			if c.total >= len(got) && len(got) > 0 && sum != c.total {
				t.Errorf("shares add up to %d, want the budget %d", sum, c.total)
			}
		})
	}
}

func TestPlanFor(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	local := planFor(planInputs{job: "j", endpoints: []string{"http://r0", "http://r1"}, capacity: 2, concurrency: 3,
		agents: []string{"n1", "n2"}}, now)
	want := wire.DispatchPlan{Job: "j", Time: now, Endpoints: []string{"http://r0", "http://r1"}, PerEndpoint: 3, InFlight: 6,
		Shares: map[string]int{"n1": 3, "n2": 3}}
	if diff := cmp.Diff(want, local); diff != "" {
		t.Errorf("local replicas' plan (-want +got):\n%s", diff)
	}
	// A Service URL: no per-endpoint limit, the whole budget through it.
	svc := planFor(planInputs{job: "j", endpoints: []string{"http://svc"}, capacity: 4, concurrency: 2, shared: true,
		agents: []string{"n1"}}, now)
	if svc.PerEndpoint != 0 || svc.InFlight != 8 || svc.Shares["n1"] != 8 {
		t.Errorf("service plan %+v, want no per-endpoint limit and 8 in flight, all n1's", svc)
	}
	// No replica: no endpoint, no budget; the agents send nothing.
	none := planFor(planInputs{job: "j", capacity: 0, concurrency: 2, agents: []string{"n1"}}, now)
	if len(none.Endpoints) != 0 || none.Endpoints == nil || none.InFlight != 0 || none.Share("n1") != 0 || none.Share("new") != 0 {
		t.Errorf("plan without replicas %+v, want an empty endpoint list and nothing in flight", none)
	}
	later := planFor(planInputs{job: "j", endpoints: []string{"http://r0", "http://r1"}, capacity: 2, concurrency: 3,
		agents: []string{"n2", "n1"}}, now.Add(time.Minute))
	if !samePlan(local, later) {
		t.Errorf("the same plan written later counts as changed")
	}
	if samePlan(local, none) || samePlan(local, svc) {
		t.Errorf("different plans count as the same")
	}
}

// sharedPool is the pool seen as a Knative Service: one URL for every
// replica.
type sharedPool struct{ *pool }

func (s sharedPool) Endpoints(job string) []string {
	if s.Ready(job) == 0 {
		return nil
	}
	return []string{s.url + "/svc"}
}

func (sharedPool) SharedEndpoint() bool { return true }

// requested sizes the budget by a fixed replica count, as Knative's
// Requested does by the replicas decided.
type requested int

func (r requested) Ready(string) int { return int(r) }

// TestDispatchPlanFollowsReplicasAndAgents: the owner writes the job's
// plan to the dispatch bucket, naming each ready replica with the replica
// concurrency and splitting replicas x concurrency among the agents that
// signal; the plan follows the replicas as the autoscaler adds them, and
// goes when the job ends.
func TestDispatchPlanFollowsReplicasAndAgents(t *testing.T) {
	e := newEnv(t, 8)
	e.gate.hold(0)
	e.startController(t, "c1", Options{ReplicaConcurrency: 2, MaxReplicas: 4})
	job := e.submit(t, spec("planned", "img", 1))
	starved := func(a *agent) { a.stall = 1 }
	e.startAgent(t, job, "node-a", starved)
	e.startAgent(t, job, "node-b", starved, func(a *agent) { a.finishes = nil })
	var seen []int // InFlight of each plan seen
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		p, ok, err := e.plan("planned")
		if err != nil || !ok {
			return fmt.Errorf("plan: %v, %v", ok, err)
		}
		if len(seen) == 0 || seen[len(seen)-1] != p.InFlight {
			seen = append(seen, p.InFlight)
		}
		ready := e.pool.Ready("planned")
		want := wire.DispatchPlan{Job: "planned", Time: p.Time, Endpoints: e.pool.Endpoints("planned"), PerEndpoint: 2,
			InFlight: 2 * ready, Shares: shareInFlight(2*ready, []string{"node-a", "node-b"})}
		if diff := cmp.Diff(want, p); diff != "" {
			return fmt.Errorf("plan (-want +got):\n%s", diff)
		}
		if ready != 4 {
			return fmt.Errorf("%d replicas, want the trainers' stall to bring 4", ready)
		}
		return nil
	})
	if len(seen) < 2 || seen[len(seen)-1] != 8 {
		t.Errorf("in-flight budgets seen %v, want it to grow to 8 with the replicas", seen)
	}
	// Tasks held in flight show in the status, as the agents signal them.
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		s, err := e.status("planned")
		if err != nil {
			return err
		}
		if s.Tasks.InFlight != 8 || s.Tasks.Pending != 0 || s.Tasks.Done != 0 {
			return fmt.Errorf("tasks %+v, want 8 in flight (both agents' shares), none pending or done", s.Tasks)
		}
		return nil
	})
	e.gate.release()
	e.waitState(t, "planned", wire.JobSucceeded, time.Minute)
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return e.released("planned") })
}

// TestPlanOfASharedEndpoint: with a Service URL for every replica and the
// budget sized by the replicas requested (Options.Dispatch), the plan sets
// no per-endpoint limit and gives the requested replicas' concurrency.
func TestPlanOfASharedEndpoint(t *testing.T) {
	e := newEnv(t, 2)
	e.gate.hold(0)
	e.startController(t, "c1", Options{Actuator: sharedPool{e.pool}, Dispatch: requested(3), ReplicaConcurrency: 4})
	job := e.submit(t, spec("svc", "img", 1))
	e.startAgent(t, job, "node-a")
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		p, ok, err := e.plan("svc")
		if err != nil || !ok {
			return fmt.Errorf("plan: %v, %v", ok, err)
		}
		want := wire.DispatchPlan{Job: "svc", Time: p.Time, Endpoints: []string{e.pool.url + "/svc"}, InFlight: 12,
			Shares: map[string]int{"node-a": 12}}
		if diff := cmp.Diff(want, p); diff != "" {
			return fmt.Errorf("plan (-want +got):\n%s", diff)
		}
		return nil
	})
	e.gate.release()
	e.waitState(t, "svc", wire.JobSucceeded, time.Minute)
}

// TestBacklogReadsTheTaskConsumer: the autoscaler's backlog of a job no
// agent serves yet is its task consumer's pending tasks, read at most
// every backlogPoll; once every task is acked the job is done.
func TestBacklogReadsTheTaskConsumer(t *testing.T) {
	e := newEnv(t, 3)
	e.gate.release()
	r := e.startController(t, "c1", Options{})
	job := e.submit(t, spec("queued", "img", 2))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		in, ok := r.c.autoscaleInputs(time.Now())["queued"]
		if p, f := in.Pending, in.InFlight; !ok || p != 6 || f != 0 {
			return fmt.Errorf("backlog %d pending, %d in flight (managed %v), want the 6 queued tasks", p, f, ok)
		}
		// The status is written on the next tick.
		s, err := e.status("queued")
		if err != nil {
			return err
		}
		if s.Tasks.Pending != 6 || s.Tasks.Total != 6 {
			return fmt.Errorf("status tasks %+v, want 6 of 6 pending", s.Tasks)
		}
		return nil
	})
	e.startAgent(t, job, "node-a", func(a *agent) { a.finishes = nil })
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		r.c.mu.Lock()
		jr := r.c.owned["queued"]
		r.c.mu.Unlock()
		if jr == nil {
			return fmt.Errorf("job not owned")
		}
		if in := r.c.autoscaleInputs(time.Now())["queued"]; !in.Done {
			return fmt.Errorf("backlog not done: %+v", in)
		}
		return nil
	})
	e.readerDone(job, wire.DefaultReader, nil)
	e.waitState(t, "queued", wire.JobSucceeded, 20*time.Second)
}

// TestTaskConsumerTakesTheControllersAckWait: the consumer the broker made
// with the default ack wait gets the owning controller's.
func TestTaskConsumerTakesTheControllersAckWait(t *testing.T) {
	e := newEnv(t, 2)
	e.startController(t, "c1", Options{TaskAckWait: 3 * time.Second})
	e.submit(t, spec("ackwait", "img", 1))
	// Generous: with every package's tests at once on two cores, taking
	// the job once took over 10 s.
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		c, err := e.js.Consumer(context.Background(), wire.TaskStream, wire.DispatchConsumer("ackwait"))
		if err != nil {
			return err
		}
		if w := c.CachedInfo().Config.AckWait; w != 3*time.Second {
			return fmt.Errorf("ack wait %v, want 3s", w)
		}
		return nil
	})
}

// TestPlanFollowsReplicasBetweenTicks: a replica that becomes ready is in
// the job's dispatch plan within planRefresh, not a tick later (a cold
// start's first batch waits for it).
func TestPlanFollowsReplicasBetweenTicks(t *testing.T) {
	e := newEnv(t, 2)
	e.gate.hold(0)
	e.startController(t, "c1", Options{Tick: time.Minute, ReplicaConcurrency: 1})
	e.submit(t, spec("between", "img", 1))
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if _, ok, err := e.plan("between"); err != nil || !ok {
			return fmt.Errorf("no plan yet: %v, %v", ok, err)
		}
		return nil
	})
	// No tick comes in this test: the replicas appear as the actuator's
	// (a local replica printed its ready line).
	if err := e.pool.Scale(context.Background(), "between", 2); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		p, _, err := e.plan("between")
		if err != nil {
			return err
		}
		if len(p.Endpoints) != 2 || p.InFlight != 2 {
			return fmt.Errorf("plan %+v, want the 2 replicas and 2 in flight", p)
		}
		return nil
	})
}

// TestJobDecidesWhenAdmitted: a job at zero with tasks pending gets its
// first replicas when the controller takes it, not at the next tick (a
// tick of a minute here): a cold start waited up to a whole tick for that
// decision.
func TestJobDecidesWhenAdmitted(t *testing.T) {
	e := newEnv(t, 4)
	e.startController(t, "c1", Options{Tick: time.Minute})
	e.submit(t, spec("eager", "img", 1))
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if n := e.pool.Ready("eager"); n == 0 {
			return errors.New("no replica asked for yet")
		}
		return nil
	})
}
