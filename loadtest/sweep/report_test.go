package sweep

import "testing"

// TestReservedCoreSecondsIntegrateTheLiveReplicas: each sample's replicas
// hold their cores until the next sample.
func TestReservedCoreSecondsIntegrateTheLiveReplicas(t *testing.T) {
	r := RunResult{Timeline: []Point{{T: 0, Replicas: 2}, {T: 1, Replicas: 3}, {T: 3, Replicas: 0}, {T: 4, Replicas: 0}}}
	r.summarize()
	if r.ReservedCoreS != 8 || r.PeakReplicas != 3 {
		t.Errorf("reserved %v core-s, peak %d; want 2x1 + 3x2 = 8, 3", r.ReservedCoreS, r.PeakReplicas)
	}
}
