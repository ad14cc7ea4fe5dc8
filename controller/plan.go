package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// shareInFlight splits a job's in-flight budget among its agents: equally,
// the remainder one task each to the first agents in name order, and each
// agent at least one task while total > 0 (an agent with no share could
// not make progress; the sum then exceeds a total smaller than the
// agents). Nil for no budget or no agent: an agent the plan does not name
// takes one task at a time while there is a budget (wire.DispatchPlan.Share).
func shareInFlight(total int, agents []string) map[string]int {
	names := slices.Clone(agents)
	slices.Sort(names)
	names = slices.Compact(names)
	if total <= 0 || len(names) == 0 {
		return nil
	}
	each, rest := total/len(names), total%len(names)
	shares := make(map[string]int, len(names))
	for i, a := range names {
		n := each
		if i < rest {
			n++
		}
		shares[a] = max(n, 1)
	}
	return shares
}

// planInputs are what a job's dispatch plan is made of.
type planInputs struct {
	job       string
	endpoints []string
	// capacity is the replicas the budget is sized by (Options.Dispatch's
	// or the actuator's Ready), concurrency one replica's tasks at once.
	capacity, concurrency int
	// shared: the one endpoint stands for every replica (SharedEndpoint).
	shared bool
	// agents are the job's agents heard lately.
	agents []string
}

// planFor is a job's dispatch plan: the endpoints, each taking the replica
// concurrency (none for a shared endpoint, which takes the whole budget),
// and the budget capacity x concurrency split among the agents.
func planFor(in planInputs, now time.Time) wire.DispatchPlan {
	p := wire.DispatchPlan{
		Job: in.job, Time: now.UTC(), Endpoints: slices.Clone(in.endpoints),
		InFlight: max(in.capacity, 0) * in.concurrency,
	}
	if p.Endpoints == nil {
		p.Endpoints = []string{}
	}
	if !in.shared {
		p.PerEndpoint = in.concurrency
	}
	p.Shares = shareInFlight(p.InFlight, in.agents)
	return p
}

// samePlan says whether two plans say the same, whenever written.
func samePlan(a, b wire.DispatchPlan) bool {
	return a.Job == b.Job && slices.Equal(a.Endpoints, b.Endpoints) && a.PerEndpoint == b.PerEndpoint &&
		a.InFlight == b.InFlight && maps.Equal(a.Shares, b.Shares)
}

// plan builds jr's dispatch plan now; false while the job is not running
// here.
func (c *Controller) plan(jr *jobRun, now time.Time) (wire.DispatchPlan, bool) {
	if _, ok := jr.running(); !ok {
		return wire.DispatchPlan{}, false
	}
	var capacity int
	if c.opts.Dispatch != nil {
		capacity = c.opts.Dispatch.Ready(jr.id)
	} else {
		capacity = c.opts.Actuator.Ready(jr.id)
	}
	shared := false
	if s, ok := c.opts.Actuator.(SharedEndpoint); ok {
		shared = s.SharedEndpoint()
	}
	agents, _, _ := agentLoad(c.agentSignals(jr.id), now, c.opts.Autoscale.DemandStale)
	return planFor(planInputs{
		job: jr.id, endpoints: c.opts.Actuator.Endpoints(jr.id),
		capacity: capacity, concurrency: c.opts.ReplicaConcurrency,
		shared: shared, agents: agents,
	}, now), true
}

// writePlans puts the dispatch plan of every job running here whose plan
// changed since it was last written.
func (c *Controller) writePlans(ctx context.Context, now time.Time) {
	for _, jr := range c.runs() {
		c.writePlan(ctx, jr, now)
	}
}

func (c *Controller) writePlan(ctx context.Context, jr *jobRun, now time.Time) {
	jr.planMu.Lock()
	defer jr.planMu.Unlock()
	p, ok := c.plan(jr, now)
	if !ok {
		return
	}
	jr.mu.Lock()
	same := jr.planned && samePlan(p, jr.lastPlan)
	jr.mu.Unlock()
	if same {
		return
	}
	if err := c.putPlan(ctx, p); err != nil {
		if ctx.Err() == nil {
			c.m.planErr.Inc()
			jr.log.Warn("writing the dispatch plan", "err", err)
		}
		return // written again on the next tick
	}
	jr.mu.Lock()
	jr.lastPlan, jr.planned = p, true
	if !jr.closed {
		c.jm.inflight.WithLabelValues(jr.id).Set(float64(p.InFlight))
	}
	jr.mu.Unlock()
}

func (c *Controller) putPlan(ctx context.Context, p wire.DispatchPlan) error {
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encoding dispatch plan of job %s: %w", p.Job, err)
	}
	if _, err := c.dispatchKV.Put(ctx, p.Job, data); err != nil {
		return fmt.Errorf("writing dispatch plan of job %s: %w", p.Job, err)
	}
	return nil
}

// deletePlan removes job id's dispatch plan: its agents stop sending.
func (c *Controller) deletePlan(ctx context.Context, id string) error {
	if err := c.dispatchKV.Purge(ctx, id); err != nil {
		return fmt.Errorf("deleting dispatch plan of job %s: %w", id, err)
	}
	return nil
}
