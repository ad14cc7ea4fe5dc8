package controller

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// TestMergeTeam: one reader's signal from its team's agents, as values.
func TestMergeTeam(t *testing.T) {
	const stale = 5 * time.Second
	planner := autoscale.Signal{At: at(10), Demand: wire.Demand{Job: "j", Reader: "trainer", Agent: "node0", Time: at(10),
		InFlight: 2, PendingTasks: 1, IntervalS: 1, ConsumedPerS: 200, ArrivedPerS: 180, StallFraction: 0.2,
		WaitFraction: 0.3, WaitSource: wire.WaitClient, GPUUtilization: 0.8, BufferedSamples: 40, BufferCapacity: 100,
		SamplesDone: 276, SamplesTotal: 1200, Step: wire.StepTimes{Steps: 10, Ranks: 2, WaitS: 0.1, ComputeS: 0.3}}}
	member := autoscale.Signal{At: at(9.5), Demand: wire.Demand{Job: "j", Reader: "trainer", Agent: "node1", Time: at(9.5),
		InFlight: 3, IntervalS: 1.1, ConsumedPerS: 100, ArrivedPerS: 120, StallFraction: 0.5,
		WaitFraction: 0.6, WaitSource: wire.WaitAgent, GPUUtilization: -1, BufferedSamples: 10, BufferCapacity: 100,
		SamplesDone: 132, SamplesTotal: 1200, Step: wire.StepTimes{Steps: 30, Ranks: 2, WaitS: 0.5, ComputeS: 0.3}}}
	memberDone := member
	memberDone.Demand.Done, memberDone.Demand.SamplesDone = true, 300
	plannerDone := planner
	plannerDone.Demand.Done, plannerDone.Demand.SamplesDone = true, 300
	staleMember := member
	staleMember.At = at(1)

	team := wire.Demand{Job: "j", Reader: "trainer", Time: at(10),
		InFlight: 5, PendingTasks: 1, IntervalS: 1.1, ConsumedPerS: 300, ArrivedPerS: 300, StallFraction: 0.5,
		WaitFraction: 0.6, WaitSource: wire.WaitAgent, GPUUtilization: 0.8, BufferedSamples: 50, BufferCapacity: 200,
		SamplesDone: 408, SamplesTotal: 1200, Step: wire.StepTimes{Steps: 40, Ranks: 4, WaitS: 0.4, ComputeS: 0.3}}
	plannerAlone := planner.Demand
	plannerAlone.Agent = ""
	plannerAlone.SamplesDone = 276 + 300 // the member's final count still counts
	for _, tc := range []struct {
		name   string
		team   []autoscale.Signal
		want   wire.Demand
		wantAt time.Time
	}{
		{"a lone agent: its signal as it is", []autoscale.Signal{planner}, planner.Demand, at(10)},
		{"planner and member: rates and progress add up, the most stalled", []autoscale.Signal{member, planner}, team, at(10)},
		{"the member done first: not done, its samples counted", []autoscale.Signal{planner, memberDone}, plannerAlone, at(10)},
		{"both done: done, every sample once",
			[]autoscale.Signal{memberDone, plannerDone},
			wire.Demand{Job: "j", Reader: "trainer", Time: at(10), Done: true, GPUUtilization: -1, SamplesDone: 600, SamplesTotal: 1200}, at(10)},
		{"a member silent past stale: left out", []autoscale.Signal{planner, staleMember},
			func() wire.Demand { d := planner.Demand; d.Agent = ""; return d }(), at(10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeTeam(tc.team, at(11), stale)
			if diff := cmp.Diff(tc.want, got.Demand, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("merged (-want +got):\n%s", diff)
			}
			if !got.At.Equal(tc.wantAt) {
				t.Errorf("at %v, want %v", got.At, tc.wantAt)
			}
		})
	}
	// Everyone silent: the last heard, as old as the newest, for the
	// status to show; the autoscaler drops it as stale.
	got := mergeTeam([]autoscale.Signal{planner, member}, at(60), stale)
	if !got.At.Equal(at(10)) || got.Demand.SamplesDone != 408 || got.Demand.Done {
		t.Errorf("all stale: %+v at %v, want the team's last, at 10s", got.Demand, got.At)
	}
}

