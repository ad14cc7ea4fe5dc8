package traineragent

import (
	"log/slog"

	"github.com/sluice-project/sluice/traineragent/internal/demand"
)

// GPUSampler reads the GPU's utilisation for the demand signal
// (Options.GPU); its readers live with the signals, in demand.
type GPUSampler = demand.GPUSampler

// OpenNVML opens NVIDIA's NVML as a GPUSampler (an error where the agent
// was built without cgo or no NVML is found); the func closes it.
func OpenNVML(logger *slog.Logger) (GPUSampler, func(), error) { return demand.OpenNVML(logger) }
