package sweep

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/PID/stat's CPU times:
// 100 on every architecture Go supports there.
const clockTicks = 100

// procStat is what a process's /proc/PID/stat says of it.
type procStat struct {
	pid, ppid  int
	cpuTicks   uint64 // utime + stime
	startTicks uint64 // start time after boot: tells a reused pid apart
	zombie     bool
}

// parseStat reads /proc/PID/stat's text. The command name is in
// parentheses and may hold spaces, so fields are counted after the last ')'.
func parseStat(pid int, text string) (procStat, error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 || i+2 > len(text) {
		return procStat{}, fmt.Errorf("stat of %d: no command name", pid)
	}
	f := strings.Fields(text[i+2:])
	// f[0] is field 3 (state): utime is field 14, stime 15, starttime 22.
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("stat of %d: %d fields", pid, len(f)+2)
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseUint(f[11], 10, 64)
	st, err3 := strconv.ParseUint(f[12], 10, 64)
	start, err4 := strconv.ParseUint(f[19], 10, 64)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return procStat{}, fmt.Errorf("stat of %d: %w", pid, err)
		}
	}
	return procStat{pid: pid, ppid: ppid, cpuTicks: ut + st, startTicks: start, zombie: f[0] == "Z"}, nil
}

// childCPU follows the CPU time of a process's children (the controller's
// replicas) through /proc: each sample records the latest CPU time of
// every child seen, so a child that exited keeps what it had at its last
// sample.
type childCPU struct {
	parent int
	proc   string // /proc, or a test's directory

	mu   sync.Mutex
	seen map[[2]uint64]uint64
}

func newChildCPU(parent int) *childCPU {
	return &childCPU{parent: parent, proc: "/proc", seen: map[[2]uint64]uint64{}}
}

// sample reads every child of the parent now, and returns how many are
// alive.
func (c *childCPU) sample() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ents, err := os.ReadDir(c.proc)
	if err != nil {
		return 0
	}
	live := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(c.proc + "/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since the listing
		}
		st, err := parseStat(pid, string(data))
		if err != nil || st.ppid != c.parent {
			continue
		}
		k := [2]uint64{uint64(pid), st.startTicks}
		c.seen[k] = max(c.seen[k], st.cpuTicks)
		if !st.zombie {
			live++
		}
	}
	return live
}

// seconds is the CPU time of every child seen.
func (c *childCPU) seconds() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t uint64
	for _, v := range c.seen {
		t += v
	}
	return float64(t) / clockTicks
}
