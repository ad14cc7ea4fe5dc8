package autoscale

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// gaugesByJob reads a gauge vector labelled by job and one more label
// into "job/value" keys.
func gaugesByJob(t *testing.T, g prometheus.Gatherer, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var job, other string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "job":
					job = l.GetValue()
				case label:
					other = l.GetValue()
				}
			}
			got[job+"/"+other] = m.GetGauge().GetValue()
		}
	}
	return got
}

// The replica bounds of each job are exported beside its decision (an
// alert compares the two: replicas pinned at the maximum), a spec's max
// held within the cluster's capacity, and go when the job does.
func TestRunnerExportsReplicaBounds(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.ClusterCapacity = 6
	r, err := NewRunner(newFakeActuator(), cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	f := newFeed()
	f.add(r, "a", Job{MinReplicas: 1, MaxReplicas: 3}, &fakeBacklog{pending: 3})
	f.add(r, "b", Job{MaxReplicas: 50}, &fakeBacklog{pending: 3})
	f.tick(context.Background(), r, sec(0))
	want := map[string]float64{"a/min": 1, "a/max": 3, "b/min": 0, "b/max": 6}
	if diff := cmp.Diff(want, gaugesByJob(t, reg, "sluice_autoscale_replica_bounds", "bound")); diff != "" {
		t.Errorf("replica bounds (-want +got):\n%s", diff)
	}
	r.RemoveJob("a")
	f.tick(context.Background(), r, sec(1))
	want = map[string]float64{"b/min": 0, "b/max": 6}
	if diff := cmp.Diff(want, gaugesByJob(t, reg, "sluice_autoscale_replica_bounds", "bound")); diff != "" {
		t.Errorf("replica bounds after removing a (-want +got):\n%s", diff)
	}
}
