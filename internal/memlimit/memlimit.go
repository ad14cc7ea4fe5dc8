// Package memlimit finds how much memory this process may use: what
// sizes its memory budgets (the function's decode budget) when no flag
// says.
package memlimit

import (
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// Default is the limit assumed when none is set or found: the function's
// memory limit in deploy/knative/base/function.yaml (2Gi).
const Default = 2 << 30

// unlimited: cgroup v1 writes "no limit" as the largest page-aligned
// int64; anything this large is no limit.
const unlimited = 1 << 62

// Detect returns this process's memory limit: the smaller of its
// cgroup's (cgroup v2 memory.max, or v1 memory.limit_in_bytes, of its
// own cgroup or any above it) and the Go runtime's soft limit
// (GOMEMLIMIT), and which it is ("cgroup memory.max",
// "cgroup memory.limit_in_bytes", "GOMEMLIMIT"); ok is false when
// neither sets one.
func Detect() (limit int64, source string, ok bool) {
	cgroups, _ := os.ReadFile("/proc/self/cgroup")
	return detect(os.DirFS("/"), string(cgroups), debug.SetMemoryLimit(-1))
}

func detect(root fs.FS, cgroups string, goLimit int64) (limit int64, source string, ok bool) {
	limit, source = math.MaxInt64, ""
	for line := range strings.Lines(cgroups) {
		// "0::/path" (v2), or "4:memory:/path" (v1).
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir, file := "", ""
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = "sys/fs/cgroup", "memory.max"
		case hasController(parts[1], "memory"):
			dir, file = "sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		if n := smallestUp(root, dir, parts[2], file); n < limit {
			limit, source = n, "cgroup "+file
		}
	}
	if goLimit > 0 && goLimit < limit {
		limit, source = goLimit, "GOMEMLIMIT"
	}
	if limit >= unlimited {
		return 0, "", false
	}
	return limit, source, true
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// smallestUp is the smallest limit in file of the cgroup at p under dir
// and of those above it: a parent's limit holds for its children. A
// cgroup namespace shows a container its own cgroup as "/", the mount's
// root.
func smallestUp(root fs.FS, dir, p, file string) int64 {
	best := int64(math.MaxInt64)
	for p = path.Clean("/" + p); ; p = path.Dir(p) {
		if b, err := fs.ReadFile(root, path.Join(dir, p, file)); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && n < best {
				best = n // "max" (v2) fails to parse: no limit
			}
		}
		if p == "/" {
			return best
		}
	}
}
