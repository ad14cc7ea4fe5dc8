package traineragent

// GPUSampler reads the current GPU utilisation in [0,1], averaged over the
// machine's GPUs. OpenNVML gives one backed by NVIDIA's NVML.
type GPUSampler interface {
	Utilization() (float64, error)
}
