package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// killStrays SIGKILLs processes of this cluster that outlived their
// parents (replicas of a killed controller): those running the sluice
// binary with this cluster's mark in their environment.
func (c *Cluster) killStrays() {
	if c.NATS == nil {
		return
	}
	for _, pid := range c.StrayPids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Replicas lists the live `sluice fn serve` processes of this cluster
// (the replicas its controllers started).
func (c *Cluster) Replicas() []int {
	var out []int
	for _, pid := range c.StrayPids() {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), "\x00fn\x00serve\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// StrayPids lists live processes that run the sluice binary in this
// cluster (its mark, clusterEnv, in their environment, or its NATS URL on
// their command line) and that the test did not start itself (replicas).
func (c *Cluster) StrayPids() []int {
	own := map[int]bool{}
	for _, p := range *c.procs {
		if p.Running() {
			own[p.Pid()] = true
		}
	}
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || own[pid] {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || args[0] != c.Bins.Sluice {
			continue
		}
		// Replicas inherit the mark from their controller; they take no
		// NATS settings.
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		marked := slices.Contains(strings.Split(string(environ), "\x00"), clusterEnv+"="+c.Dir)
		if !marked && !strings.Contains(string(cmdline), c.NATS.URL()) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err != nil || isZombie(string(stat)) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// isZombie reads the state field of /proc/PID/stat ("pid (comm) S ...").
func isZombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z'
}
