//go:build cgo

package demand

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// mockGPU is a device reading util percent, or failing with ret.
func mockGPU(util uint32, ret nvml.Return) *mock.Device {
	return &mock.Device{GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: util}, ret
	}}
}

// mockNVML is a library that initialises and finds devices. Functions left
// unset panic when called (moq's stubs), so a test sees any call it did not
// expect.
func mockNVML(devices ...nvml.Device) *mock.Interface {
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		ErrorStringFunc:    func(r nvml.Return) string { return "mock error " + r.String() },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devices), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			return devices[i], nvml.SUCCESS
		},
	}
}

// TestOpenNVMLInitFails holds the trap shut: after a failed Init the real
// library aborts the process on any other call, so nothing else may be
// called, error strings included.
func TestOpenNVMLInitFails(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_UNKNOWN} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
		var (
			gpu     GPUSampler
			closeFn func()
			err     error
		)
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("init failing with %d: nvml was called again: %v", int32(ret), p)
				}
			}()
			gpu, closeFn, err = openNVML(lib, nil)
		}()
		if err == nil || gpu != nil || closeFn != nil {
			t.Fatalf("init failing with %d: got sampler %v, closer set %v, error %v; want only an error", int32(ret), gpu, closeFn != nil, err)
		}
		if n := len(lib.InitCalls()); n != 1 {
			t.Errorf("init called %d times, want 1", n)
		}
	}
}

func TestOpenNVMLNoDevice(t *testing.T) {
	lib := mockNVML()
	gpu, closeFn, err := openNVML(lib, nil)
	if err == nil || gpu != nil || closeFn != nil {
		t.Fatalf("no gpu: got sampler %v, error %v; want an error", gpu, err)
	}
	if n := len(lib.ShutdownCalls()); n != 1 {
		t.Errorf("shutdown called %d times, want 1 (NVML was initialised)", n)
	}
}

func TestOpenNVMLCountFails(t *testing.T) {
	lib := mockNVML()
	lib.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	if _, _, err := openNVML(lib, nil); err == nil || !strings.Contains(err.Error(), "counting gpus: mock error") {
		t.Fatalf("got %v, want the count's error", err)
	}
	if n := len(lib.ShutdownCalls()); n != 1 {
		t.Errorf("shutdown called %d times, want 1", n)
	}
}

func TestNVMLSamplerAverages(t *testing.T) {
	lib := mockNVML(mockGPU(30, nvml.SUCCESS), mockGPU(70, nvml.SUCCESS), mockGPU(100, nvml.SUCCESS), mockGPU(0, nvml.SUCCESS))
	gpu, closeFn, err := openNVML(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err := gpu.Utilization()
	if err != nil {
		t.Fatal(err)
	}
	if u != 0.5 {
		t.Errorf("utilisation %v, want 0.5 (the mean of 30, 70, 100 and 0 %%)", u)
	}
	closeFn()
	closeFn()
	if n := len(lib.ShutdownCalls()); n != 1 {
		t.Errorf("shutdown called %d times, want 1: closing is idempotent", n)
	}
}

func TestNVMLSamplerReadError(t *testing.T) {
	lib := mockNVML(mockGPU(50, nvml.SUCCESS), mockGPU(0, nvml.ERROR_GPU_IS_LOST))
	gpu, closeFn, err := openNVML(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	u, err := gpu.Utilization()
	if err == nil || !strings.Contains(err.Error(), "reading gpu 1 utilisation") {
		t.Fatalf("got %v, %v; want gpu 1's read error", u, err)
	}
}
