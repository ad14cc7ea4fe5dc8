package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// functionLog is when the function pod of tl logged, since tl's start:
// its "serving" line (and the startup it reports) and its first "shard
// done". Read from the kubelet's log of the pod on the node, whose lines
// it stamps.
func (e *env) functionLog(t *testing.T, tl *podTimeline) string {
	t.Helper()
	tl.mu.Lock()
	pod := tl.pod
	tl.mu.Unlock()
	if pod == "" {
		return "no pod"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := e.kube.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "no pod: " + err.Error()
	}
	container := ""
	for _, c := range p.Spec.Containers {
		if c.Name != "queue-proxy" {
			container = c.Name
			break
		}
	}
	// The kubelet's own file: the API server's log proxy to the kubelet
	// is not reachable in this cluster.
	files, _ := filepath.Glob(filepath.Join("/var/log/pods", namespace+"_"+pod+"_*", container, "*.log"))
	if len(files) == 0 {
		return "no log file"
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		return "no log: " + err.Error()
	}
	var b strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		ts, rest, ok := strings.Cut(line, " ") // then the stream, a flag, the line
		at, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil {
			continue
		}
		since := fmt.Sprintf("%.2fs", at.Sub(tl.start).Seconds())
		switch {
		case strings.Contains(rest, `"msg":"serving"`) || strings.Contains(rest, "msg=serving"):
			startup := "?"
			if _, v, ok := strings.Cut(rest, "startup="); ok {
				startup, _, _ = strings.Cut(v, " ")
			} else if _, v, ok := strings.Cut(rest, `"startup":`); ok {
				startup, _, _ = strings.Cut(v, ",")
			}
			fmt.Fprintf(&b, "serving=%s (startup %s) ", since, startup)
		case strings.Contains(rest, "shard done") && !strings.Contains(b.String(), "first_shard_done"):
			fmt.Fprintf(&b, "first_shard_done=%s ", since)
		}
	}
	return strings.TrimSpace(b.String())
}
