package memlimit

import (
	"math"
	"testing"
	"testing/fstest"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s + "\n")} }

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fs      fstest.MapFS
		cgroups string
		goLimit int64
		want    int64
		source  string
	}{
		{name: "v2 namespaced", fs: fstest.MapFS{"sys/fs/cgroup/memory.max": file("2147483648")},
			cgroups: "0::/", goLimit: math.MaxInt64, want: 2 << 30, source: "cgroup memory.max"},
		{name: "v2 max means none", fs: fstest.MapFS{"sys/fs/cgroup/memory.max": file("max")},
			cgroups: "0::/", goLimit: math.MaxInt64},
		{name: "v2 a parent's limit holds", fs: fstest.MapFS{
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": file("max"),
			"sys/fs/cgroup/kubepods/pod1/memory.max":    file("1073741824"),
			"sys/fs/cgroup/kubepods/memory.max":         file("8589934592"),
		}, cgroups: "0::/kubepods/pod1/c1\n", goLimit: math.MaxInt64, want: 1 << 30, source: "cgroup memory.max"},
		{name: "v1", fs: fstest.MapFS{"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": file("536870912")},
			cgroups: "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n", goLimit: math.MaxInt64, want: 512 << 20, source: "cgroup memory.limit_in_bytes"},
		{name: "v1 unlimited", fs: fstest.MapFS{"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712")},
			cgroups: "4:memory:/\n", goLimit: math.MaxInt64},
		{name: "GOMEMLIMIT below the cgroup's", fs: fstest.MapFS{"sys/fs/cgroup/memory.max": file("2147483648")},
			cgroups: "0::/", goLimit: 1800 << 20, want: 1800 << 20, source: "GOMEMLIMIT"},
		{name: "GOMEMLIMIT alone", fs: fstest.MapFS{}, cgroups: "", goLimit: 1 << 30, want: 1 << 30, source: "GOMEMLIMIT"},
		{name: "nothing", fs: fstest.MapFS{}, cgroups: "0::/\n", goLimit: math.MaxInt64},
	} {
		got, source, ok := detect(tc.fs, tc.cgroups, tc.goLimit)
		if got != tc.want || source != tc.source || ok != (tc.want > 0) {
			t.Errorf("%s: detect = %d, %q, %v; want %d, %q", tc.name, got, source, ok, tc.want, tc.source)
		}
	}
}
