package testenv

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// StartChild runs test name of this test binary in a process of its own,
// with env added (a benchmark's server side, so that getrusage of the
// benchmark's process is its own side's alone), and returns once the child
// prints "READY field...": the process and those fields. Closing the
// child's stdin asks it to end; the test's cleanup does so and waits.
func StartChild(tb testing.TB, name string, env ...string) (*exec.Cmd, []string) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 && f[0] == "READY" {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return cmd, f[1:]
		}
	}
	tb.Fatalf("%s's child process ended before it was ready: %v", name, sc.Err())
	return nil, nil
}
