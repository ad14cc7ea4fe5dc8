package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-project/sluice/loadtest/chart"
	"github.com/sluice-project/sluice/test/integration"
)

// The bursty workload both scalers get (issue 34, item 3): two jobs
// sharing the function Service, each trainer's appetite stepping between
// hungry (a short step per batch) and slow (a long one). Job b starts when
// job a turns slow, so the cluster sees a second job arrive.
const (
	hungryStep = 60 * time.Millisecond  // per batch of 16: about 270 images/s
	slowStep   = 600 * time.Millisecond // about 27 images/s
	// scalingMaxReplicas is each job's max_replicas: Sluice's controller
	// keeps at most 3 x containerConcurrency 4 = 12 tasks in flight for it.
	scalingMaxReplicas = 3
)

// kpaInFlights are the plain KPA's fixed parallelisms per job, a data
// loader's setting: 12, what Sluice may keep in flight for a job at most;
// the long form adds 4, one pod's worth.
func kpaInFlights() []int {
	if os.Getenv("SLUICE_E2E_LONG") == "1" {
		return []int{12, 4}
	}
	return []int{12}
}

// scalingRun is what one scaler did with the workload.
type scalingRun struct {
	name      string
	samples   []sample
	wait      []time.Duration // per job: the trainer's wait for batches
	batches   []int
	podSecs   float64 // pods (scheduled, not terminating) x seconds, until none is left
	readySecs float64
	created   int // pods created
	fromZero  int // times the Service went from no pod to a pod
	maxPods   int
}

func (r scalingRun) stall() time.Duration {
	var s time.Duration
	for _, w := range r.wait {
		s += w
	}
	return s
}

// TestScalingAgainstPlainKPA runs the same bursty workload under Sluice's
// scaling (the controller deciding replicas from the trainers' demand, the
// KPA following the concurrency it sends) and under Knative's KPA alone (the
// agents keeping a fixed kpaInFlight tasks in flight, the Service at the
// KPA's documented defaults with its target tuned to the function's
// containerConcurrency), and reports the trainers' stall, pod-seconds and
// cold starts of each. SLUICE_E2E_LONG=1 runs phases of 90 s (else 15 s)
// and the KPA at a second parallelism.
func TestScalingAgainstPlainKPA(t *testing.T) {
	e := need(t)
	phase := 15 * time.Second
	if os.Getenv("SLUICE_E2E_LONG") == "1" {
		phase = 90 * time.Second
	}
	d := e.dataset(t, "scaling-"+e.suffix+"/", 4800, 200)
	runs := []scalingRun{e.scalingWorkload(t, "sluice", d, phase)}
	restore := e.useKPAAlone(t)
	for _, n := range kpaInFlights() {
		restore.setControllerArgs(t, n)
		runs = append(runs, e.scalingWorkload(t, fmt.Sprintf("kpa-%d", n), d, phase))
	}

	for _, r := range runs {
		t.Logf("figures: scaler=%s stall_s=%.1f (jobs %s) batches=%v pod_s=%.0f ready_pod_s=%.0f pods_created=%d starts_from_zero=%d max_pods=%d",
			r.name, r.stall().Seconds(), durations(r.wait), r.batches, r.podSecs, r.readySecs, r.created, r.fromZero, r.maxPods)
		t.Logf("series %s (s: requested/ready/pods): %s", r.name, series(r.samples))
	}
	sluice := runs[0]
	for _, kpa := range runs[1:] {
		t.Logf("figures: phase_s=%.0f against=%s stall_sluice_over_kpa=%.2f pod_s_sluice_over_kpa=%.2f target_stall=0.50 target_pod_s=1.00",
			phase.Seconds(), kpa.name, sluice.stall().Seconds()/max(kpa.stall().Seconds(), 0.001), sluice.podSecs/max(kpa.podSecs, 1))
	}
	writeScalingChart(t, filepath.Join(e.artifacts, "scaling-sluice-vs-kpa.svg"), runs...)
	for _, r := range runs {
		for i, b := range r.batches {
			if b == 0 {
				t.Errorf("%s: job %d received no batch", r.name, i)
			}
		}
	}
}

