package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// TestIntegrationOutputBuffer: a trainer slower than the replicas, a job
// with a 16 MiB output buffer: the chunks `sluice agent` holds stay within
// the buffer plus one chunk per task in flight (sends stop reading their
// replies while it is full), and every sample comes once. The agent's peak
// RSS is logged.
func TestIntegrationOutputBuffer(t *testing.T) {
	const (
		buffer   = 16 << 20
		chunkMax = 4 << 20
		replicas = 2
		samples  = 800
		shards   = 4 // of 200 samples: 30 MB of output each
	)
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages("buffered", "train/", SmallImages(samples, shards, 16))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})

	start := time.Now()
	spec := imageJob("buffered", d, "imagenet-eval")
	spec["output_buffer_bytes"] = buffer
	spec["max_replicas"] = replicas
	c.Submit(spec)
	agent := c.StartAgent("agent", "buffered")
	tr := NewTrainer()
	tr.AfterBatch(func(int) { time.Sleep(100 * time.Millisecond) }) // a slow step

	var mu sync.Mutex
	var mostHeld float64
	var mostRSS int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ctx.Err() == nil {
			held, _, _ := ScrapeSum(ctx, agent.URL+"/metrics", "sluice_agent_held_bytes")
			rss := rssOf(agent.Pid())
			mu.Lock()
			mostHeld, mostRSS = max(mostHeld, held), max(mostRSS, rss)
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	waitTrained(t, runTrainer(ctx, tr, agent))
	took := time.Since(start)
	hwm := hwmOf(agent.Pid())
	cancel()
	<-watched
	waitReleased(t, c, js, "buffered", wire.JobSucceeded, ctrl)
	logReport(t, tr.Check("output-buffer", d.Keys, scenarioEpochs, nil, took))

	// In flight: the plan's InFlight is at most a few tasks a replica.
	bound := float64(buffer + 4*replicas*(chunkMax+wire.ChunkHeadroom))
	t.Logf("scenario=output-buffer buffer_bytes=%d most_held_bytes=%.0f bound_bytes=%.0f agent_rss_peak_bytes=%d agent_vmhwm_bytes=%d",
		buffer, mostHeld, bound, mostRSS, hwm)
	if mostHeld > bound {
		t.Errorf("the agent held %.0f bytes of chunks, over its buffer %d plus a chunk per task in flight (%.0f)", mostHeld, buffer, bound)
	}
}

// rssOf is the resident set of process pid in bytes (0 if unknown).
func rssOf(pid int) int64 { return procStatus(pid, "VmRSS:") }

// hwmOf is the peak resident set of process pid in bytes (0 if unknown).
func hwmOf(pid int) int64 { return procStatus(pid, "VmHWM:") }

func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
