package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/test/integration"
)

// firstBatch runs tr against url until its first batch and returns when
// that came, measured from start; the rest of the job is read in the
// background and checked by the caller through done.
func firstBatch(t *testing.T, tr *integration.Trainer, start time.Time, url string) (time.Duration, <-chan error) {
	t.Helper()
	var once sync.Once
	first := make(chan time.Duration, 1)
	tr.AfterBatch(func(int) { once.Do(func() { first <- time.Since(start) }) })
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	go func() { done <- tr.Run(ctx, func() string { return url }) }()
	select {
	case d := <-first:
		return d, done
	case err := <-done:
		t.Fatalf("trainer ended before its first batch: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("no first batch within 3 minutes")
	}
	return 0, nil
}

// floorService is the minimal Service (cluster/floor): Knative's own
// cold start on this cluster.
const floorService = "sluice-floor"

// floorCreate deploys the minimal Service with the function's autoscaling
// settings (base/function.yaml) and readiness probe, and waits until it is
// routed. Like the function's pods, its pods mount no ServiceAccount token:
// the kubelet polls for mounted volumes every 300 ms, which a pod without
// one does not wait for. SLUICE_E2E_FLOOR_ENV=fn gives it the function's
// environment sources too (a ConfigMap and three Secrets).
func (e *env) floorCreate(t *testing.T) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: floorService}, AutomountServiceAccountToken: new(false)}
	if _, err := e.kube.CoreV1().ServiceAccounts(namespace).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the floor's ServiceAccount: %v", err)
	}
	args := []string{"service", "create", floorService, "--namespace", namespace, "--force",
		"--image", "dev.local/floor:1", "--cluster-local", "--service-account", floorService,
		"--concurrency-limit", "4", "--concurrency-target", "4", "--concurrency-utilization", "100",
		"--probe-readiness", "http:::/readyz",
		"--annotation-revision", "autoscaling.knative.dev/class=kpa.autoscaling.knative.dev",
		"--annotation-revision", "autoscaling.knative.dev/window=30s",
		"--annotation-revision", "autoscaling.knative.dev/target-burst-capacity=0",
		"--scale-min", "0", "--request", "cpu=100m,memory=32Mi", "--limit", "memory=64Mi", "--wait-timeout", "240"}
	if v := os.Getenv("SLUICE_E2E_FLOOR_ENV"); v == "fn" {
		// The function's environment sources, unused by the floor: what
		// the kubelet must fetch before it can create the container.
		args = append(args, "--env-from", "config-map:sluice-config",
			"--env-value-from", "SLUICE_FN_TOKEN=secret:sluice-fn-token:token",
			"--env-value-from", "AWS_ACCESS_KEY_ID=secret:sluice-s3-credentials:access",
			"--env-value-from", "AWS_SECRET_ACCESS_KEY=secret:sluice-s3-credentials:secret")
	} else if v != "" {
		t.Fatalf("SLUICE_E2E_FLOOR_ENV=%q: want fn (the function's ConfigMap and Secrets as the floor's env) or nothing", v)
	}
	cmd := exec.Command(filepath.Join(e.bin, "kn"), args...)
	cmd.Env = append(cmd.Environ(), "KUBECONFIG="+e.kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kn %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() { e.knDelete(floorService) })
	url := "http://" + floorService + "." + namespace + ".svc.cluster.local"
	waitRoute(t, url)
	return url
}

// floorColdStart waits until the minimal Service has no pod, then returns
// how long its first request took to be answered (held by the activator
// while the KPA starts a pod).
func (e *env) floorColdStart(t *testing.T, url string) time.Duration {
	t.Helper()
	// No pod at all, draining ones included: after the scale to zero
	// alone, a first response took 0.00 s once (not a cold start).
	e.waitZeroPods(t, floorService)
	c := &http.Client{Timeout: 3 * time.Minute}
	start := time.Now()
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	tl := e.watchPods(wctx, t, floorService, start)
	defer func() { t.Logf("figures: floor_pod_since_request %s", tl) }()
	resp, err := c.Get(url + "/")
	if err != nil {
		t.Fatalf("the minimal Service from zero: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the minimal Service from zero: %s", resp.Status)
	}
	return d
}

