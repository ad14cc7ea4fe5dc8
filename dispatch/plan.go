package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// maxPlanEndpoints bounds the endpoints of a plan an agent follows.
const maxPlanEndpoints = 10000

// watchPlan follows the job's DispatchPlan until ctx ends.
func (d *Dispatcher) watchPlan(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := d.kv.Watch(ctx, d.id)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("watching the dispatch plan", "err", err)
				sleep(ctx, 4*errorPause)
			}
			continue
		}
		d.follow(ctx, w)
		_ = w.Stop()
		if ctx.Err() == nil {
			d.log.Warn("dispatch plan watch ended; watching again")
			sleep(ctx, errorPause)
		}
	}
}

func (d *Dispatcher) follow(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil { // the current value came (or there is none)
				continue
			}
			if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
				d.setPlan(wire.DispatchPlan{}, false)
				continue
			}
			var p wire.DispatchPlan
			if err := json.Unmarshal(e.Value(), &p); err != nil {
				d.log.Warn("ignoring an undecodable dispatch plan", "revision", e.Revision(), "err", err)
				continue
			}
			if err := checkPlan(p, d.id); err != nil {
				d.log.Warn("ignoring a dispatch plan", "revision", e.Revision(), "err", err)
				continue
			}
			d.setPlan(p, true)
		}
	}
}

// checkPlan names the first thing wrong with a plan for job.
func checkPlan(p wire.DispatchPlan, job string) error {
	switch {
	case p.Job != job:
		return fmt.Errorf("plan of job %q under job %s's key", p.Job, job)
	case p.InFlight < 0 || p.PerEndpoint < 0:
		return fmt.Errorf("plan of job %s: in flight %d, per endpoint %d: want >= 0", job, p.InFlight, p.PerEndpoint)
	case len(p.Endpoints) > maxPlanEndpoints:
		return fmt.Errorf("plan of job %s: %d endpoints, want at most %d", job, len(p.Endpoints), maxPlanEndpoints)
	}
	for agent, n := range p.Shares {
		if n < 0 {
			return fmt.Errorf("plan of job %s: share %d of agent %q: want >= 0", job, n, agent)
		}
	}
	for _, ep := range p.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("plan of job %s: endpoint %q: want an http(s)://host URL", job, ep)
		}
	}
	return nil
}

func (d *Dispatcher) setPlan(p wire.DispatchPlan, set bool) {
	d.mu.Lock()
	d.plan, d.planSet = p, set
	close(d.planCh)
	d.planCh = make(chan struct{})
	share := d.share()
	d.mu.Unlock()
	d.log.Debug("dispatch plan", "set", set, "endpoints", len(p.Endpoints), "in_flight", p.InFlight, "share", share)
	d.poke()
}

// share is this agent's share of the plan; d.mu held.
func (d *Dispatcher) share() int {
	if !d.planSet {
		return 0
	}
	return d.plan.Share(d.opts.Agent)
}

// endpoints gives the plan's endpoints and their concurrency.
func (d *Dispatcher) endpoints() ([]string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.plan.Endpoints, d.plan.PerEndpoint
}

// planChanged is closed at the next plan change.
func (d *Dispatcher) planChanged() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.planCh
}