// scalingWorkload runs the workload once, from no function pod until the
// Service has none again, sampling its pods each second.
func (e *env) scalingWorkload(t *testing.T, name string, d integration.Dataset, phase time.Duration) scalingRun {
	t.Helper()
	t.Logf("%s: waiting for %s to have no pods", name, fnService)
	e.waitZeroPods(t, fnService)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	created := e.collectPods(ctx, fnService)
	s := e.sample(t, fnService)
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }
	// Job a: hungry, slow, hungry. Job b, from the second phase: hungry,
	// then slow.
	a := e.startPacedJob(t, "scale-"+name+"-a", d, 1000, scalingMaxReplicas, func() time.Duration {
		if p := since() / phase; p == 1 {
			return slowStep
		}
		return hungryStep
	})
	time.Sleep(phase - since())
	b := e.startPacedJob(t, "scale-"+name+"-b", d, 1000, scalingMaxReplicas, func() time.Duration {
		if since() < 2*phase {
			return hungryStep
		}
		return slowStep
	})
	// A slow submit (one took 24 s in CI) must not leave job b without a
	// phase of its own: it reads for at least one after its agent is up.
	if b.agentReady > 5*time.Second {
		t.Logf("%s: job b's submit and agent took %.1fs", name, b.agentReady.Seconds())
	}
	time.Sleep(max(3*phase-since(), phase))
	r := scalingRun{name: name}
	for _, j := range []*runningJob{a, b} {
		j.stop()
		r.wait = append(r.wait, j.waited())
		r.batches = append(r.batches, j.trainer.Batches())
	}
	for _, j := range []*runningJob{a, b} {
		if res := e.run(t, "cli", "job", "cancel", j.id); res.Code != 0 {
			t.Errorf("cancelling %s: %s", j.id, res)
		}
		j.agent.Stop(10 * time.Second)
	}
	e.waitZeroPods(t, fnService)
	r.samples = s.Stop()
	cancel()
	r.created = len(<-created)
	prev := 0
	for _, smp := range r.samples {
		r.podSecs += float64(smp.Pods)
		r.readySecs += float64(smp.PodsReady)
		r.maxPods = max(r.maxPods, smp.Pods)
		if prev == 0 && smp.Pods > 0 {
			r.fromZero++
		}
		prev = smp.Pods
	}
	return r
}