// coldRounds is the cold-start scenario's rounds: 3 (CI's), or
// SLUICE_E2E_COLD_ROUNDS.
func coldRounds(t *testing.T) int {
	v := os.Getenv("SLUICE_E2E_COLD_ROUNDS")
	if v == "" {
		return 3
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 50 {
		t.Fatalf("SLUICE_E2E_COLD_ROUNDS=%q: want 1..50", v)
	}
	return n
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestColdStartThroughTheActivator measures, from a job's submission to
// its first batch, the function at zero pods on Knative (the request held
// by the activator while the KPA starts a pod) against two references in
// the same run, alternating, round after round: Knative's own floor (a
// minimal Service's first response from zero, with the function's
// autoscaling settings) and the local actuator (`fn serve` processes the
// controller starts). The targets are on the median round.
func TestColdStartThroughTheActivator(t *testing.T) {
	e := need(t)
	const samples, shards, epochs = 240, 6, 1
	floorURL := e.floorCreate(t)

	// The local actuator, on a NATS and an S3 server of its own on the node.
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	vgw, err := testenv.FindVersityGW(root)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := integration.NATSServerBinary(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	lc := integration.StartCluster(t, integration.Binaries{Sluice: e.sluice, NATSServer: ns, VersityGW: vgw}, integration.ClusterOptions{})
	ctl := lc.StartController("ctl-local", integration.ControllerOptions{MaxReplicas: 2})
	// noLocalReplicas waits until the local controller runs no replica:
	// a cold start on both sides.
	noLocalReplicas := func() {
		waitFor(t, 2*time.Minute, 200*time.Millisecond, func() error {
			n, _, err := integration.ScrapeSum(context.Background(), ctl.URL+"/metrics", "sluice_local_replicas")
			if err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("%v local replicas", n)
			}
			return nil
		})
	}
	ld := lc.UploadImages("cold", "local/", integration.SmallImages(samples, shards, 11))
	kd := e.dataset(t, "cold-"+e.suffix+"/", samples, shards)
	js := e.jetStream(t)

	var local, floor, knative []time.Duration
	for round := range coldRounds(t) {
		id := "cold-local-" + string(rune('a'+round))
		noLocalReplicas()
		start := time.Now()
		lc.Submit(integration.Spec{"id": id, "dataset": ld.URL(), "pipeline": "imagenet-eval",
			"batch_size": 16, "epochs": epochs, "seed": 7, "max_replicas": 2})
		a := lc.StartAgent("agent-"+id, id)
		tr := integration.NewTrainer()
		d, done := firstBatch(t, tr, start, a.URL)
		local = append(local, d)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := tr.Check(id, ld.Keys, epochs, ld.Corrupt, time.Since(start)).Err(); err != nil {
			t.Fatal(err)
		}

		floor = append(floor, e.floorColdStart(t, floorURL))

		// No pod at all, the last one's 30 s drain included: a cold start.
		e.waitZeroPods(t, fnService)
		wctx, stopWatch := context.WithCancel(context.Background())
		tl := e.watchPods(wctx, t, fnService, time.Now())
		j := e.startJob(t, "cold-"+string(rune('a'+round)), kd, epochs, 2)
		knative = append(knative, j.firstBatch(t))
		stopWatch()
		fnLog := e.functionLog(t, tl)
		j.finish(t, e, js)
		t.Logf("figures: round=%d first_batch_local_s=%.2f floor_first_response_s=%.2f first_batch_knative_s=%.2f ratio=%.2f over_floor_s=%.2f",
			round, local[round].Seconds(), floor[round].Seconds(), knative[round].Seconds(),
			knative[round].Seconds()/local[round].Seconds(), (knative[round] - floor[round]).Seconds())
		t.Logf("figures: round=%d knative_pod_since_submit %s agent_ready=%.2fs function %s first_batch=%.2fs",
			round, tl, j.agentReady.Seconds(), fnLog, knative[round].Seconds())
	}
	ratios := make([]float64, len(local))
	for i := range local {
		ratios[i] = knative[i].Seconds() / local[i].Seconds()
	}
	slices.Sort(ratios)
	// A figure, not a pass mark (the target is 1.5x): speed is measured,
	// never asserted in a test.
	t.Logf("figures: cold_start_ratio_median=%.2f (rounds %.2f)", ratios[len(ratios)/2], ratios)
	// Issue 34's target: Sluice's first batch at most Knative's floor plus
	// 0.3 s, on the medians.
	over := make([]time.Duration, len(floor))
	for i := range floor {
		over[i] = knative[i] - floor[i]
	}
	t.Logf("figures: floor_median_s=%.2f knative_median_s=%.2f over_floor_median_s=%.2f (rounds %v) target_over_floor_s=0.30",
		median(floor).Seconds(), median(knative).Seconds(), median(over).Seconds(), over)
}
