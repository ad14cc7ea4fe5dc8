package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/broker"
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

// TestDemandNamingAnotherNodeIsRefused: on a job submitted with a team
// key, a signal sealed by node-a naming node-a is kept; one sealed by
// node-a naming node-b (a node acting as another), one unsealed, and one
// with node-a's key and certificate under node-b's name are refused,
// counted by reason and logged.
func TestDemandNamingAnotherNodeIsRefused(t *testing.T) {
	e := newEnv(t, 2)
	run := e.startController(t, "c1", Options{})
	key, _ := wire.ParseTeamKey(wire.NewTeamKey())
	if _, err := e.b.Submit(context.Background(), spec("sealed", "img", 1), broker.WithTeamKey(key)); err != nil {
		t.Fatal(err)
	}
	nodeA, err := wire.DeriveNode(key, "sealed", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(agent string, samples int64, seal func(data []byte, h nats.Header)) {
		t.Helper()
		m := nats.NewMsg(wire.DemandSubject("sealed"))
		m.Data, _ = json.Marshal(wire.Demand{Job: "sealed", Agent: agent, Time: time.Now(), SamplesDone: samples, GPUUtilization: -1})
		seal(m.Data, m.Header)
		if err := e.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	byA := func(data []byte, h nats.Header) { nodeA.SealFor(wire.SealDemand, nil, data).SetHeader(h) }
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		publish("node-a", 3, byA)
		s, err := e.status("sealed")
		if err != nil {
			return err
		}
		if s.Readers[wire.DefaultReader].SamplesDelivered != 3 {
			return fmt.Errorf("readers %v: want node-a's signal", s.Readers)
		}
		return nil
	})
	publish("node-b", 1000, byA)
	publish("node-b", 1000, func([]byte, nats.Header) {})
	time.Sleep(1100 * time.Millisecond) // a line a second per reason: the next node_seal is logged too
	publish("node-b", 1000, func(data []byte, h nats.Header) {
		s := nodeA.SealFor(wire.SealDemand, nil, data)
		s.Node = "node-b"
		s.SetHeader(h)
	})
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := counter(t, e, "sluice_autoscale_demand_refused_total", "reason", "other_node"); n != 1 {
			return fmt.Errorf("%v signals refused as naming another node, want 1", n)
		}
		if n := counter(t, e, "sluice_autoscale_demand_refused_total", "reason", "node_seal"); n != 2 {
			return fmt.Errorf("%v signals refused for their seal, want 2", n)
		}
		return nil
	})
	for _, want := range []string{"why=other_node", "why=node_seal", "sealed by node node-a", "not sealed by a node", "not certified"} {
		if !strings.Contains(run.logs.String(), want) {
			t.Errorf("the controller's log has no %q", want)
		}
	}
	time.Sleep(300 * time.Millisecond) // a few ticks: statuses written since
	s, err := e.status("sealed")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Readers[wire.DefaultReader].SamplesDelivered; got != 3 {
		t.Errorf("the reader delivered %d samples, want node-a's 3: a refused signal was kept", got)
	}
}

// TestDoneRecordNotSealedByTheJobsNodeIsRefused: in a job with a team key,
// the record that a reader is through decides that the job succeeded. One
// not sealed by a node, or sealed by a node of another job, is refused,
// counted and logged, and the job runs on; its own node's ends it.
func TestDoneRecordNotSealedByTheJobsNodeIsRefused(t *testing.T) {
	e := newEnv(t, 2)
	e.gate.release()
	run := e.startController(t, "c1", Options{})
	key, _ := wire.ParseTeamKey(wire.NewTeamKey())
	job, err := e.b.Submit(context.Background(), spec("sealed-done", "img", 1), broker.WithTeamKey(key))
	if err != nil {
		t.Fatal(err)
	}
	nodeA, err := wire.DeriveNode(key, "sealed-done", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := wire.ParseTeamKey(wire.NewTeamKey())
	stranger, err := wire.DeriveNode(otherKey, "sealed-done", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	// The agent seals its demand (the controller scales from zero on it)
	// and writes no done record itself.
	e.startAgent(t, job, "node-a", func(a *agent) { a.node, a.finishes = nodeA, nil })
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		s, err := e.status("sealed-done")
		if err != nil {
			return err
		}
		if s.Tasks.Done != job.Tasks() {
			return fmt.Errorf("tasks %+v, want all %d done", s.Tasks, job.Tasks())
		}
		return nil
	})
	for i, forger := range []*wire.NodeIdentity{nil, stranger} {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // a line a second per reason: the next is logged too
		}
		e.readerDone(job, wire.DefaultReader, forger)
		testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			if n := counter(t, e, "sluice_controller_node_refused_total", "reason", "done_record"); n < float64(i+1) {
				return fmt.Errorf("%v done records refused, want %d", n, i+1)
			}
			return nil
		})
		time.Sleep(200 * time.Millisecond) // polls that read the record again
		if n := counter(t, e, "sluice_controller_node_refused_total", "reason", "done_record"); n != float64(i+1) {
			t.Errorf("%v done records refused after %d written: each is counted once", n, i+1)
		}
		if s, err := e.status("sealed-done"); err != nil || s.State != wire.JobRunning {
			t.Fatalf("after a forged done record (%d): state %s (%v), want running", i, s.State, err)
		}
	}
	for _, want := range []string{"refused a reader's done record", "not sealed by a node", "not certified"} {
		if !strings.Contains(run.logs.String(), want) {
			t.Errorf("the controller's log has no %q", want)
		}
	}
	e.readerDone(job, wire.DefaultReader, nodeA)
	e.waitState(t, "sealed-done", wire.JobSucceeded, 30*time.Second)
}
