package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubeJobsKeyFileChecked: the key team keys are derived from is
// required, long enough, and never quoted in an error.
func TestKubeJobsKeyFileChecked(t *testing.T) {
	t.Setenv(kubeJobsKeyFileEnv, "")
	short := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(short, []byte("tooshort-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kube-jobs"}, "--key-file: want the file"},
		{[]string{"kube-jobs", "--key-file", short}, "15 bytes, want at least 32"},
		{[]string{"kube-jobs", "--key-file", short + "-none"}, "no such file"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, stderr, c.want)
		}
		if strings.Contains(stderr, "tooshort-secret") {
			t.Errorf("%v: the key is in the error: %q", c.args, stderr)
		}
	}
}