// TestDemandBookKeepsEachAgentOfAReader: the agents of a team publish
// under one reader; each one's latest signal is kept apart, an older one
// does not replace it, an agent's load counts once over its readers, and
// they go with the job.
func TestDemandBookKeepsEachAgentOfAReader(t *testing.T) {
	b := newDemandBook()
	b.addJob("j", []string{"trainer", "eval"})
	const stale = 5 * time.Second
	for _, o := range []struct {
		d  wire.Demand
		at time.Time
	}{
		{wire.Demand{Job: "j", Agent: "node-a", InFlight: 3, SamplesDone: 10}, at(2)},
		{wire.Demand{Job: "j", Agent: "node-a", InFlight: 9, SamplesDone: 99}, at(0)}, // older: ignored
		{wire.Demand{Job: "j", Reader: "eval", Agent: "node-a", InFlight: 3, SamplesDone: 7}, at(2)},
		{wire.Demand{Job: "j", Agent: "node-b", InFlight: 2, SamplesDone: 5}, at(1)},
		{wire.Demand{Job: "other", Agent: "node-a", InFlight: 1}, at(0)}, // a job not run here
	} {
		if why := b.observe(o.d, o.at, stale); why != "" {
			t.Errorf("%+v refused: %s", o.d, why)
		}
	}
	got := map[string]int{}
	for name, s := range b.agents("j") {
		got[name] = s.Demand.InFlight
	}
	if diff := cmp.Diff(map[string]int{"node-a": 3, "node-b": 2}, got); diff != "" {
		t.Errorf("agents' in flight (-want +got):\n%s", diff)
	}
	readers := b.readers("j", at(3), stale)
	if len(readers) != 2 || readers["trainer"].Demand.SamplesDone != 15 || readers["eval"].Demand.SamplesDone != 7 {
		t.Errorf("readers %+v, want trainer's team 10+5, eval 7", readers)
	}
	b.removeJob("j")
	if a := b.agents("j"); len(a) != 0 {
		t.Errorf("agents of a removed job: %v", a)
	}
}

// TestDemandBookRefusesUndeclaredReaders: a job's signals are kept for its
// declared readers only; those of any other name are refused, not kept in
// a map that grows with every name anyone publishes.
func TestDemandBookRefusesUndeclaredReaders(t *testing.T) {
	b := newDemandBook()
	b.addJob("j", []string{"train", "eval"})
	b.observe(wire.Demand{Job: "j", Reader: "train", Agent: "node-a"}, at(1), time.Second)
	for i := range 1000 {
		if why := b.observe(wire.Demand{Job: "j", Reader: fmt.Sprintf("intruder-%d", i), Agent: fmt.Sprintf("fake-%d", i)}, at(1), time.Second); why != refusedUndeclaredReader {
			t.Fatalf("intruder %d: refused %q, want %s", i, why, refusedUndeclaredReader)
		}
	}
	if got := b.readers("j", at(1), time.Second); len(got) != 1 {
		t.Errorf("signals kept for %d readers, want train's only", len(got))
	}
	if got := b.agents("j"); len(got) != 1 {
		t.Errorf("signals kept for %d agents, want node-a's only", len(got))
	}
	// A job that declares none keeps at most wire.MaxReaders.
	b.addJob("any", nil)
	for i := range 3 * wire.MaxReaders {
		b.observe(wire.Demand{Job: "any", Reader: fmt.Sprintf("r%d", i)}, at(1), time.Second)
	}
	if n := len(b.readers("any", at(1), time.Second)); n != wire.MaxReaders {
		t.Errorf("signals kept for %d readers, want %d", n, wire.MaxReaders)
	}
	b.observe(wire.Demand{Job: "any", Reader: "r0", StallFraction: 0.5}, at(2), time.Second)
	if s := b.readers("any", at(2), time.Second)["r0"]; s.Demand.StallFraction != 0.5 {
		t.Errorf("r0's signal %+v, want its latest", s)
	}
}

