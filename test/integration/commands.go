package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Result is what a finished sluice command printed and its exit status.
type Result struct {
	Args           []string
	Stdout, Stderr string
	Code           int
}

func (r Result) String() string {
	return fmt.Sprintf("sluice %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.Args, " "), r.Code, r.Stdout, r.Stderr)
}

// Sluice runs a sluice command to completion with env added to the
// cluster's environment; connection flags are the caller's to add
// (ConnArgs), so that a test can give wrong ones.
func (c *Cluster) Sluice(env []string, args ...string) Result {
	c.T.Helper()
	return c.SluiceWithin(2*time.Minute, env, args...)
}

// SluiceWithin is Sluice for a command that must exit within d; one still
// running then is killed and gets Code -1.
func (c *Cluster) SluiceWithin(d time.Duration, env []string, args ...string) Result {
	c.T.Helper()
	return RunSluice(c.T, c.Bins.Sluice, append(c.Env(), env...), d, args...)
}

// RunSluice runs the sluice binary bin to completion with env added to
// this process's environment; one still running after d is killed and gets
// Code -1.
func RunSluice(t testing.TB, bin string, env []string, d time.Duration, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.Code = -1
		r.Stderr += fmt.Sprintf("\n(itest: killed, still running after %v)", d)
	case err == nil:
	case errors.As(err, &exit):
		r.Code = exit.ExitCode()
	default:
		t.Fatalf("running sluice %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// MustSluice runs a sluice command with the cluster's connection flags
// appended and fails the test unless it exits 0.
func (c *Cluster) MustSluice(args ...string) Result {
	c.T.Helper()
	r := c.Sluice(nil, append(args, c.ConnArgs()...)...)
	if r.Code != 0 {
		c.T.Fatalf("%s", r)
	}
	return r
}

// Start starts a long-running sluice command (its connection flags
// appended) as a process named name.
func (c *Cluster) Start(name string, args ...string) *Process {
	c.T.Helper()
	return c.startWith(name, c.ConnArgs(), args...)
}

// startWith is Start with the connection flags conn.
func (c *Cluster) startWith(name string, conn []string, args ...string) *Process {
	c.T.Helper()
	p := StartProcess(c.T, c.Dir, name, c.Bins.Sluice, append(args, conn...), c.Env())
	*c.procs = append(*c.procs, p)
	return p
}
