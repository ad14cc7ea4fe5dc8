package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// knService is the function deployed with `kn service create`, one pod
// kept up, for the streaming figures.
const knService = "sluice-fn-kn"

// knCreate deploys the function with the kn CLI, as a user would from the
// deploy README: the same image, settings and Secrets as the kustomized
// Service, cluster-local.
func (e *env) knCreate(t *testing.T, name string, extra ...string) {
	t.Helper()
	args := []string{"service", "create", name, "--namespace", namespace, "--force",
		"--image", "dev.local/sluice:e2e", "--cluster-local",
		"--env-from", "config-map:sluice-config",
		"--env-value-from", "SLUICE_FN_TOKEN=secret:sluice-fn-token:token",
		"--env-value-from", "AWS_ACCESS_KEY_ID=secret:sluice-s3-credentials:access",
		"--env-value-from", "AWS_SECRET_ACCESS_KEY=secret:sluice-s3-credentials:secret",
		"--env", "AWS_EC2_METADATA_DISABLED=true", "--env", "GOMEMLIMIT=1800MiB",
		"--arg", "--concurrency=4", "--arg", "--cpus=1",
		"--concurrency-limit", "4", "--concurrency-target", "4", "--concurrency-utilization", "100",
		"--request", "cpu=100m,memory=256Mi", "--limit", "memory=2Gi",
		"--service-account", "sluice-fn", "--wait-timeout", "240"}
	cmd := exec.Command(filepath.Join(e.bin, "kn"), append(args, extra...)...)
	cmd.Env = append(cmd.Environ(), "KUBECONFIG="+e.kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kn %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("kn service create %s:\n%s", name, out)
}

// podIP is the address of the one ready pod of service.
func (e *env) podIP(t *testing.T, service string) string {
	t.Helper()
	pods, err := e.kube.CoreV1().Pods(namespace).List(context.Background(), metav1ListFor(service))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil && p.Status.Phase == "Running" {
			return p.Status.PodIP
		}
	}
	t.Fatalf("no running pod of %s", service)
	return ""
}

// TestStreamThroughKnative deploys the function with kn (one pod kept),
// then streams one large shard's output from that pod through the Service
// URL (Traefik, Knative's revision Service, queue-proxy) and addressed
// directly (the pod's port 8080), three times each, and compares MB/s.
func TestStreamThroughKnative(t *testing.T) {
	e := need(t)
	e.knCreate(t, knService, "--scale-min", "1", "--scale-max", "1")
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(e.bin, "kn"), "service", "delete", knService, "--namespace", namespace)
		cmd.Env = append(cmd.Environ(), "KUBECONFIG="+e.kubeconfig)
		_ = cmd.Run()
	})
	// One shard of 300 images: about 45 MB of 224x224 uint8 crops.
	o := synth.DefaultImageOptions()
	o.Samples, o.Shards, o.Seed, o.MinSide, o.MaxSide = 300, 1, 5, 64, 128
	sh, err := synth.Images(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := synth.Upload(ctx, e.s3Client(t), "e2e", "stream/", sh); err != nil {
		t.Fatal(err)
	}
	task := wire.ShardTask{Job: "stream", Bucket: "e2e", Key: "stream/" + sh[0].Name,
		Pipeline: "imagenet-eval", Seed: 1, ChunkMaxBytes: 4 << 20}
	tok, err := bearer.Parse(e.secrets["fn-token"])
	if err != nil {
		t.Fatal(err)
	}
	s := dispatch.Sender{Client: &http.Client{Timeout: 5 * time.Minute}, Token: tok}
	measure := func(endpoint string) (float64, error) {
		var n int64
		start := time.Now()
		end, err := s.Send(ctx, endpoint, task, func(_ int, b []byte) { n += int64(len(b)) })
		if err != nil {
			return 0, err
		}
		if end.Samples != o.Samples {
			return 0, fmt.Errorf("%s: %d samples, want %d", endpoint, end.Samples, o.Samples)
		}
		return float64(n) / 1e6 / time.Since(start).Seconds(), nil
	}
	viaService := "http://" + knService + "." + namespace + ".svc.cluster.local"
	direct := "http://" + e.podIP(t, knService) + ":8080"
	// A first send warms the replica's S3 connection and the decoder.
	if _, err := measure(direct); err != nil {
		t.Fatal(err)
	}
	var svc, dir float64
	for range 3 {
		a, err := measure(viaService)
		if err != nil {
			t.Fatal(err)
		}
		b, err := measure(direct)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("figures: via_service_mb_s=%.1f direct_mb_s=%.1f", a, b)
		svc, dir = svc+a, dir+b
	}
	ratio := svc / dir
	t.Logf("figures: stream_ratio=%.2f (Service URL against the pod directly, mean of 3)", ratio)
	// A figure, not a pass mark (the target is 0.8x): speed is measured,
	// never asserted in a test.
}
