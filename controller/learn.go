package controller

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-project/sluice/planner"
)

// DefaultLearnEvery is how often a running job's per-replica rate is
// recorded in the plan store (Options.LearnEvery).
const DefaultLearnEvery = 30 * time.Second

// rateMeter sums one job's serving replica-seconds between records.
type rateMeter struct {
	since, last time.Time
	replicaS    float64
}

// observe adds the replicas that served since the last tick and says
// whether a record of per is due (every period, with evidence): the
// observation then covers the replica-seconds since the last record.
func (m *rateMeter) observe(job string, now time.Time, ready int, per float64, period time.Duration) (planner.Observation, bool) {
	if m.since.IsZero() {
		m.since, m.last = now, now
		return planner.Observation{}, false
	}
	if dt := now.Sub(m.last).Seconds(); dt > 0 {
		m.replicaS += float64(max(ready, 0)) * dt
	}
	m.last = now
	if now.Sub(m.since) < period {
		return planner.Observation{}, false
	}
	o := planner.Observation{Job: job, PerReplica: per, ReplicaSeconds: m.replicaS, At: now}
	m.since, m.replicaS = now, 0
	return o, per > 0 && o.ReplicaSeconds > 0
}

// Plans is the store of learned per-replica rates (nil before Run opened
// it): what pre-warm sizes a job by before its first demand signal.
func (c *Controller) Plans() *planner.Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.plans
}

// learnRates records, every LearnEvery, each owned job's per-replica rate
// as its autoscaling policy learned it, weighted by the replica-seconds
// its replicas served since the last record.
func (c *Controller) learnRates(ctx context.Context, now time.Time) {
	type due struct {
		pipeline, dataset string
		o                 planner.Observation
	}
	c.mu.Lock()
	plans := c.plans
	owned := make(map[string]*jobRun, len(c.owned))
	for id, jr := range c.owned {
		owned[id] = jr
	}
	c.mu.Unlock()

	c.learnMu.Lock()
	var records []due
	for id, jr := range owned {
		job, ok := jr.running()
		if !ok {
			continue
		}
		m := c.meters[id]
		if m == nil {
			m = &rateMeter{}
			c.meters[id] = m
		}
		per := c.runner.PerReplica(id)
		if o, ok := m.observe(id, now, c.opts.Actuator.Ready(id), per, c.opts.LearnEvery); ok {
			records = append(records, due{job.Spec.Pipeline, job.Spec.Dataset, o})
		}
	}
	for id := range c.meters {
		if _, ok := owned[id]; !ok {
			delete(c.meters, id)
		}
	}
	c.learnMu.Unlock()
	if plans == nil {
		return
	}
	for _, r := range records {
		if err := plans.Record(ctx, r.pipeline, r.dataset, r.o); err != nil && !errors.Is(err, context.Canceled) {
			c.log.Warn("recording a job's per-replica rate", "job", r.o.Job, "err", err)
		}
	}
}
