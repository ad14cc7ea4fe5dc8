package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
	secs, found := 0.0, false
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte(h.id)) {
			continue
		}
		cpu, err := processCPU(d.Name())
		if err != nil {
			continue // gone meanwhile
		}
		secs, found = secs+cpu, true
	}
	if !found {
		t.Fatalf("no process of %s (container %s)", h.name, h.id)
	}
	return secs
}

// cpuPerGB runs f, which moves bytes, and returns each hop's CPU seconds
// per GB of them, as "name=0.12", then the reader's (this process) and the
// whole node's (every process and the kernel), and how many of the node's
// cores were busy over f on average: a node busy on all its cores is what
// bounds the stream, and then the ratio of two paths is that of their CPU
// per GB.
func cpuPerGB(t *testing.T, hops []hop, f func() int64) (hopCPU, float64) {
	t.Helper()
	before := make([]float64, len(hops))
	for i, h := range hops {
		before[i] = h.cpu(t)
	}
	reader, node, start := selfCPU(t), nodeBusy(t), time.Now()
	n := f()
	took := time.Since(start).Seconds()
	gb := float64(n) / 1e9
	out := make(hopCPU, 0, len(hops)+2)
	for i, h := range hops {
		out = append(out, hopFigure{h.name, (h.cpu(t) - before[i]) / gb})
	}
	busy := nodeBusy(t) - node
	out = append(out, hopFigure{"reader", (selfCPU(t) - reader) / gb}, hopFigure{"node", busy / gb})
	return out, busy / took
}

// processCPU is the CPU time, user and system, of process pid ("self" for
// this one) so far, in seconds.
func processCPU(pid string) (float64, error) {
	st, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, err
	}
	// The fields after the command name (in parentheses).
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: %q", pid, st)
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	s, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%s/stat: %q", pid, st)
	}
	return (u + s) / 100, nil // USER_HZ
}

// selfCPU is this process's CPU time so far: the stream's reader. From
// getrusage, to the microsecond: /proc's ticks of 10 ms are 0.07 s per GB
// of a 150 MB stream.
func selfCPU(t *testing.T) float64 {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// nodeBusy is the time all the node's cores spent busy so far (neither
// idle nor waiting on I/O), in seconds, from /proc/stat.
func nodeBusy(t *testing.T) float64 {
	t.Helper()
	st, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(st), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		t.Fatalf("/proc/stat: %q", line)
	}
	busy := 0.0
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			t.Fatalf("/proc/stat: %q", line)
		}
		busy += v
	}
	return busy / 100 // USER_HZ
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
