package demand

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// GPUSampler reads the current GPU utilisation in [0,1], averaged over the
// machine's GPUs. OpenNVML gives one backed by NVIDIA's NVML.
type GPUSampler interface {
	Utilization() (float64, error)
}

// gpuSamplesPerWindow is how many times a demand window reads the GPU.
// NVML's utilisation covers only its last sample period (1/6 s to 1 s by
// GPU), so a single reading per one-second window sees a sixth of it on
// some GPUs; a reading costs microseconds, so several are cheap.
const gpuSamplesPerWindow = 4

// gpuMinSampleEvery is NVML's shortest sample period: reading faster only
// reads the same period again.
const gpuMinSampleEvery = time.Second / 6

// GPUMeter averages a GPUSampler's readings over each demand window.
type GPUMeter struct {
	gpu   GPUSampler // nil: no GPU to read
	every time.Duration
	log   *slog.Logger

	mu      sync.Mutex // a leaf (see Reader): nothing is locked under it
	sum     float64    // readings since the last take
	n       int
	failing bool // the last reading failed (logged once per run of failures)
}

// NewGPUMeter reads gpu (nil: none) several times in each demand window
// of the given length.
func NewGPUMeter(gpu GPUSampler, window time.Duration, logger *slog.Logger) *GPUMeter {
	return &GPUMeter{gpu: gpu, every: max(window/gpuSamplesPerWindow, gpuMinSampleEvery), log: logger}
}

// Run reads the GPU every g.every until ctx ends.
func (g *GPUMeter) Run(ctx context.Context) {
	if g.gpu == nil {
		return
	}
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.sample()
		}
	}
}

// sample takes one reading.
func (g *GPUMeter) sample() {
	u, err := g.gpu.Utilization()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		if !g.failing {
			g.log.Warn("reading gpu utilisation", "err", err)
		}
		g.failing = true
		return
	}
	if g.failing {
		g.log.Info("reading gpu utilisation again")
	}
	g.failing = false
	g.sum += min(max(u, 0), 1)
	g.n++
}

// Take returns the mean of the readings since the last take and starts
// over; with none yet (a window shorter than a reading's period, or run
// not started) it reads once. It returns -1 when there is no GPU or no
// reading succeeded: the demand signal then says "no GPU" rather than
// "idle GPU".
func (g *GPUMeter) Take() float64 {
	if g.gpu == nil {
		return -1
	}
	g.mu.Lock()
	n := g.n
	g.mu.Unlock()
	if n == 0 {
		g.sample()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		return -1
	}
	mean := g.sum / float64(g.n)
	g.sum, g.n = 0, 0
	return mean
}
