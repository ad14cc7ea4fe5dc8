package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sluice-project/sluice/internal/ready"
)

// StartReady starts cmd with its stderr on the test's and returns the URL
// of its ready line (internal/ready), which must be its first stdout line.
// cmd is killed, if still running, when the test ends.
func StartReady(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url, err := ready.Wait(context.Background(), stdout)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(cmd.Args[0]), err)
	}
	return url
}
