package wire

import "time"

// DispatchPlan is how a job's agents reach its function replicas and how
// many tasks they may send at once: the autoscaler's decision as the
// Knative lever sees it (requests in flight). The job's owning controller
// writes it to DispatchBucket under the job id whenever it changes; agents
// watch it. Without a plan an agent sends nothing.
type DispatchPlan struct {
	Job  string    `json:"job"`
	Time time.Time `json:"time"`
	// Endpoints are the base URLs to POST tasks to: each ready replica of
	// the local actuator (an agent then sends each shard to its home
	// replica, whose shard cache holds it), or one Knative Service URL,
	// whose activator holds requests while the Revision has no pod.
	Endpoints []string `json:"endpoints"`
	// PerEndpoint is how many tasks one endpoint takes at once (a
	// replica's concurrency); 0 for a Service URL, which takes InFlight.
	PerEndpoint int `json:"per_endpoint,omitempty"`
	// InFlight is how many tasks the job's agents may have in flight
	// together.
	InFlight int `json:"in_flight"`
	// Shares splits InFlight among the job's agents, by agent name (from
	// their demand signals). An agent the plan does not name yet (just
	// started) takes one task at a time until it does.
	Shares map[string]int `json:"shares,omitempty"`
}

// Share is agent's part of InFlight.
func (p DispatchPlan) Share(agent string) int {
	if n, ok := p.Shares[agent]; ok {
		return n
	}
	if p.InFlight > 0 {
		return 1
	}
	return 0
}
