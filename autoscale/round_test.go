package autoscale

import (
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// TestRoundCutsToTheGrantAndKeepsZeroSince: two jobs want more than the
// capacity of one; the one granted none starts its zero-since clock, which
// then holds, and its bid says how long it starved.
func TestRoundCutsToTheGrantAndKeepsZeroSince(t *testing.T) {
	t0 := time.Unix(100, 0)
	cfg := DefaultConfig().ForJob(0, 4)
	job := func(name string) RoundJob {
		return RoundJob{Name: name, Config: cfg, Inputs: Inputs{Pending: 10}}
	}
	res := Round(AllocatorFair, []RoundJob{job("a"), job("b")}, 1, t0)
	if res[0].Granted != 1 || res[1].Granted != 0 || res[1].Decision.Replicas != 0 || res[1].Next.Replicas != 0 {
		t.Fatalf("grants %+v", res)
	}
	if !res[1].ZeroSince.Equal(t0) || !res[0].ZeroSince.IsZero() {
		t.Errorf("zero since %v and %v, want zero and %v", res[0].ZeroSince, res[1].ZeroSince, t0)
	}
	b := job("b")
	b.ZeroSince = res[1].ZeroSince
	res = Round(AllocatorFair, []RoundJob{b}, 0, t0.Add(3*time.Second))
	if !res[0].ZeroSince.Equal(t0) || res[0].Bid.Starved != 3*time.Second {
		t.Errorf("zero since %v, starved %v; want %v, 3s", res[0].ZeroSince, res[0].Bid.Starved, t0)
	}
}

// TestRoundReusesASettledBid: a settled job's bid and state stand in for
// Decide's (which would decide otherwise here), cut to its grant.
func TestRoundReusesASettledBid(t *testing.T) {
	now := time.Unix(100, 0)
	d := wire.Demand{StallFraction: 0.9, ConsumedPerS: 10}
	j := RoundJob{Name: "a", Config: DefaultConfig().ForJob(0, 8), State: State{Replicas: 3, PerReplica: 50},
		Inputs: Inputs{Demand: &d, DemandAt: now, Pending: 100, Ready: 3}, Current: 2, Settled: true,
		Bid: Bid{Claim: Claim{Want: 5, Weight: 1}, PerReplica: 50, Appetite: 250, Current: 9}}
	res := Round(AllocatorMarginal, []RoundJob{j}, 4, now)[0]
	if res.Decided || res.Bid.Want != 5 || res.Bid.Appetite != 250 || res.Bid.Current != 2 {
		t.Errorf("settled: decided %v, bid %+v; want the bid reused with current 2", res.Decided, res.Bid)
	}
	if res.Granted != 4 || res.Decision.Replicas != 4 || res.Next.Replicas != 3 {
		t.Errorf("granted %d, decision %d, next %d; want 4, 4, 3 (the state's count is never raised)", res.Granted, res.Decision.Replicas, res.Next.Replicas)
	}
	j.Settled = false
	if res := Round(AllocatorMarginal, []RoundJob{j}, 4, now)[0]; !res.Decided || res.Bid.Want == 5 {
		t.Errorf("unsettled: decided %v, want %d; want Decide's own", res.Decided, res.Bid.Want)
	}
}
