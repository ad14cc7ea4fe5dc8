package demand

import (
	"os"
	"testing"
)

// TestOpenNVML must not crash the test binary where there is no NVIDIA
// driver (the trap: any NVML call after a failed Init kills the process),
// and must read a sane utilisation where there is one. Set
// SLUICE_TEST_WANT_GPU=1 on a GPU machine to make a missing GPU a failure.
func TestOpenNVML(t *testing.T) {
	gpu, closeNVML, err := OpenNVML(nil)
	if err != nil {
		if os.Getenv("SLUICE_TEST_WANT_GPU") == "1" {
			t.Fatalf("OpenNVML on a GPU machine: %v", err)
		}
		if gpu != nil || closeNVML != nil {
			t.Errorf("OpenNVML failed (%v) but returned a sampler or a closer", err)
		}
		t.Logf("no GPU, as expected here: %v", err)
		return
	}
	defer closeNVML()
	for range 3 {
		u, err := gpu.Utilization()
		if err != nil {
			t.Fatal(err)
		}
		if u < 0 || u > 1 {
			t.Fatalf("utilisation %v, want within [0,1]", u)
		}
		t.Logf("gpu utilisation %.2f", u)
	}
	closeNVML()
	closeNVML() // idempotent
}
