package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// jobGauges reads every gauge of job into "name" or "name/label=value"
// keys (one label besides job at most).
func jobGauges(g prometheus.Gatherer, job string) (map[string]float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetGauge() == nil {
				continue
			}
			key, ofJob := mf.GetName(), false
			for _, l := range m.GetLabel() {
				if l.GetName() == "job" {
					ofJob = l.GetValue() == job
					continue
				}
				key += "/" + l.GetName() + "=" + l.GetValue()
			}
			if ofJob {
				got[key] = m.GetGauge().GetValue()
			}
		}
	}
	return got, nil
}

// A running job's status is exported as series labelled with the job (its
// backlog, ready replicas, redeliveries: what the dashboard and the alerts
// read), following what the status says, and they go with the job.
func TestJobStatusSeries(t *testing.T) {
	e := newEnv(t, 4)
	e.startController(t, "c1", Options{})
	// No agent: the tasks stay queued, the replicas scale up for them.
	e.submit(t, spec("backlog", "img", 2))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		s, err := e.status("backlog")
		if err != nil {
			return err
		}
		if s.ReadyReplicas == 0 || s.Tasks.Pending+s.Tasks.InFlight == 0 {
			return fmt.Errorf("status %+v, ready %d: want a backlog and ready replicas", s.Tasks, s.ReadyReplicas)
		}
		got, err := jobGauges(e.reg, "backlog")
		if err != nil {
			return err
		}
		for key, want := range map[string]int{
			"sluice_controller_job_tasks/state=total":     s.Tasks.Total,
			"sluice_controller_job_tasks/state=done":      s.Tasks.Done,
			"sluice_controller_job_tasks/state=failed":    s.Tasks.Failed,
			"sluice_controller_job_tasks/state=pending":   s.Tasks.Pending,
			"sluice_controller_job_tasks/state=in_flight": s.Tasks.InFlight,
			"sluice_controller_job_ready_replicas":        s.ReadyReplicas,
			"sluice_controller_job_redeliveries":          s.Tasks.Redeliveries,
		} {
			if v, ok := got[key]; !ok || v != float64(want) {
				return fmt.Errorf("%s = %v (present %v), want %d as the status says", key, v, ok, want)
			}
		}
		if got["sluice_controller_job_tasks/state=total"] != 8 {
			return fmt.Errorf("total tasks %v, want 8 (4 shards x 2 epochs)", got["sluice_controller_job_tasks/state=total"])
		}
		return nil
	})
	if _, err := e.b.Cancel(context.Background(), "backlog", "test"); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, "backlog", wire.JobCancelled, 10*time.Second)
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return e.released("backlog") })
}
