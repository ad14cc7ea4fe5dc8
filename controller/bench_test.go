package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
)

// BenchmarkController200Jobs measures what one controller spends per job
// per tick with 200 concurrent small jobs, on embedded NATS, none of them
// taken by an agent (so each job stays active with its tasks pending):
//
//   - tick: the autoscaler's round over all jobs (aggregate, decide,
//     allocate, scale), each job's dispatch plan written where it changed
//     and its status written to the KV bucket;
//   - lease: a lease round (read and renew every job's lease by
//     compare-and-set), which runs every LeaseTTL/3 (5s by default), so a
//     1s tick carries a fifth of it.
//
// go test -run '^$' -bench BenchmarkController200Jobs -benchtime 50x ./controller
func BenchmarkController200Jobs(b *testing.B) {
	const jobs = 200
	e := newBenchEnv(b)
	r := e.startControllerB(b, "bench", Options{LeaseTTL: time.Hour, Tick: time.Minute, MaxReplicas: 64})
	for i := range jobs {
		s := spec(fmt.Sprintf("job-%03d", i), "img", 1)
		if _, err := e.b.Submit(context.Background(), s); err != nil {
			b.Fatal(err)
		}
	}
	testenv.CheckFor(b, 2*time.Minute, 50*time.Millisecond, func() error {
		n := 0
		r.c.mu.Lock()
		for _, jr := range r.c.owned {
			if _, ok := jr.running(); ok {
				n++
			}
		}
		r.c.mu.Unlock()
		if n != jobs {
			return fmt.Errorf("%d of %d jobs running", n, jobs)
		}
		return nil
	})
	ctx := context.Background()
	now := time.Now()
	b.Run("tick", func(b *testing.B) {
		for b.Loop() {
			now = now.Add(time.Second)
			r.c.Tick(ctx, now)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/jobs, "ns/job/tick")
	})
	b.Run("autoscaler", func(b *testing.B) {
		for b.Loop() {
			now = now.Add(time.Second)
			r.c.runner.Tick(ctx, now, r.c.autoscaleInputs(now))
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/jobs, "ns/job/tick")
	})
	b.Run("lease", func(b *testing.B) {
		for b.Loop() {
			r.c.leaseRound(ctx)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/jobs, "ns/job/round")
	})
	if got := len(r.c.Owned()); got != jobs {
		b.Errorf("owns %d jobs after the rounds, want %d", got, jobs)
	}
}
