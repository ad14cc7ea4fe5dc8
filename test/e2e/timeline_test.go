package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// podTimeline watches service's pods from start and records, for the
// first pod, when this process saw each step of its start: the object
// created (Knative's activator, autoscaler and the Deployment's
// ReplicaSet), scheduled, given an IP (its sandbox and network up), its
// containers running, and ready. Event times, not the API's timestamps:
// those have seconds only.
type podTimeline struct {
	mu    sync.Mutex
	start time.Time
	pod   string
	seen  map[string]time.Duration
}

var podSteps = []string{"created", "scheduled", "ip", "running", "ready"}

// watchPods starts a timeline of service's next pod; the watch ends with
// ctx.
func (e *env) watchPods(ctx context.Context, t *testing.T, service string, start time.Time) *podTimeline {
	t.Helper()
	w, err := e.kube.CoreV1().Pods(namespace).Watch(ctx, metav1ListFor(service))
	if err != nil {
		t.Fatal(err)
	}
	tl := &podTimeline{start: start, seen: map[string]time.Duration{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				tl.observe(p, time.Since(start))
			}
		}
	}()
	return tl
}

func (tl *podTimeline) observe(p *corev1.Pod, at time.Duration) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if p.DeletionTimestamp != nil || (tl.pod != "" && p.Name != tl.pod) {
		return
	}
	tl.pod = p.Name
	mark := func(step string, ok bool) {
		if _, done := tl.seen[step]; ok && !done {
			tl.seen[step] = at
		}
	}
	mark("created", true)
	mark("scheduled", p.Spec.NodeName != "")
	mark("ip", p.Status.PodIP != "")
	running := len(p.Status.ContainerStatuses) > 0
	for _, c := range p.Status.ContainerStatuses {
		running = running && c.State.Running != nil
	}
	mark("running", running)
	for _, c := range p.Status.Conditions {
		mark("ready", c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
	}
}

// String is the timeline as "created=0.41s scheduled=0.42s ...".
func (tl *podTimeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var b strings.Builder
	for _, s := range podSteps {
		if d, ok := tl.seen[s]; ok {
			fmt.Fprintf(&b, "%s=%.2fs ", s, d.Seconds())
		} else {
			fmt.Fprintf(&b, "%s=- ", s)
		}
	}
	return strings.TrimSpace(b.String())
}
