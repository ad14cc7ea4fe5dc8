package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// killWait bounds the wait for a process after SIGKILL: only a reader of
// its stdout that never ends (a grandchild holding the pipe) delays it.
const killWait = 10 * time.Second

// Options say how a child is run.
type Options struct {
	// Group runs the child in its own process group and sends signals to
	// the group (Kill excepted).
	Group bool
	// DieWithParent has the kernel SIGKILL the child when its parent dies
	// (Linux only; ignored elsewhere).
	DieWithParent bool
	// Stdout, if set, is given the child's stdout and should read it to
	// the end; the child is reaped once it returns.
	Stdout func(io.Reader)
}

// Process is a started child process.
type Process struct {
	cmd   *exec.Cmd
	group bool
	done  chan struct{}
	err   error // of Wait, set before done closes
}

// Start starts cmd (its Env, Stderr and so on set by the caller) and reaps
// it in the background.
func Start(cmd *exec.Cmd, o Options) (*Process, error) {
	cmd.SysProcAttr = procAttr(o)
	var stdout io.Reader
	if o.Stdout != nil {
		r, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		stdout = r
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, group: o.Group, done: make(chan struct{})}
	go func() {
		if stdout != nil {
			o.Stdout(stdout)
			_, _ = io.Copy(io.Discard, stdout) // keep the pipe flowing
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the child has exited and was reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the child's exit error (nil for status 0), once Done is closed.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// State is the exited child's state (CPU times), once Done is closed.
func (p *Process) State() *os.ProcessState { return p.cmd.ProcessState }

// Exited reports whether Done is closed.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the child's group (with Group) or to the child. It
// does nothing once the child was reaped: its id may be another's.
func (p *Process) Signal(sig syscall.Signal) {
	if p.Exited() {
		return
	}
	if p.group {
		if err := syscall.Kill(-p.Pid(), sig); err == nil {
			return
		}
		// The group may be gone already; the process itself is worth a try.
	}
	_ = p.cmd.Process.Signal(sig)
}

// Kill SIGKILLs the child alone, not its group (as a crash would: what it
// started outlives it), and waits for it to be reaped.
func (p *Process) Kill() error {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return p.wait(killWait)
}

// Stop sends SIGTERM and, if the child has not exited after grace,
// SIGKILL, and waits for it. With Group it then SIGKILLs the group, so
// nothing the child started is left behind.
func (p *Process) Stop(grace time.Duration) error {
	p.Signal(syscall.SIGTERM)
	err := p.wait(grace)
	if err != nil {
		p.Signal(syscall.SIGKILL)
		err = p.wait(killWait)
	}
	if p.group {
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL) // children left behind in the group
	}
	return err
}

// wait waits up to within for the child to be reaped.
func (p *Process) wait(within time.Duration) error {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("process %d still running after %v", p.Pid(), within)
	}
}
