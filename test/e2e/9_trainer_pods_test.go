package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/test/integration"
	"github.com/sluice-project/sluice/wire"
)

// TestTrainersAsPods: a training job as deploy/training deploys it, in a
// namespace of its own: an Indexed Job of 2 pods (trainer nodes) of 2
// ranks each, one pod per node, each pod a trainer
// (clients/python/tests/ranks.py in an image of Debian's Python, numpy and
// the Python client, build.sh) with `sluice agent` beside it as a native
// sidecar on a Unix socket, the agent holding its node's credential only.
// Every sample of every epoch once, in steps every rank took in order; the
// trainer pods' nodes and the function pods' nodes printed.
func TestTrainersAsPods(t *testing.T) {
	e := need(t)
	if e.nodes < 3 {
		t.Skipf("the cluster has %d nodes, this needs 3", e.nodes)
	}
	js := e.jetStream(t)
	const samples, shards, epochs, nnodes, nproc = 480, 24, 2, 2, 2
	id := "pods-" + e.suffix
	ns := "train-" + e.suffix
	d := e.dataset(t, id+"/", samples, shards)
	dir := filepath.Join(e.dir, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	fnPods := e.watchPlacement(t, "serving.knative.dev/service="+fnService)
	start := time.Now()
	e.submit(t, map[string]any{"id": id, "dataset": d.URL(), "pipeline": "imagenet-eval",
		"batch_size": 8, "epochs": epochs, "seed": 7, "max_replicas": 2})

	// What a user creates before the Job: the function token's copy and
	// one credential per node index, from the job's team key.
	creds := map[string]string{}
	for i := range nnodes {
		out := filepath.Join(dir, fmt.Sprintf("node-%d.cred", i))
		if r := e.run(t, "cli", "job", "node-credential", id, "--node", fmt.Sprintf("trainer-%d", i), "--out", out); r.Code != 0 {
			t.Fatalf("%s", r)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		creds[fmt.Sprint(i)] = base64.StdEncoding.EncodeToString(b)
	}
	var data strings.Builder
	for k, v := range creds {
		fmt.Fprintf(&data, "  %q: %s\n", k, v)
	}
	secrets := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Secret
metadata: {name: sluice-fn-token, namespace: %[1]s}
stringData: {token: %[2]s}
---
apiVersion: v1
kind: Secret
metadata: {name: trainer-node-credentials, namespace: %[1]s}
data:
%[3]s`, ns, e.secrets["fn-token"], data.String())
	if _, err := e.kubectlIn(ctx, secrets, "apply", "-f", "-"); err != nil { // secrets on stdin, never argv
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.kubectl(context.Background(), "delete", "namespace", ns, "--wait=false") })

	// The user's overlay: the job, the images, and the trainer's command.
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(overlay, filepath.Join(root, "deploy", "training"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %s
resources:
- %s
configMapGenerator:
- name: trainer-sluice
  behavior: merge
  literals: [SLUICE_JOB=%s, NNODES=%d, NPROC_PER_NODE=%d, WORLD_SIZE=%d]
images:
- {name: registry.example.com/sluice, newName: dev.local/sluice, newTag: e2e}
- {name: registry.example.com/my-trainer, newName: dev.local/sluice-trainer, newTag: e2e}
patches:
- target: {kind: Job, name: trainer}
  patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/command
      value: [/usr/bin/python3, /opt/sluice/ranks.py]
    - op: replace
      path: /spec/template/spec/containers/0/args
      value: [--world-size=$(WORLD_SIZE), --agent=unix:/run/sluice/agent.sock, --node-rank=$(NODE_RANK),
              --nproc-per-node=$(NPROC_PER_NODE), --out=-, --run=pods]
`, ns, base, id, nnodes, nproc, nnodes*nproc)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := e.kubectl(ctx, "apply", "-k", overlay); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	var job *batchv1.Job
	waitFor(t, 10*time.Minute, time.Second, func() error {
		job, err = e.kube.BatchV1().Jobs(ns).Get(ctx, "trainer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range job.Status.Conditions {
			if c.Status == corev1.ConditionTrue && c.Type == batchv1.JobFailed {
				t.Fatalf("the training Job failed: %s: %s\n%s", c.Reason, c.Message, e.trainerLogs(ctx, ns))
			}
			if c.Status == corev1.ConditionTrue && c.Type == batchv1.JobComplete {
				return nil
			}
		}
		return fmt.Errorf("the training Job: %d active, %d succeeded", job.Status.Active, job.Status.Succeeded)
	})
	took := time.Since(start)
	fnPods.Stop()
	e.waitJob(t, js, id, wire.JobSucceeded, 2*time.Minute)

	pods, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=trainer"})
	if err != nil {
		t.Fatal(err)
	}
	world := nnodes * nproc
	lines := make([][]integration.KeyLine, world)
	nodes := map[string]string{} // pod -> node
	done := 0
	for _, p := range pods.Items {
		nodes[p.Name] = p.Spec.NodeName
		log, err := e.kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "trainer"}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, err := integration.ParseStdoutRanks(string(log), world)
		if err != nil {
			t.Fatalf("pod %s: %v\n%s", p.Name, err, e.trainerLogs(ctx, ns))
		}
		for r := range world {
			if len(out.Lines[r]) > 0 || out.Done[r] {
				if lines[r] != nil {
					t.Errorf("rank %d in two pods", r)
				}
				lines[r] = out.Lines[r]
			}
			if out.Done[r] {
				done++
			}
		}
	}
	if done != world {
		t.Errorf("%d of %d ranks said they were done", done, world)
	}
	keys := make([]string, len(d.Keys))
	for i, k := range d.Keys {
		keys[i] = "-1/" + k
	}
	if err := integration.CheckResumed(make([][]integration.KeyLine, world), lines, integration.LoaderState{}, keys, len(keys), epochs); err != nil {
		t.Fatalf("%v\n%s", err, e.trainerLogs(ctx, ns))
	}
	distinct := map[string]bool{}
	for _, n := range nodes {
		distinct[n] = true
	}
	if len(pods.Items) != nnodes || len(distinct) != nnodes {
		t.Errorf("trainer pods on nodes %v: want %d pods on %d nodes", nodes, nnodes, nnodes)
	}
	placed := make([]string, 0, len(nodes))
	for p, n := range nodes {
		placed = append(placed, p+"="+n)
	}
	sort.Strings(placed)
	t.Logf("figures: scenario=trainer-pods nodes=%d ranks=%d delivered=%d lost=0 duplicates=0 seconds=%.1f trainer_pods=[%s] fn_pods_by_node=[%s]",
		nnodes, world, integration.CountLines(lines), took.Seconds(), strings.Join(placed, " "), fnPods)
}

// trainerLogs is every trainer pod's containers' last lines, for a
// failure's message.
func (e *env) trainerLogs(ctx context.Context, ns string) string {
	pods, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=trainer"})
	if err != nil {
		return err.Error()
	}
	tail := int64(30)
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s on %s: %s\n", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, c := range []string{"sluice-agent", "trainer"} {
			log, err := e.kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c, TailLines: &tail}).DoRaw(ctx)
			if err != nil {
				fmt.Fprintf(&b, "  %s: %v\n", c, err)
				continue
			}
			fmt.Fprintf(&b, "  %s:\n%s\n", c, log)
		}
	}
	return b.String()
}
