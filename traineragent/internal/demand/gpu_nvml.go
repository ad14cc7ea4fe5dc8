//go:build cgo

package demand

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// OpenNVML initialises NVML and returns a sampler averaging the utilisation
// of every GPU, and a function that shuts NVML down. Without an NVIDIA
// driver it returns an error; callers then run without GPU readings.
func OpenNVML(logger *slog.Logger) (GPUSampler, func(), error) {
	return openNVML(nvml.New(), logger)
}

// openNVML is OpenNVML over lib, so that tests can hand in go-nvml's mock.
//
// go-nvml resolves NVML's symbols lazily: calling anything but Init when
// Init failed (no libnvidia-ml) aborts the process with "symbol lookup
// error", which no recover can catch. So nothing else is called, not even
// lib.ErrorString or Return.Error, unless Init returned SUCCESS.
func openNVML(lib nvml.Interface, logger *slog.Logger) (GPUSampler, func(), error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("initialising nvml: %s", nvmlInitFailure(ret))
	}
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			if ret := lib.Shutdown(); ret != nvml.SUCCESS {
				logger.Warn("nvml shutdown failed", "err", lib.ErrorString(ret))
			}
		})
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		err := fmt.Errorf("counting gpus: %s", lib.ErrorString(ret))
		shutdown()
		return nil, nil, err
	}
	if count == 0 {
		shutdown()
		return nil, nil, fmt.Errorf("nvml found no gpu")
	}
	s := &nvmlSampler{lib: lib}
	for i := range count {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			err := fmt.Errorf("opening gpu %d: %s", i, lib.ErrorString(ret))
			shutdown()
			return nil, nil, err
		}
		s.devices = append(s.devices, d)
	}
	logger.Info("reading gpu utilisation through nvml", "gpus", count)
	return s, shutdown, nil
}

type nvmlSampler struct {
	lib     nvml.Interface // for error strings
	devices []nvml.Device
}

var _ GPUSampler = (*nvmlSampler)(nil)

// Utilization averages the devices' utilisation over NVML's last sample
// period (between 1/6 s and 1 s depending on the GPU): the share of it in
// which a kernel ran. The agent reads it several times a demand window
// (GPUMeter) to cover the window.
func (s *nvmlSampler) Utilization() (float64, error) {
	sum := 0.0
	for i, d := range s.devices {
		u, ret := d.GetUtilizationRates()
		if ret != nvml.SUCCESS {
			return 0, fmt.Errorf("reading gpu %d utilisation: %s", i, s.lib.ErrorString(ret))
		}
		sum += float64(min(u.Gpu, 100)) / 100
	}
	return sum / float64(len(s.devices)), nil
}

// nvmlInitFailure explains a failed Init without calling into NVML.
func nvmlInitFailure(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "NVIDIA driver not loaded"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission to talk to the NVIDIA driver"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "NVML library and kernel driver versions differ"
	}
	return fmt.Sprintf("nvml return code %d", int32(ret))
}