// collectPods lists service's pods each second until ctx ends, then sends
// the names of every pod seen.
func (e *env) collectPods(ctx context.Context, service string) <-chan map[string]bool {
	out := make(chan map[string]bool, 1)
	go func() {
		seen := map[string]bool{}
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			pods, err := e.kube.CoreV1().Pods(namespace).List(lctx, metav1ListFor(service))
			cancel()
			if err == nil {
				for _, p := range pods.Items {
					seen[p.Name] = true
				}
			}
			select {
			case <-ctx.Done():
				out <- seen
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// The Service's template annotations that tune the KPA to Sluice
// (deploy/knative/base/function.yaml); the plain KPA runs without them, at
// Knative's defaults (70% target utilisation, a 60 s stable window, a
// target burst capacity of 200), its target kept at containerConcurrency.
var sluiceKPATuning = []string{
	"autoscaling.knative.dev/target-utilization-percentage",
	"autoscaling.knative.dev/window",
	"autoscaling.knative.dev/target-burst-capacity",
}

// kpaMode sets the controller's plain-KPA parallelism.
type kpaMode struct {
	e    *env
	args []string // the controller's own args, from "controller" on
}

// useKPAAlone puts the function Service at the KPA's defaults and restores
// Sluice's tuning and the controller's args when t ends; setControllerArgs
// then puts the controller in the load test's plain-KPA mode.
func (e *env) useKPAAlone(t *testing.T) kpaMode {
	t.Helper()
	ctx := context.Background()
	svc, err := e.serving.ServingV1().Services(namespace).Get(ctx, fnService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saved := map[string]any{}
	removed := map[string]any{}
	for _, k := range sluiceKPATuning {
		saved[k] = svc.Spec.Template.Annotations[k]
		removed[k] = nil
	}
	dep, err := e.kube.AppsV1().Deployments(namespace).Get(ctx, "sluice-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(dep.Spec.Template.Spec.Containers[0].Args)
	if len(args) == 0 || args[0] != "controller" {
		t.Fatalf("the controller's args %q do not start with controller", args)
	}
	e.patchTemplateAnnotations(t, removed)
	t.Cleanup(func() {
		e.patchTemplateAnnotations(t, saved)
		e.setControllerArgs(t, args)
	})
	return kpaMode{e: e, args: args}
}

// setControllerArgs runs the controller as `sluice loadtest controller
// --knative-scaling kpa --kpa-in-flight n` with its own flags.
func (k kpaMode) setControllerArgs(t *testing.T, n int) {
	t.Helper()
	k.e.setControllerArgs(t, append([]string{"loadtest", "controller", "--knative-scaling=kpa",
		fmt.Sprintf("--kpa-in-flight=%d", n)}, k.args[1:]...))
}

// patchTemplateAnnotations merge-patches the function Service's template
// annotations (nil removes one) and waits for its new Revision.
func (e *env) patchTemplateAnnotations(t *testing.T, ann map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": ann}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	svcs := e.serving.ServingV1().Services(namespace)
	svc, err := svcs.Patch(ctx, fnService, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patching %s: %v", fnService, err)
	}
	waitFor(t, 3*time.Minute, time.Second, func() error {
		s, err := svcs.Get(ctx, fnService, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Status.ObservedGeneration < svc.Generation || !s.IsReady() {
			return fmt.Errorf("%s generation %d not ready yet", fnService, svc.Generation)
		}
		return nil
	})
}

// setControllerArgs changes the controller Deployment's args and waits for
// the rollout.
func (e *env) setControllerArgs(t *testing.T, args []string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"containers": []map[string]any{{"name": "controller", "args": args}}}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := e.kube.AppsV1().Deployments(namespace).Patch(ctx, "sluice-controller", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching the controller's args: %v", err)
	}
	if out, err := e.kubectl(ctx, "-n", namespace, "rollout", "status", "deployment/sluice-controller", "--timeout=3m"); err != nil {
		t.Fatalf("the controller's rollout: %v\n%s", err, out)
	}
	waitFor(t, 2*time.Minute, time.Second, func() error {
		pods, err := e.kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sluice-controller"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d controller pods, want the new one alone", len(pods.Items))
		}
		if !slices.Equal(pods.Items[0].Spec.Containers[0].Args, args) {
			return fmt.Errorf("the controller pod's args are not the new ones yet")
		}
		return nil
	})
	t.Logf("controller: %s", strings.Join(args, " "))
}

func durations(ds []time.Duration) string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%.1f", d.Seconds()))
	}
	return strings.Join(out, ",")
}

// writeScalingChart draws both scalers' pods over time.
func writeScalingChart(t *testing.T, path string, runs ...scalingRun) {
	t.Helper()
	var ss []chart.Series
	for _, r := range runs {
		label := "function pods, Sluice's scaling"
		if n, ok := strings.CutPrefix(r.name, "kpa-"); ok {
			label = "function pods, Knative's KPA alone (" + n + " in flight per job)"
		}
		s := chart.Series{Name: label}
		for _, smp := range r.samples {
			s.Points = append(s.Points, [2]float64{smp.At.Seconds(), float64(smp.Pods)})
		}
		ss = append(ss, s)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := chart.WriteSteps(f, "Two bursty jobs on a real Knative: Sluice's scaling and the KPA alone", "seconds since the first job's submit", "pods", ss); err != nil {
		t.Fatal(err)
	}
	t.Logf("chart: %s", path)
}
