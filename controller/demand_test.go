package controller

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// TestDemandOfUndeclaredReadersIsRefused: signals on a job's demand
// subject from readers the job does not declare reach neither its
// status nor the controller's memory; they are counted as refused.
func TestDemandOfUndeclaredReadersIsRefused(t *testing.T) {
	e := newEnv(t, 2)
	e.startController(t, "c1", Options{})
	e.submit(t, spec("undeclared", "img", 1))
	publish := func(reader string) {
		t.Helper()
		d, _ := json.Marshal(wire.Demand{Job: "undeclared", Reader: reader, Agent: "agent-" + reader, Time: time.Now(), SamplesDone: 3})
		if err := e.nc.Publish(wire.DemandSubject("undeclared"), d); err != nil {
			t.Fatal(err)
		}
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		publish(wire.DefaultReader)
		s, err := e.status("undeclared")
		if err != nil {
			return err
		}
		if s.Readers[wire.DefaultReader].SamplesDelivered != 3 {
			return fmt.Errorf("readers %v: want the trainer's signal", s.Readers)
		}
		return nil
	})
	const intruders = 500
	for i := range intruders {
		publish(fmt.Sprintf("intruder-%d", i))
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := counter(t, e, "sluice_autoscale_demand_refused_total", "reason", "undeclared_reader"); n != intruders {
			return fmt.Errorf("%v signals refused, want %d", n, intruders)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // a few ticks: statuses written since
	s, err := e.status("undeclared")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Readers) != 1 {
		t.Errorf("status lists %d readers, want the declared one", len(s.Readers))
	}
}

// counter is the value of the series of name with label=value in e's
// registry (label empty: of its one series); 0 if there is none.
func counter(t *testing.T, e *env, name, label, value string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
			if label == "" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
