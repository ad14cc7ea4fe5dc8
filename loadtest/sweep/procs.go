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
	pid, ppid int
	cpuTicks  uint64 // utime + stime
	// childTicks is cutime + cstime: the CPU time of the children it
	// reaped.
	childTicks uint64
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
	var n [5]uint64 // utime, stime, cutime, cstime, starttime
	for i, field := range []int{11, 12, 13, 14, 19} {
		v, err := strconv.ParseInt(f[field], 10, 64)
		if err != nil || v < 0 {
			return procStat{}, fmt.Errorf("stat of %d: field %d %q", pid, field+2, f[field])
		}
		n[i] = uint64(v)
	}
	if err1 != nil {
		return procStat{}, fmt.Errorf("stat of %d: %w", pid, err1)
	}
	return procStat{pid: pid, ppid: ppid, cpuTicks: n[0] + n[1], childTicks: n[2] + n[3], startTicks: n[4], zombie: f[0] == "Z"}, nil
}

// childCPU follows the CPU time of a process's children (the controller's
// replicas) through /proc: the parent's cutime and cstime hold, exactly,
// what the children it reaped used (the local actuator waits for every
// replica), and the children alive now are read one by one.
type childCPU struct {
	parent int
	proc   string // /proc, or a test's directory

	mu     sync.Mutex
	reaped uint64
	live   uint64
}

func newChildCPU(parent int) *childCPU {
	return &childCPU{parent: parent, proc: "/proc"}
}

// sample reads the parent and its children now, and returns how many
// children are alive. The parent is read first: a child reaped between
// the two reads is missed until the next sample rather than counted twice.
func (c *childCPU) sample() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	data, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", c.proc, c.parent))
	if err != nil {
		return 0 // the parent is gone: what it reaped was read last time
	}
	parent, err := parseStat(c.parent, string(data))
	if err != nil {
		return 0
	}
	ents, err := os.ReadDir(c.proc)
	if err != nil {
		return 0
	}
	live, ticks := 0, uint64(0)
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
		ticks += st.cpuTicks
		if !st.zombie {
			live++
		}
	}
	c.reaped, c.live = parent.childTicks, ticks
	return live
}

// seconds is the CPU time of every child, reaped or alive, at the last
// sample.
func (c *childCPU) seconds() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return float64(c.reaped+c.live) / clockTicks
}
