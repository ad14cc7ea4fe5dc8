package main

import (
	"strings"
	"testing"
)

func TestCacheFlagProblemsAtOnce(t *testing.T) {
	for _, cmd := range [][]string{{"fn", "serve"}, {"controller"}, {"demo"}} {
		args := append(cmd, "--cache-dir", t.TempDir(), "--cache-memory-bytes", "lots", "--cache-idle-horizon", "1ms")
		code, _, stderr := runCLI(t, args...)
		for _, want := range []string{`--cache-memory-bytes "lots": want a byte count`, "--cache-idle-horizon 1ms: want 1s.."} {
			if code != 2 || !strings.Contains(stderr, want) {
				t.Errorf("%v: exit %d, stderr %q lacks %q", cmd, code, stderr, want)
			}
		}
		code, _, stderr = runCLI(t, append(cmd, "--cache-dir", t.TempDir())...)
		if code != 2 || !strings.Contains(stderr, "--cache-dir without --cache-bytes") {
			t.Errorf("%v: a directory without a budget: exit %d, stderr %q", cmd, code, stderr)
		}
		code, _, stderr = runCLI(t, append(cmd, "--cache-bytes", "1GiB")...)
		if code != 2 || !strings.Contains(stderr, "--cache-bytes without --cache-dir") {
			t.Errorf("%v: a budget without a directory: exit %d, stderr %q", cmd, code, stderr)
		}
	}
}
