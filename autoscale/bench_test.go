package autoscale

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/wire"
)

// BenchmarkRunnerTick200Jobs is the autoscaler's cost per job per tick with
// 200 concurrent small jobs of two readers each sharing a 64-replica
// cluster: aggregate, decide, allocate, scale (a no-op actuator) and
// metrics.
func BenchmarkRunnerTick200Jobs(b *testing.B) {
	const jobs = 200
	cfg := DefaultConfig()
	cfg.ClusterCapacity = 64
	act := newFakeActuator()
	r, err := NewRunner(act, cfg, nil, prometheus.NewRegistry())
	f := newFeed()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range jobs {
		f.add(r, fmt.Sprintf("job-%03d", i), Job{Weight: float64(1 + i%3)}, &fakeBacklog{pending: 10, inflight: 2}, "trainer", "eval")
	}
	start := time.Now()
	tick := 0
	observe := func(now time.Time) {
		for i := range jobs {
			job := fmt.Sprintf("job-%03d", i)
			f.observe(wire.Demand{Job: job, Reader: "trainer", StallFraction: float64(i%10) / 10, ConsumedPerS: 100, ArrivedPerS: 90, BufferCapacity: 100}, now)
			f.observe(wire.Demand{Job: job, Reader: "eval", StallFraction: 0.05, ConsumedPerS: 50, ArrivedPerS: 90, BufferedSamples: 80, BufferCapacity: 100}, now)
		}
	}
	observe(start)
	b.ResetTimer()
	for b.Loop() {
		tick++
		now := start.Add(time.Duration(tick) * time.Second)
		if tick%4 == 0 {
			b.StopTimer()
			observe(now) // signals arrive between ticks, off the tick's clock
			act.takeCalls()
			b.StartTimer()
		}
		f.tick(ctx, r, now)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/jobs, "ns/job/tick")
}
