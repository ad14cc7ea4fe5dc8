package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/loadtest/chart"
)

// scaleToZeroGrace is config-autoscaler's scale-to-zero-grace-period as
// up.sh leaves it (Knative's default), plus the Service's stable window:
// how long after its last request the function may keep a pod.
const scaleToZeroGrace = 30*time.Second + 30*time.Second

// waitScaledToZero waits until the function has no pod but those being
// deleted, within the scale-to-zero grace plus 30 s: from then on a request
// goes through the activator and starts a new pod. It returns how long that
// took and how many pods were still terminating.
func (e *env) waitScaledToZero(t *testing.T, service string) (time.Duration, int) {
	t.Helper()
	start := time.Now()
	terminating := 0
	waitFor(t, scaleToZeroGrace+30*time.Second, time.Second, func() error {
		all, _, term, err := e.fnPods(context.Background(), service)
		if err != nil {
			return err
		}
		if all > 0 {
			return fmt.Errorf("%d pods of %s", all, service)
		}
		terminating = term
		return nil
	})
	return time.Since(start), terminating
}

// waitZeroPods waits for the scale to zero and then until the terminating
// pods are gone too (queue-proxy drains each for 30 s); it returns both
// times.
func (e *env) waitZeroPods(t *testing.T, service string) (scaled, gone time.Duration) {
	t.Helper()
	start := time.Now()
	scaled, terminating := e.waitScaledToZero(t, service)
	if terminating > 0 {
		waitFor(t, 2*time.Minute, time.Second, func() error {
			_, _, term, err := e.fnPods(context.Background(), service)
			if err != nil {
				return err
			}
			if term > 0 {
				return fmt.Errorf("%d pods of %s still terminating", term, service)
			}
			return nil
		})
	}
	return scaled, time.Since(start)
}

// TestImageJobFromZeroToNAndBack runs a 3-epoch image job on the real
// cluster: the function at zero pods when it is submitted, scaled up by
// Knative's KPA as Sluice's controller asks, every sample delivered once,
// and back to zero pods after the job, with no Revision left holding one.
func TestImageJobFromZeroToNAndBack(t *testing.T) {
	e := need(t)
	d := e.dataset(t, "zero-to-n-"+e.suffix+"/", 1200, 24, 256, 512)
	// No pod at all, terminating ones included: the job starts on a node
	// the scenario before has left. (The 11 s wait for a first pod's
	// readiness once blamed on those pods was the kubelet's 10 s probe
	// period: autoscale/knative/doc.go.)
	t.Logf("waiting for %s to have no pods", fnService)
	e.waitZeroPods(t, fnService)

	js := e.jetStream(t)
	s := e.sample(t, fnService)
	const epochs = 3
	j := e.startJob(t, "zero-to-n", d, epochs, 3)
	r := j.finish(t, e, js)
	toZero, gone := e.waitZeroPods(t, fnService)
	samples := s.Stop()
	maxPods := 0
	for _, smp := range samples {
		maxPods = max(maxPods, smp.PodsReady)
	}
	t.Logf("figures: samples=%d epochs=%d seconds=%.1f max_ready_pods=%d zero_pods_after_job_s=%.0f last_pod_gone_s=%.0f",
		r.Delivered, epochs, r.Seconds, maxPods, toZero.Seconds(), gone.Seconds())
	t.Logf("series (s: requested/ready/pods): %s", series(samples))
	t.Logf("figures: decision_to_ready_lag_s=%s", lags(samples))
	writeChart(t, filepath.Join(e.artifacts, "kpa-follows-sluice.svg"), samples)
	if maxPods < 2 {
		t.Errorf("the function never ran more than %d ready pods: the KPA did not follow the controller", maxPods)
	}
	e.checkNoRevisionHoldsPods(t, fnService)
}

// lags are, for each rise of the replicas Sluice's controller asked for,
// the seconds until that many of the function's pods were ready (-1: not
// within the samples).
func lags(samples []sample) string {
	var out []string
	prev := 0
	for i, s := range samples {
		if s.Requested > prev {
			lag := -1.0
			for _, later := range samples[i:] {
				if later.PodsReady >= s.Requested {
					lag = (later.At - s.At).Seconds()
					break
				}
			}
			out = append(out, fmt.Sprintf("%d->%d:%.0f", prev, s.Requested, lag))
		}
		prev = s.Requested
	}
	return strings.Join(out, " ")
}

// writeChart draws the replicas asked for and the pods ready over time.
func writeChart(t *testing.T, path string, samples []sample) {
	t.Helper()
	asked := chart.Series{Name: "replicas Sluice's controller asked for"}
	ready := chart.Series{Name: "function pods ready (Knative's KPA)"}
	for _, s := range samples {
		asked.Points = append(asked.Points, [2]float64{s.At.Seconds(), float64(s.Requested)})
		ready.Points = append(ready.Points, [2]float64{s.At.Seconds(), float64(s.PodsReady)})
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := chart.WriteSteps(f, "The KPA follows Sluice: a 3-epoch job on a real Knative", "seconds since submit", "replicas", []chart.Series{asked, ready}); err != nil {
		t.Fatal(err)
	}
	t.Logf("chart: %s", path)
}

func series(samples []sample) string {
	var b strings.Builder
	for _, s := range samples {
		fmt.Fprintf(&b, "%d:%d/%d/%d ", int(s.At.Seconds()), s.Requested, s.PodsReady, s.Pods)
	}
	return b.String()
}

// revisions counts service's Revisions.
func (e *env) revisions(t *testing.T, service string) int {
	t.Helper()
	revs, err := e.serving.ServingV1().Revisions(namespace).List(context.Background(), metav1ListFor(service))
	if err != nil {
		t.Fatal(err)
	}
	return len(revs.Items)
}

// checkNoRevisionHoldsPods fails t if any Revision of service still has
// pods (actual replicas) once its jobs ended.
func (e *env) checkNoRevisionHoldsPods(t *testing.T, service string) {
	t.Helper()
	revs, err := e.serving.ServingV1().Revisions(namespace).List(context.Background(),
		metav1ListFor(service))
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, r := range revs.Items {
		if r.Status.ActualReplicas != nil && *r.Status.ActualReplicas > 0 {
			held++
			t.Errorf("revision %s still has %d pods", r.Name, *r.Status.ActualReplicas)
		}
	}
	t.Logf("figures: revisions=%d holding_pods=%d", len(revs.Items), held)
}
