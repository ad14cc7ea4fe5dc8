package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A hop is one container on a request's path. Its CPU time is its
// processes' (found by the container ID in /proc/<pid>/cgroup): the tests
// run under `ip netns exec`, which mounts a sysfs of the namespace's own,
// without the cgroup hierarchy.
type hop struct {
	name string
	id   string // the container's ID
}

// findHop is container c of the first pod in ns matching selector.
func (e *env) findHop(t *testing.T, name, ns, selector, c string) hop {
	t.Helper()
	pods, err := e.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if _, id, ok := strings.Cut(s.ContainerID, "://"); ok && s.Name == c && p.DeletionTimestamp == nil {
				return hop{name: name, id: id}
			}
		}
	}
	t.Fatalf("no container %s in a pod %s in %s", c, selector, ns)
	return hop{}
}

// cpu is the CPU time h's processes used so far, in seconds.
func (h hop) cpu(t *testing.T) float64 {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	ticks, found := 0.0, false
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte(h.id)) {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// The fields after the command name (in parentheses).
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		u, err1 := strconv.ParseFloat(f[11], 64)
		s, err2 := strconv.ParseFloat(f[12], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("/proc/%s/stat: %q", d.Name(), st)
		}
		ticks, found = ticks+u+s, true
	}
	if !found {
		t.Fatalf("no process of %s (container %s)", h.name, h.id)
	}
	return ticks / 100 // USER_HZ
}

// cpuPerGB runs f, which moves bytes, and returns each hop's CPU seconds
// per GB of them, as "name=0.12".
func cpuPerGB(t *testing.T, hops []hop, f func() int64) hopCPU {
	t.Helper()
	before := make([]float64, len(hops))
	for i, h := range hops {
		before[i] = h.cpu(t)
	}
	n := f()
	out := make(hopCPU, len(hops))
	for i, h := range hops {
		out[i] = hopFigure{h.name, (h.cpu(t) - before[i]) / (float64(n) / 1e9)}
	}
	return out
}

// hopCPU is each hop's CPU seconds per GB streamed, in the hops' order.
type hopCPU []hopFigure

type hopFigure struct {
	name      string
	coreSPerG float64
}

func (c hopCPU) of(name string) float64 {
	for _, f := range c {
		if f.name == name {
			return f.coreSPerG
		}
	}
	return 0
}

func (c hopCPU) String() string {
	out := make([]string, len(c))
	for i, f := range c {
		out[i] = fmt.Sprintf("%s=%.2f", f.name, f.coreSPerG)
	}
	return strings.Join(out, " ")
}
