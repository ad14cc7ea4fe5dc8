package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-project/sluice/test/integration"
	"github.com/sluice-project/sluice/wire"
)

var sluiceJobs = struct{ group, version, resource string }{"sluice.dev", "v1alpha1", "sluicejobs"}

// TestKubeJobsOnCluster: SluiceJobs on the real cluster, through
// `sluice kube-jobs` as deploy/knative/kube-jobs runs it. An invalid
// object is refused by the API server naming its field; a user without
// the submitter role is refused; `kubectl apply -f job.yaml` runs a job
// (its agent given the team key from the object's Secret) to Succeeded,
// and `kubectl get sluicejobs` shows it; a running job's status is
// written at least every 5 s; `kubectl delete` of a running one cancels
// it and its replicas go to zero.
func TestKubeJobsOnCluster(t *testing.T) {
	e := need(t)
	ctx := context.Background()
	ns := "team-" + e.suffix
	if _, err := e.kubectl(ctx, "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.kubectl(context.Background(), "delete", "namespace", ns, "--wait=false") })
	d := e.dataset(t, "kubejobs-"+e.suffix+"/", 96, 6)
	write := func(name, body string) string {
		p := filepath.Join(e.dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	manifest := func(name string, epochs int, more string) string {
		return fmt.Sprintf("apiVersion: sluice.dev/v1alpha1\nkind: SluiceJob\nmetadata: {name: %s, namespace: %s}\n"+
			"spec: {dataset: %q, pipeline: imagenet-eval, batchSize: 16, epochs: %d, seed: 7, maxReplicas: 2%s}\n", name, ns, d.URL(), epochs, more)
	}

	// Refused: an invalid object, naming the field; a user without the role.
	out, err := e.kubectl(ctx, "apply", "-f", write("bad.yaml", strings.Replace(manifest("bad", 1, ""), "batchSize: 16", "batchSize: 0", 1)))
	if err == nil || !strings.Contains(err.Error(), "spec.batchSize") {
		t.Errorf("an object with batchSize 0: %v %s, want refused naming spec.batchSize", err, out)
	}
	job := write("job.yaml", manifest("train", 2, ""))
	if _, err := e.kubectl(ctx, "--as=nobody", "apply", "-f", job); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("a user without the role applying: %v, want forbidden", err)
	}

	// kubectl apply -f job.yaml, to Succeeded.
	start := time.Now()
	if _, err := e.kubectl(ctx, "apply", "-f", job); err != nil {
		t.Fatal(err)
	}
	id := ns + "_train"
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	jobs := dyn.Resource(gvr()).Namespace(ns)
	var key []byte
	waitFor(t, 2*time.Minute, time.Second, func() error {
		s, err := e.kube.CoreV1().Secrets(ns).Get(ctx, "train-teamkey", metav1.GetOptions{})
		if err != nil {
			return err
		}
		key = s.Data["teamkey"]
		return nil
	})
	keys := filepath.Join(e.dir, "teamkeys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wire.TeamKeyPath(keys, id), key, 0o600); err != nil {
		t.Fatal(err)
	}
	agent, url := e.agent(t, "agent-kubejobs-"+e.suffix, id)
	tr := integration.NewTrainer()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tr.Run(tctx, func() string { return url }) }()

	waitFor(t, 8*time.Minute, time.Second, func() error {
		u, err := jobs.Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if state, _, _ := unstructured.NestedString(u.Object, "status", "state"); state != "Succeeded" {
			return fmt.Errorf("SluiceJob train is %q", state)
		}
		return nil
	})
	t.Logf("applied to Succeeded in %v", time.Since(start).Round(time.Second))
	if err := <-done; err != nil {
		t.Fatalf("trainer: %v\n%s", err, agent.Tail(30))
	}
	r := tr.Check(id, d.Keys, 2, d.Corrupt, time.Since(start))
	t.Log(r.Line())
	if err := r.Err(); err != nil {
		t.Error(err)
	}
	out, err = e.kubectl(ctx, "get", "sluicejobs", "-n", ns)
	t.Logf("kubectl get sluicejobs -n %s:\n%s", ns, out)
	if err != nil || !strings.Contains(out, "train") || !strings.Contains(out, "Succeeded") {
		t.Errorf("kubectl get sluicejobs: %v, want train Succeeded", err)
	}

	// kubectl delete of a running job: cancelled, its replicas to zero.
	if _, err := e.kubectl(ctx, "apply", "-f", write("long.yaml", manifest("long", 200, ", initialReplicas: 2"))); err != nil {
		t.Fatal(err)
	}
	longID := ns + "_long"
	js := e.jetStream(t)
	e.waitJob(t, js, longID, wire.JobRunning, 2*time.Minute)
	waitFor(t, 2*time.Minute, time.Second, func() error {
		if n, ok := e.requested(ctx); !ok || n == 0 {
			return fmt.Errorf("the controller asks %d replicas, want some for %s", n, longID)
		}
		return nil
	})
	// Its status while it runs: the controller's time of it, read every
	// second for 20 s, moves on at least every 5 s.
	var seen []time.Time
	last := ""
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		u, err := jobs.Get(ctx, "long", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		state, _, _ := unstructured.NestedString(u.Object, "status", "state")
		if up, _, _ := unstructured.NestedString(u.Object, "status", "updated"); state == "Running" && up != last {
			last = up
			seen = append(seen, time.Now())
		}
	}
	var gap time.Duration
	for i := 1; i < len(seen); i++ {
		gap = max(gap, seen[i].Sub(seen[i-1]))
	}
	t.Logf("status of a running job over 20 s: %d updates, the longest gap %v", len(seen), gap.Round(100*time.Millisecond))
	if len(seen) < 4 || gap > 6*time.Second {
		t.Errorf("status updated %d times in 20 s, longest gap %v: want at least every 5 s (read each 1 s)", len(seen), gap)
	}
	deleted := time.Now()
	if _, err := e.kubectl(ctx, "delete", "-n", ns, "sluicejob", "long", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Get(ctx, "long", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("object after kubectl delete returned: %v, want gone", err)
	}
	jctx, jcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = integration.Job(jctx, js, longID)
	jcancel()
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("job %s after its object was deleted: %v, want gone from the job store", longID, err)
	}
	waitFor(t, time.Minute, time.Second, func() error {
		if n, ok := e.requested(ctx); !ok || n != 0 {
			return fmt.Errorf("the controller asks %d replicas after the delete", n)
		}
		return nil
	})
	waitFor(t, 4*time.Minute, 2*time.Second, func() error {
		all, _, _, err := e.fnPods(ctx, fnService)
		if err != nil {
			return err
		}
		if all != 0 {
			return fmt.Errorf("%d function pods after the delete", all)
		}
		return nil
	})
	t.Logf("kubectl delete to zero function pods: %v", time.Since(deleted).Round(time.Second))
}

func gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: sluiceJobs.group, Version: sluiceJobs.version, Resource: sluiceJobs.resource}
}
