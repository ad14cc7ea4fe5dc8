package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// deletePod deletes the first running pod matching selector at once
// (kubectl delete pod --grace-period=0 --force) and returns its name.
func (e *env) deletePod(t *testing.T, selector string) string {
	t.Helper()
	ctx := context.Background()
	var name string
	waitFor(t, 2*time.Minute, 200*time.Millisecond, func() error {
		pods, err := e.kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == "Running" && p.DeletionTimestamp == nil {
				name = p.Name
				return nil
			}
		}
		return errNoPod(selector)
	})
	if _, err := e.kubectl(ctx, "-n", namespace, "delete", "pod", name, "--grace-period=0", "--force"); err != nil {
		t.Fatal(err)
	}
	return name
}

type errNoPod string

func (e errNoPod) Error() string { return "no running pod " + string(e) }

// TestPodsDeletedMidJob deletes a function pod while it streams shards,
// then the controller's pod, each mid-epoch: every sample still comes
// once and the job succeeds (the agent resends what the dead pod was
// sending; a new controller pod takes the job's lease over).
func TestPodsDeletedMidJob(t *testing.T) {
	e := need(t)
	js := e.jetStream(t)
	d := e.dataset(t, "deleted-"+e.suffix+"/", 960, 24)
	j := e.startJob(t, "deleted", d, 2, 2)

	j.waitSamples(t, 200)
	fn := e.deletePod(t, "serving.knative.dev/service="+fnService)
	t.Logf("deleted function pod %s at %d samples", fn, j.trainer.Samples())

	j.waitSamples(t, 1100)
	ctl := e.deletePod(t, "app.kubernetes.io/name=sluice-controller")
	t.Logf("deleted controller pod %s at %d samples", ctl, j.trainer.Samples())

	r := j.finish(t, e, js)
	t.Logf("figures: scenario=pods-deleted delivered=%d lost=%d duplicates=%d seconds=%.1f",
		r.Delivered, r.Lost, r.Duplicates, r.Seconds)
}
