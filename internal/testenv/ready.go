package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StartReady starts cmd with its stderr on the test's and returns what
// its first stdout line says after prefix: the URL of a Sluice process's
// ready line (local.ReadyPrefix, which this package cannot import). cmd
// is killed, if still running, when the test ends.
func StartReady(t testing.TB, cmd *exec.Cmd, prefix string) string {
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
	line, err := bufio.NewReader(stdout).ReadString('\n')
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
	if err != nil || !ok {
		t.Fatalf("%s's first line %q, %v: want %q", filepath.Base(cmd.Args[0]), line, err, prefix+"URL")
	}
	return rest
}
