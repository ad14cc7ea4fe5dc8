package autoscale

import (
	"fmt"
	"time"
)

// RoundJob is one job as a decision round reads it: its policy's config
// and state, what it observes, and what the round kept of it.
type RoundJob struct {
	Name   string
	Config Config
	State  State
	Inputs Inputs
	// Weight is the job's share of the capacity when it is short (<= 0: 1).
	Weight float64
	// Appetite is the trainer's appetite kept from the job's last round
	// (NextAppetite; 0: none yet).
	Appetite float64
	// ZeroSince is when the job began to want replicas and be granted
	// none (zero while it is granted some or wants none).
	ZeroSince time.Time
	// Current is the replicas the allocator counts as the job's now
	// (Bid.Current): the runner's ready replicas, the simulator's grant.
	Current int
	// Settled, when set, skips Decide: Bid (the job's last round's) and
	// State are taken as what Decide would decide again, the caller
	// knowing that none of its inputs changed (the trace simulator's
	// settled jobs). Only the bid's Current and Starved are renewed.
	Settled bool
	Bid     Bid
}

// RoundResult is one job's outcome of a round, in the order of the jobs.
type RoundResult struct {
	Name string
	// Decision is the replicas the job gets and why: what its policy
	// decided, cut to its grant of the capacity; Next is the state to
	// pass to its next round (its Replicas cut likewise).
	Decision Decision
	Next     State
	// Bid is what the job brought to the allocator (its Want uncut);
	// Granted its share of the capacity.
	Bid     Bid
	Granted int
	// ZeroSince is the job's RoundJob.ZeroSince for the next round.
	ZeroSince time.Time
	// Decided is whether Decide ran (not Settled).
	Decided bool
}

// Round is one decision round over every job, the one both Runner.Tick and
// the trace simulator run: Decide per job (unless Settled), the bids,
// the allocator's grants of capacity (AllocatorFair: Allocate; else
// AllocateMarginal), each decision cut to its grant, and the zero-since
// state. It is a pure function of its arguments.
func Round(allocator string, jobs []RoundJob, capacity int, now time.Time) []RoundResult {
	out := make([]RoundResult, len(jobs))
	bids := make(map[string]Bid, len(jobs))
	for i, j := range jobs {
		out[i] = decideJob(j, now)
		bids[j.Name] = out[i].Bid
	}
	granted := allocate(allocator, bids, capacity)
	for i := range out {
		grant(&out[i], granted[out[i].Name], capacity, jobs[i].ZeroSince, now)
	}
	return out
}

// decideJob is a job's decision and bid before the allocator.
func decideJob(j RoundJob, now time.Time) RoundResult {
	res := RoundResult{Name: j.Name}
	if j.Settled {
		res.Decision, res.Next, res.Bid = Decision{Replicas: j.Bid.Want}, j.State, j.Bid
	} else {
		res.Decision, res.Next = Decide(j.Config, j.State, j.Inputs, now)
		res.Bid = bidFor(j.Config, res.Decision, res.Next, j.Inputs, j.Weight, j.Appetite, now)
		res.Decided = true
	}
	res.Bid.Current, res.Bid.Starved = j.Current, 0
	if !j.ZeroSince.IsZero() {
		res.Bid.Starved = now.Sub(j.ZeroSince)
	}
	return res
}

// grant cuts res's decision to its grant g and moves its zero-since
// state: set when it wants replicas and gets none, cleared otherwise.
func grant(res *RoundResult, g, capacity int, zeroSince, now time.Time) {
	res.Granted = g
	if g < res.Decision.Replicas {
		res.Decision.Reason += fmt.Sprintf("; %d granted of cluster capacity %d", g, capacity)
		res.Decision.Replicas = g
	}
	res.Next.Replicas = min(res.Next.Replicas, g)
	switch {
	case res.Bid.Want == 0 || g > 0:
		res.ZeroSince = time.Time{}
	case zeroSince.IsZero():
		res.ZeroSince = now
	default:
		res.ZeroSince = zeroSince
	}
}

// allocate shares capacity with the allocator named.
func allocate(allocator string, bids map[string]Bid, capacity int) map[string]int {
	if allocator == AllocatorFair {
		claims := make(map[string]Claim, len(bids))
		for name, b := range bids {
			claims[name] = b.Claim
		}
		return Allocate(claims, capacity)
	}
	return AllocateMarginal(bids, capacity, DefaultMarginalOptions())
}

// bidFor is what a job's decision brings to the allocator: its want, the
// rate its policy learned and its trainer's appetite (NextAppetite: from a
// fresh signal, else the one kept).
func bidFor(cfg Config, dec Decision, next State, in Inputs, weight, appetite float64, now time.Time) Bid {
	b := Bid{Claim: Claim{Want: dec.Replicas, Weight: weight}, PerReplica: next.PerReplica, Appetite: appetite}
	if d := in.Demand; d != nil && !in.DemandAt.IsZero() && now.Sub(in.DemandAt) <= cfg.DemandStale {
		b.Appetite = NextAppetite(appetite, *d)
	}
	return b
}

// Policy sizes every job of a round. Sluice's (SluicePolicy, the runner's
// default) is Round: Decide per job, then the allocator. A baseline
// (package autoscale/baseline: Knative's KPA, KEDA's queue-lag scaler)
// sizes each job alone from what it observes, as the platform's own
// autoscaler would, and keeps its own state per job.
type Policy interface {
	Round(jobs []RoundJob, capacity int, now time.Time) []RoundResult
	// Forget drops what the policy keeps of a job that was removed.
	Forget(job string)
}

// SluicePolicy is Sluice's demand-driven policy with the allocator named
// (AllocatorMarginal or AllocatorFair).
type SluicePolicy struct{ Allocator string }

// Round implements Policy.
func (p SluicePolicy) Round(jobs []RoundJob, capacity int, now time.Time) []RoundResult {
	return Round(p.Allocator, jobs, capacity, now)
}

// Forget implements Policy: Sluice's state is the runner's (RoundJob.State).
func (SluicePolicy) Forget(string) {}