// TestDemandBookBoundsAgents: at most MaxAgentsPerJob agents are kept; one
// more takes the place of a stale one, and is refused while none is
// stale; a name over MaxAgentNameBytes is refused.
func TestDemandBookBoundsAgents(t *testing.T) {
	const stale = 5 * time.Second
	b := newDemandBook()
	b.addJob("j", []string{wire.DefaultReader})
	for i := range MaxAgentsPerJob {
		b.observe(wire.Demand{Job: "j", Agent: fmt.Sprintf("a%d", i)}, at(1), stale)
	}
	b.observe(wire.Demand{Job: "j", Agent: "a0"}, at(2), stale) // a0 is fresh again
	if why := b.observe(wire.Demand{Job: "j", Agent: "one-more"}, at(2), stale); why != refusedTooManyAgents {
		t.Errorf("one agent over the cap, none stale: refused %q, want %s", why, refusedTooManyAgents)
	}
	if _, ok := b.agents("j")["one-more"]; ok || len(b.agents("j")) != MaxAgentsPerJob {
		t.Fatalf("%d agents kept, one-more among them %v; want %d, not one-more", len(b.agents("j")), ok, MaxAgentsPerJob)
	}
	later := at(1).Add(stale + time.Second)
	if why := b.observe(wire.Demand{Job: "j", Agent: "one-more"}, later, stale); why != "" {
		t.Errorf("once the others are stale: refused %q", why)
	}
	if _, ok := b.agents("j")["one-more"]; !ok || len(b.agents("j")) != MaxAgentsPerJob {
		t.Errorf("once the others are stale: %d agents kept, one-more among them %v; want %d with it", len(b.agents("j")), ok, MaxAgentsPerJob)
	}
	if _, ok := b.agents("j")["a0"]; !ok {
		t.Errorf("a0, fresh, was dropped for one-more")
	}
	if why := b.observe(wire.Demand{Job: "j", Agent: strings.Repeat("x", MaxAgentNameBytes+1)}, later, stale); why != refusedAgentName {
		t.Errorf("too long an agent name: refused %q, want %s", why, refusedAgentName)
	}
}

