package e2e

import (
	"testing"
	"time"
)

// TestTwoJobsShareTheService runs two jobs on the one function Service,
// the second submitted while the first runs and ending after it: each gets
// every sample once, and after both end the function has no pod within the
// scale-to-zero grace (+30 s) and no Revision holds one. The first job
// keeps a replica (min_replicas 1), so the controller patches the
// Service's min-scale at its start and its end: two new Revisions, which
// the ingress must retire.
func TestTwoJobsShareTheService(t *testing.T) {
	e := need(t)
	js := e.jetStream(t)
	d1 := e.dataset(t, "share-a-"+e.suffix+"/", 480, 12)
	d2 := e.dataset(t, "share-b-"+e.suffix+"/", 960, 24)
	e.waitScaledToZero(t, fnService)
	s := e.sample(t, fnService)

	before := e.revisions(t, fnService)
	a := e.startJob(t, "share-a", d1, 2, 2, map[string]any{"min_replicas": 1})
	a.waitSamples(t, 300)
	b := e.startJob(t, "share-b", d2, 2, 2)
	a.finish(t, e, js)
	ended := time.Now()
	b.finish(t, e, js)
	t.Logf("figures: second job ended %.1fs after the first", time.Since(ended).Seconds())
	toZero, gone := e.waitZeroPods(t, fnService)
	samples := s.Stop()
	t.Logf("figures: zero_pods_after_jobs_s=%.0f last_pod_gone_s=%.0f", toZero.Seconds(), gone.Seconds())
	t.Logf("series (s: requested/ready/pods): %s", series(samples))
	if made := e.revisions(t, fnService) - before; made != 2 {
		t.Errorf("%d Revisions made over the jobs, want 2 (min-scale 1 at the first job's start, 0 at its end)", made)
	}
	e.checkNoRevisionHoldsPods(t, fnService)
}
