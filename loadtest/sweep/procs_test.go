package sweep

import (
	"os"
	"path/filepath"
	"testing"
)

func TestChildCPUAddsTheLiveChildrenToWhatTheParentReaped(t *testing.T) {
	dir := t.TempDir()
	write := func(pid, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pid, "stat"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime prio nice threads itreal starttime
	stat := func(pid, ppid, ut, st, start string, reaped ...string) string {
		cu := "0"
		if len(reaped) > 0 {
			cu = reaped[0]
		}
		return pid + " (sluice fn) S " + ppid + " 1 1 0 -1 0 0 0 0 0 " + ut + " " + st + " " + cu + " 0 20 0 4 0 " + start + " 1000 100"
	}
	write("10", stat("10", "1", "5", "5", "100"))
	write("11", stat("11", "10", "150", "50", "200"))
	write("12", stat("12", "10", "30", "20", "300"))
	write("13", stat("13", "99", "1000", "0", "300"))
	c := newChildCPU(10)
	c.proc = dir
	if n := c.sample(); n != 2 {
		t.Errorf("%d live children, want 2", n)
	}
	if err := os.RemoveAll(filepath.Join(dir, "12")); err != nil {
		t.Fatal(err)
	}
	write("11", stat("11", "10", "250", "50", "200"))
	write("10", stat("10", "1", "5", "5", "100", "60")) // reaped 12 at 60 ticks
	if n := c.sample(); n != 1 {
		t.Errorf("%d live children after one exited, want 1", n)
	}
	if got := c.seconds(); got != 3.6 {
		t.Errorf("cpu %v s, want 3.6 (3 of the live child, 0.6 the parent reaped)", got)
	}
}