// TestTeamDemandDoesNotFlip: the two agents of a team (the planner for
// ranks 0,1, a member for 2,3) publish their demand under the one reader,
// in either order. The job's status shows the team's progress, both
// agents' samples once, whichever spoke last (it flipped between the
// planner's 276 and the member's 132 when the last signal of a reader
// was kept), and the member's final Done does not end the reader while
// the planner still hands out.
func TestTeamDemandDoesNotFlip(t *testing.T) {
	e := newEnv(t, 2)
	r := e.startController(t, "c1", Options{})
	e.submit(t, spec("team", "img", 1))
	planner := wire.Demand{Job: "team", Reader: wire.DefaultReader, Agent: "node0", IntervalS: 1,
		ConsumedPerS: 200, StallFraction: 0.1, BufferCapacity: 100, SamplesDone: 276, GPUUtilization: -1}
	member := wire.Demand{Job: "team", Reader: wire.DefaultReader, Agent: "node1", IntervalS: 1,
		ConsumedPerS: 100, StallFraction: 0.1, BufferCapacity: 100, SamplesDone: 132, GPUUtilization: -1}
	publish := func(ds ...wire.Demand) {
		t.Helper()
		for _, d := range ds {
			d.Time = time.Now()
			data, _ := json.Marshal(d)
			if err := e.nc.Publish(wire.DemandSubject("team"), data); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// The status written after both spoke, in either order.
	statusAfter := func(ds ...wire.Demand) wire.JobStatus {
		t.Helper()
		publish(ds...)
		sent := time.Now()
		var s wire.JobStatus
		testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			var err error
			if s, err = e.status("team"); err != nil {
				return err
			}
			if !s.Updated.After(sent) || s.Readers[wire.DefaultReader].Seen.IsZero() {
				return fmt.Errorf("status updated %v, before the signals (%v)", s.Updated, sent)
			}
			return nil
		})
		return s
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if _, ok := r.c.autoscaleInputs(time.Now())["team"]; !ok {
			return fmt.Errorf("job not running here yet")
		}
		return nil
	})
	for i := range 6 {
		order := []wire.Demand{planner, member}
		if i%2 == 1 {
			order = []wire.Demand{member, planner}
		}
		rs := statusAfter(order...).Readers[wire.DefaultReader]
		if rs.SamplesDelivered != 408 || rs.ConsumedPerS != 300 || rs.Done {
			t.Errorf("interval %d (last: %s): reader delivered %d at %v/s, done %v; want the team's 408 at 300/s, not done",
				i, order[1].Agent, rs.SamplesDelivered, rs.ConsumedPerS, rs.Done)
		}
	}
	member.Done, member.SamplesDone = true, 300
	planner.SamplesDone = 280
	rs := statusAfter(planner, member).Readers[wire.DefaultReader]
	if rs.Done || rs.SamplesDelivered != 580 {
		t.Errorf("the member done: reader delivered %d, done %v; want 580, not done while the planner hands out", rs.SamplesDelivered, rs.Done)
	}
	if in := r.c.autoscaleInputs(time.Now())["team"]; in.Demand == nil || in.Demand.Done {
		t.Errorf("the autoscaler's demand %+v: want the planner's, not done", in.Demand)
	}
	planner.Done, planner.SamplesDone = true, 300
	rs = statusAfter(member, planner).Readers[wire.DefaultReader]
	if !rs.Done || rs.SamplesDelivered != 600 {
		t.Errorf("both done: reader delivered %d, done %v; want 600, done", rs.SamplesDelivered, rs.Done)
	}
}

// TestDemandBookRefusesCountsOutOfBounds: a signal with a count past its
// bound (in flight 2^62, a negative progress, a stall over 1) is refused,
// and the sums of the agents kept stay in range.
func TestDemandBookRefusesCountsOutOfBounds(t *testing.T) {
	const stale = 5 * time.Second
	b := newDemandBook()
	b.addJob("j", nil)
	for _, d := range []wire.Demand{
		{Job: "j", Agent: "x", InFlight: 1 << 62},
		{Job: "j", Agent: "x", SamplesDone: -5},
		{Job: "j", Agent: "x", StallFraction: 1.5},
		{Job: "j", Agent: "x", GPUUtilization: -0.5},
	} {
		if why := b.observe(d, at(1), stale); why != refusedOutOfBounds {
			t.Errorf("%+v: refused %q, want %s", d, why, refusedOutOfBounds)
		}
	}
	for i := range MaxAgentsPerJob {
		d := wire.Demand{Job: "j", Agent: fmt.Sprintf("a%d", i), InFlight: wire.MaxDemandTasks, SamplesDone: wire.MaxDemandSamples}
		if why := b.observe(d, at(1), stale); why != "" {
			t.Fatalf("agent %d: refused %s", i, why)
		}
	}
	r := b.readers("j", at(1), stale)[wire.DefaultReader].Demand
	if r.InFlight != MaxAgentsPerJob*wire.MaxDemandTasks || r.SamplesDone != MaxAgentsPerJob*wire.MaxDemandSamples {
		t.Errorf("sums in flight %d, samples done %d: want every agent's", r.InFlight, r.SamplesDone)
	}
	if _, inFlight, _ := agentLoad(b.agents("j"), at(1), stale); inFlight != MaxAgentsPerJob*wire.MaxDemandTasks {
		t.Errorf("agents' load %d, want every agent's", inFlight)
	}
}
