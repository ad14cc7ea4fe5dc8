package traineragent

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent/internal/demand"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/wire"
)

// TestAgentReportsStepTimes runs an agent whose trainer reports step
// times: the demand signal takes the clients' wait and the step split, the
// metrics and Stats count them.
func TestAgentReportsStepTimes(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("steps", 1, 2, fixture.Layout{{2}})
	e.record(t, job)
	reg := prometheus.NewRegistry()
	ag, err := New(e.nc, e.js, job, Options{DemandInterval: 20 * time.Millisecond, GPU: fixedGPU(0.25)}, nil, NewMetrics(reg), nil)
	if err != nil {
		t.Fatal(err)
	}
	dm := e.watchDemand(t, job.Spec.ID)
	runAgent(t, ag)
	a := ag.readers[0]

	a.reportStep(demand.StepReport{Rank: 1, Steps: 0})
	a.reportStep(demand.StepReport{Rank: 1, Steps: -1}) // invalid: dropped
	a.reportStep(demand.StepReport{Rank: 1, Steps: 4, WaitS: 0.4, ComputeS: 2})
	a.reportStep(demand.StepReport{Rank: 1, Steps: 4, WaitS: 0.4, ComputeS: 2}) // a retry
	var got wire.Demand
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, d := range dm.all() {
			if d.Step.Steps > 0 {
				got = d
				return nil
			}
		}
		return fmt.Errorf("no demand carries step times: %+v", dm.all())
	})
	// The GPU was busy a quarter of a ~20 ms window: about 5 ms of the 2 s
	// compute was the GPU's, the rest other.
	if got.WaitSource != wire.WaitClient || got.Step.Steps != 4 || got.Step.Ranks != 1 || !nearly(got.Step.WaitS, 0.1) {
		t.Errorf("demand %+v, want the client's wait and 4 steps of rank 1 waiting 0.1 s each", got)
	}
	if c := got.Step.ComputeS; c <= 0 || c > 0.1 || !nearly(got.Step.ComputeS+got.Step.OtherS, 0.5) {
		t.Errorf("step split %+v, want compute + other = 0.5 s with compute the GPU's small share", got.Step)
	}
	if got.WaitFraction != 1 || got.StallFraction != 0.75 {
		t.Errorf("wait %v stall %v, want a full wait (0.4 s in a short window) capped at the idle gpu share 0.75", got.WaitFraction, got.StallFraction)
	}

	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_agent_steps_total", map[string]string{"rank": "1"}, 4},
		{"sluice_agent_step_seconds_total", map[string]string{"rank": "1", "part": "wait"}, 0.4},
		{"sluice_agent_gpu_utilization", nil, 0.25},
	} {
		if v, err := seriesValue(reg, m.name, m.labels); err != nil || !nearly(v, m.want) {
			t.Errorf("%s%v = %v (%v), want %v", m.name, m.labels, v, err, m.want)
		}
	}
	st := a.Stats()
	if len(st.Steps) != 1 || st.Steps[0].Rank != 1 || st.Steps[0].Steps != 4 {
		t.Errorf("stats steps %+v, want rank 1's 4 steps", st.Steps)
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Steps []map[string]float64 `json:"steps"`
	}
	if err := json.Unmarshal(data, &js); err != nil || len(js.Steps) != 1 || js.Steps[0]["wait_s"] != 0.4 {
		t.Errorf("stats json %s (%v), want steps with rank 1's wait_s", data, err)
	}
}

// seriesValue is the value of the counter or gauge name whose labels
// include labels.
func seriesValue(reg *prometheus.Registry, name string, labels map[string]string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), nil
			}
			return m.GetGauge().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("no series %s%v", name, labels)
}

func nearly(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
