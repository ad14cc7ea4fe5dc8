package autoscale

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/wire"
)

// TestObserveRefusesUndeclaredReaders: a job's signals are kept for its
// declared readers only; those of any other name are refused and counted,
// not kept in a map that grows with every name anyone publishes.
func TestObserveRefusesUndeclaredReaders(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := NewRunner(nil, newFakeActuator(), DefaultConfig(), nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	r.AddJob("j", Job{Readers: []string{"train", "eval"}})
	r.Observe(wire.Demand{Job: "j", Reader: "train", Agent: "node-a"}, sec(1))
	for i := range 1000 {
		r.Observe(wire.Demand{Job: "j", Reader: fmt.Sprintf("intruder-%d", i), Agent: fmt.Sprintf("fake-%d", i)}, sec(1))
	}
	if got := r.Signals("j"); len(got) != 1 || got["train"].At != sec(1) {
		t.Errorf("signals kept for %d readers (%v), want train's only", len(got), keys(got))
	}
	if got := r.Agents("j"); len(got) != 1 {
		t.Errorf("signals kept for %d agents, want node-a's only", len(got))
	}
	if n := refused(t, reg, refusedUndeclaredReader); n != 1000 {
		t.Errorf("refused %v signals of undeclared readers, want 1000", n)
	}
}

// TestObserveBoundsReadersOfAJobThatDeclaresNone: a job that declares no
// reader (the runner used without a controller) keeps at most
// wire.MaxReaders of them.
func TestObserveBoundsReadersOfAJobThatDeclaresNone(t *testing.T) {
	r, err := NewRunner(nil, newFakeActuator(), DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.AddJob("j", Job{})
	for i := range 3 * wire.MaxReaders {
		r.Observe(wire.Demand{Job: "j", Reader: fmt.Sprintf("r%d", i)}, sec(1))
	}
	if n := len(r.Signals("j")); n != wire.MaxReaders {
		t.Errorf("signals kept for %d readers, want %d", n, wire.MaxReaders)
	}
	// A reader already kept is still heard.
	r.Observe(wire.Demand{Job: "j", Reader: "r0", StallFraction: 0.5}, sec(2))
	if s := r.Signals("j")["r0"]; s.Demand.StallFraction != 0.5 {
		t.Errorf("r0's signal %+v, want its latest", s)
	}
}

// TestObserveBoundsAgents: at most MaxAgentsPerJob agents are kept; one
// more takes the place of a stale one, and is refused while none is
// stale; a name over MaxAgentNameBytes is refused.
func TestObserveBoundsAgents(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	r, err := NewRunner(nil, newFakeActuator(), cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	r.AddJob("j", Job{Readers: []string{wire.DefaultReader}})
	for i := range MaxAgentsPerJob {
		r.Observe(wire.Demand{Job: "j", Agent: fmt.Sprintf("a%d", i)}, sec(1))
	}
	r.Observe(wire.Demand{Job: "j", Agent: "a0"}, sec(2)) // a0 is fresh again
	r.Observe(wire.Demand{Job: "j", Agent: "one-more"}, sec(2))
	if _, ok := r.Agents("j")["one-more"]; ok || len(r.Agents("j")) != MaxAgentsPerJob {
		t.Fatalf("%d agents kept, one-more among them %v; want %d, not one-more", len(r.Agents("j")), ok, MaxAgentsPerJob)
	}
	later := sec(1).Add(cfg.DemandStale + time.Second)
	r.Observe(wire.Demand{Job: "j", Agent: "one-more"}, later)
	if _, ok := r.Agents("j")["one-more"]; !ok || len(r.Agents("j")) != MaxAgentsPerJob {
		t.Errorf("once the others are stale: %d agents kept, one-more among them %v; want %d with it", len(r.Agents("j")), ok, MaxAgentsPerJob)
	}
	if _, ok := r.Agents("j")["a0"]; !ok {
		t.Errorf("a0, fresh, was dropped for one-more")
	}
	r.Observe(wire.Demand{Job: "j", Agent: strings.Repeat("x", MaxAgentNameBytes+1)}, later)
	if n := refused(t, reg, refusedTooManyAgents); n != 1 {
		t.Errorf("refused %v signals over the agent cap, want 1", n)
	}
	if n := refused(t, reg, refusedAgentName); n != 1 {
		t.Errorf("refused %v signals with too long an agent name, want 1", n)
	}
}

func keys(m map[string]Signal) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// refused is sluice_autoscale_demand_refused_total{reason} in reg.
func refused(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_autoscale_demand_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
