package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const childEnv = "SUPERVISE_TEST_CHILD"

// TestMain makes this test binary the child when childEnv says how to
// behave: "polite" exits on SIGTERM, "stubborn" ignores it, "lines" prints
// three lines and exits, "parent" starts a stubborn grandchild in its
// group, prints its pid and then behaves as stubborn.
func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "polite":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		fmt.Println("up")
		<-term
		os.Exit(0)
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("up")
		for {
			time.Sleep(time.Hour)
		}
	case "lines":
		fmt.Print("one\ntwo\nthree\n")
		os.Exit(0)
	case "parent":
		signal.Ignore(syscall.SIGTERM)
		gc := exec.Command(os.Args[0])
		gc.Env = append(os.Environ(), childEnv+"=stubborn")
		if err := gc.Start(); err != nil {
			panic(err)
		}
		fmt.Println(gc.Process.Pid)
		for {
			time.Sleep(time.Hour)
		}
	}
}

// child starts this binary as a child in mode and returns it with the
// first line of its stdout.
func child(t *testing.T, mode string, o Options) (*Process, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	first := make(chan string, 1)
	o.Stdout = func(r io.Reader) {
		sc := bufio.NewScanner(r)
		sc.Scan()
		first <- sc.Text()
	}
	p, err := Start(cmd, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Signal(syscall.SIGKILL); <-p.Done() })
	return p, <-first
}

func TestStopEndsAPoliteChildWithSIGTERM(t *testing.T) {
	p, _ := child(t, "polite", Options{})
	if err := p.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("exit %v, want status 0 (it exited on SIGTERM, not SIGKILL)", err)
	}
}

func TestStopKillsAStubbornChildAfterTheGrace(t *testing.T) {
	p, _ := child(t, "stubborn", Options{})
	if err := p.Stop(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("exit %v, want killed by SIGKILL", p.Err())
	}
}

func TestStdoutIsReadToTheEndBeforeTheChildIsReaped(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=lines")
	var got []string
	p, err := Start(cmd, Options{Stdout: func(r io.Reader) {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			got = append(got, sc.Text())
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if len(got) != 3 || got[2] != "three" || p.Err() != nil || p.State() == nil {
		t.Fatalf("read %q, exit %v, state %v; want the three lines, status 0 and a state", got, p.Err(), p.State())
	}
}

// grandchild starts a "parent" child and returns it and its stubborn
// grandchild's pid.
func grandchild(t *testing.T, o Options) (*Process, int) {
	t.Helper()
	p, line := child(t, "parent", o)
	pid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("parent's first line %q: %v", line, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return p, pid
}

// gone waits for pid to be no more (reaped by init, as an orphan) or a
// zombie.
func gone(pid int) error {
	for range 500 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || len(b) > 0 && isZombie(string(b)) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("process %d still alive", pid)
}

func isZombie(stat string) bool {
	for i := len(stat) - 1; i > 0; i-- { // the state follows the command's closing parenthesis
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] == 'Z'
		}
	}
	return false
}

func TestStopOfAGroupLeavesNothingBehind(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	p, gc := grandchild(t, Options{Group: true})
	if err := p.Stop(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := gone(gc); err != nil {
		t.Fatalf("the grandchild outlived its group's Stop: %v", err)
	}
}

func TestKillSparesTheGroup(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	p, gc := grandchild(t, Options{Group: true})
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(gc, 0); err != nil {
		t.Fatalf("the grandchild died with its parent's Kill: %v", err)
	}
}
