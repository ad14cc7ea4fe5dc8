package integration

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/ready"
	"github.com/sluice-project/sluice/internal/supervise"
)

// Process is one child process with its own log file (stdout and stderr).
// It can be stopped, killed and started again with the same arguments, so
// on the same port and data directory.
type Process struct {
	Name    string
	Path    string
	Args    []string
	Env     []string // added to the test's environment
	LogPath string

	mu     sync.Mutex
	proc   *supervise.Process
	ready  chan string   // the URL of the ready line, once
	exited chan struct{} // once reaped and its exit logged
	err    error         // of the last exit
	starts int
}

// StartProcess starts bin with args, logging to dir/name.log, and stops it
// when the test ends.
func StartProcess(t testing.TB, dir, name, bin string, args, env []string) *Process {
	t.Helper()
	p := &Process{Name: name, Path: bin, Args: args, Env: env, LogPath: dir + "/" + name + ".log"}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	return p
}

// Start runs the process (again, after an exit), appending to its log.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil && !isClosed(p.exited) {
		return fmt.Errorf("%s: already running", p.Name)
	}
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: opening log: %w", p.Name, err)
	}
	p.starts++
	fmt.Fprintf(log, "=== itest: start #%d: %s %s\n", p.starts, p.Path, strings.Join(p.Args, " "))
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stderr = log
	readyc := make(chan string, 1)
	exited := make(chan struct{})
	copyStdout := func(stdout io.Reader) {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(log, line)
			if url, ok := ready.Parse(line); ok {
				select {
				case readyc <- url:
				default:
				}
			}
		}
		_, _ = io.Copy(log, stdout)
	}
	// Its own process group: a signal to the group reaches the replicas a
	// controller started too (see Kill).
	proc, err := supervise.Start(cmd, supervise.Options{Group: true, Stdout: copyStdout})
	if err != nil {
		log.Close()
		return fmt.Errorf("%s: starting %s: %w", p.Name, p.Path, err)
	}
	p.proc, p.ready, p.exited = proc, readyc, exited
	go func() {
		<-proc.Done()
		err := proc.Err()
		fmt.Fprintf(log, "=== itest: exit: %v\n", err)
		log.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Ready waits for the ready line and returns its URL.
func (p *Process) Ready(within time.Duration) (string, error) {
	p.mu.Lock()
	readyc, exited := p.ready, p.exited
	p.mu.Unlock()
	select {
	case url := <-readyc:
		return url, nil
	case <-exited:
		return "", fmt.Errorf("%s exited before it was ready (%v):\n%s", p.Name, p.ExitErr(), p.Tail(30))
	case <-time.After(within):
		return "", fmt.Errorf("%s: no %q line within %v:\n%s", p.Name, strings.TrimSpace(ready.Prefix), within, p.Tail(30))
	}
}

// Pid is the running process's id.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc.Pid()
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc != nil && !isClosed(p.exited)
}

// ExitErr is the last exit's error (nil for exit status 0).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Wait waits up to within for the process to exit.
func (p *Process) Wait(within time.Duration) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
		return nil
	case <-time.After(within):
		return fmt.Errorf("%s still running after %v", p.Name, within)
	}
}

// Stop sends SIGTERM and, after grace, SIGKILL to the process group, then
// SIGKILL to what is left of the group.
func (p *Process) Stop(grace time.Duration) {
	if !p.Running() {
		return
	}
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	_ = proc.Stop(grace)
	_ = p.Wait(10 * time.Second) // its exit logged
}

// Kill SIGKILLs the process alone (not what it started: a controller's
// replicas outlive it, as they would on a real crash) and waits for it.
func (p *Process) Kill() error {
	if !p.Running() {
		return fmt.Errorf("%s is not running", p.Name)
	}
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	if err := proc.Kill(); err != nil {
		return fmt.Errorf("killing %s: %w", p.Name, err)
	}
	return p.Wait(10 * time.Second)
}

// Restart kills the process if it runs, then starts it with the same
// arguments (so the same port and data directory).
func (p *Process) Restart(grace time.Duration) error {
	p.Stop(grace)
	return p.Start()
}

// Log returns the process's whole log.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Tail returns the last n lines of the log.
func (p *Process) Tail(n int) string {
	b, _ := os.ReadFile(p.LogPath)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// handedOut are the ports FreePort returned in this process: the kernel
// may give a closed port to the next bind(0) at once, and a NATS server
// once got the same port for its clients and its monitor.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a loopback TCP port that was free a moment ago and that
// it has not returned before in this process.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no loopback port that was not handed out already")
}

// MustFreePort is FreePort for tests.
func MustFreePort(t testing.TB) int {
	t.Helper()
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WaitTCP waits until addr accepts connections.
func WaitTCP(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not accepting connections after %v: %w", addr, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
