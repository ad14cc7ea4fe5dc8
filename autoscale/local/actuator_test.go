package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/ready"
	"github.com/sluice-project/sluice/internal/testenv"
)

// TestMain doubles as the replica: with SLUICE_TEST_REPLICA=1 the test
// binary serves HTTP like `sluice fn serve` and follows the readiness
// protocol. SLUICE_TEST_REPLICA_MODE changes its behaviour:
// "crash" exits 3 once ready, "silent" never says it is ready,
// "stubborn" ignores SIGTERM, "token" requires the function token.
//
// With SLUICE_TEST_PARENT=1 it plays a controller instead: it starts two
// replicas with an actuator, prints "PIDS <pid> <pid>" once both are
// ready, and waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_TEST_REPLICA") == "1" {
		os.Exit(replicaMain(os.Getenv("SLUICE_TEST_REPLICA_MODE")))
	}
	if os.Getenv("SLUICE_TEST_PARENT") == "1" {
		os.Exit(parentMain())
	}
	os.Exit(m.Run())
}

func parentMain() int {
	a := New(Options{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     []string{"SLUICE_TEST_PARENT=", "SLUICE_TEST_REPLICA=1", "SLUICE_TEST_REPLICA_MODE=stubborn"},
	}, nil, nil)
	if err := a.Scale(context.Background(), "j", 2); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for a.Ready("j") < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	pids := a.pids()
	fmt.Printf("PIDS %d %d\n", pids[0], pids[1])
	select {}
}

func replicaMain(mode string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "replica %d %s", os.Getpid(), os.Getenv("SLUICE_REPLICA"))
	})
	if mode == "token" { // as fn serve: the token from the environment
		tok, err := bearer.Function.Load("", os.Getenv)
		if err != nil || !tok.IsSet() {
			fmt.Fprintln(os.Stderr, "no function token:", err)
			return 1
		}
		h = bearer.Require(tok, bearer.Function, h, nil)
	}
	go http.Serve(ln, h)
	fmt.Println("starting") // not the ready line: must be ignored
	fmt.Fprintln(os.Stderr, "a line on stderr")
	if mode != "silent" {
		ready.Announce(os.Stdout, "http://"+ln.Addr().String())
	}
	if mode == "crash" {
		fmt.Fprintln(os.Stderr, "panic: simulated crash")
		return 3
	}
	for range term {
		if mode != "stubborn" {
			return 0
		}
	}
	return 0
}

func newTestActuator(t *testing.T, mode string, opts Options) *Actuator {
	t.Helper()
	opts.Command = []string{os.Args[0], "-test.run=^$"}
	opts.Env = append(opts.Env, "SLUICE_TEST_REPLICA=1", "SLUICE_TEST_REPLICA_MODE="+mode)
	a := New(opts, nil, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

func waitReady(t *testing.T, a *Actuator, job string, n int) {
	t.Helper()
	testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if got := a.Ready(job); got != n {
			return fmt.Errorf("job %s: %d replicas ready, want %d (counts %+v)", job, got, n, a.Counts())
		}
		return nil
	})
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pids of the live replica processes of every job.
func (a *Actuator) pids() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []int
	for _, reps := range a.jobs {
		for _, r := range reps {
			out = append(out, r.proc.Pid())
		}
	}
	return out
}

func TestScaleUpAndDown(t *testing.T) {
	a := newTestActuator(t, "", Options{})
	ctx := context.Background()
	if err := a.Scale(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	if err := a.Scale(ctx, "j", 2); err != nil { // while starting: nothing more
		t.Fatal(err)
	}
	waitReady(t, a, "j", 2)
	eps := a.Endpoints("j")
	if len(eps) != 2 || eps[0] == eps[1] {
		t.Fatalf("endpoints %v, want two distinct", eps)
	}
	for i, ep := range eps {
		if body := get(t, ep); !strings.HasSuffix(body, fmt.Sprintf(" j/%d", i+1)) {
			t.Errorf("GET %s = %q, want replica j/%d", ep, body, i+1)
		}
	}
	if a.Ready("other") != 0 || a.Endpoints("other") != nil {
		t.Error("another job has replicas")
	}

	// Down to one: the newest goes, the oldest keeps serving.
	if err := a.Scale(ctx, "j", 1); err != nil {
		t.Fatal(err)
	}
	if got := a.Endpoints("j"); !slices.Equal(got, eps[:1]) {
		t.Errorf("endpoints after scaling to 1: %v, want %v", got, eps[:1])
	}
	testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if c := a.Counts(); c.Stopped != 1 {
			return fmt.Errorf("counts %+v, want 1 stopped", c)
		}
		return nil
	})
	if err := a.Scale(ctx, "j", 0); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		c := a.Counts()
		cpu := c.CPU
		c.CPU = 0
		if c != (Counts{Started: 2, Stopped: 2, MaxLive: 2}) {
			return fmt.Errorf("counts %+v, want 2 started and stopped, 2 at most", c)
		}
		if cpu <= 0 {
			return fmt.Errorf("replicas' CPU time %v, want > 0 once they exited", cpu)
		}
		return nil
	})
	if a.Ready("j") != 0 || len(a.pids()) != 0 {
		t.Errorf("after scaling to 0: %d ready, pids %v", a.Ready("j"), a.pids())
	}
	if err := a.Scale(ctx, "j", -1); err == nil {
		t.Error("Scale to -1 succeeded")
	}
}

func TestKilledAndCrashedReplicasAreReplaced(t *testing.T) {
	a := newTestActuator(t, "", Options{})
	ctx := context.Background()
	if err := a.Scale(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, "j", 2)
	before := a.Endpoints("j")
	if !a.KillRandom("j", rand.New(rand.NewPCG(1, 1))) {
		t.Fatal("KillRandom found no replica")
	}
	if a.Ready("j") != 1 {
		t.Errorf("right after a kill: %d ready, want 1", a.Ready("j"))
	}
	// The same count again replaces the dead one.
	if err := a.Scale(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, "j", 2)
	after := a.Endpoints("j")
	if slices.Equal(before, after) {
		t.Errorf("endpoints %v unchanged after a kill and a reconcile", after)
	}
	testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if c := a.Counts(); c.Started != 3 || c.Killed != 1 || c.Crashed != 0 || len(a.pids()) != 2 {
			return fmt.Errorf("counts %+v with %d processes, want 3 started, 1 killed, 2 live", c, len(a.pids()))
		}
		return nil
	})
	if a.KillRandom("none", rand.New(rand.NewPCG(1, 1))) {
		t.Error("KillRandom killed a replica of a job without any")
	}

	crashy := newTestActuator(t, "crash", Options{})
	if err := crashy.Scale(ctx, "c", 1); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if c := crashy.Counts(); c.Crashed < 1 {
			return fmt.Errorf("counts %+v, want a crash", c)
		}
		return nil
	})
	if err := crashy.Scale(ctx, "c", 1); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if c := crashy.Counts(); c.Started < 2 {
			return fmt.Errorf("counts %+v, want a replacement started", c)
		}
		return nil
	})
}

func TestReplicaThatNeverGetsReadyIsKilled(t *testing.T) {
	a := newTestActuator(t, "silent", Options{ReadyTimeout: 200 * time.Millisecond})
	if err := a.Scale(context.Background(), "j", 1); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if c := a.Counts(); c.Crashed != 1 || len(a.pids()) != 0 {
			return fmt.Errorf("counts %+v, pids %v: want the silent replica killed as crashed", c, a.pids())
		}
		return nil
	})
	if a.Ready("j") != 0 {
		t.Error("a silent replica counts as ready")
	}
}

func TestCloseLeavesNoChildren(t *testing.T) {
	a := newTestActuator(t, "stubborn", Options{StopTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	for _, job := range []string{"a", "b"} {
		if err := a.Scale(ctx, job, 2); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, a, "a", 2)
	waitReady(t, a, "b", 2)
	pids := a.pids()
	if len(pids) != 4 {
		t.Fatalf("pids %v, want 4", pids)
	}
	// Stubborn replicas ignore SIGTERM: Close kills them after StopTimeout.
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("replica %d still exists after Close (kill -0: %v)", pid, err)
		}
	}
	if err := a.Scale(ctx, "a", 1); err == nil {
		t.Error("Scale after Close succeeded")
	}

	// A Close whose context ends kills at once, and still reaps everything.
	b := newTestActuator(t, "stubborn", Options{StopTimeout: time.Hour})
	if err := b.Scale(ctx, "a", 2); err != nil {
		t.Fatal(err)
	}
	waitReady(t, b, "a", 2)
	pids = b.pids()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := b.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close past its deadline = %v, want context.DeadlineExceeded", err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("replica %d still exists after Close (kill -0: %v)", pid, err)
		}
	}
}

// gone reports whether process pid has exited (reaped, or a zombie).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func TestReplicasDieWithAControllerKilledWithSIGKILL(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), "SLUICE_TEST_PARENT=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the parent's pids: %v", err)
	}
	var a, b int
	if _, err := fmt.Sscanf(line, "PIDS %d %d", &a, &b); err != nil {
		t.Fatalf("parent said %q: %v", line, err)
	}
	// Stubborn replicas ignore SIGTERM; SIGKILL of the parent gives them
	// no chance to be stopped: only the kernel's parent-death signal ends them.
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	t.Cleanup(func() { // don't leak them if the test fails
		syscall.Kill(a, syscall.SIGKILL)
		syscall.Kill(b, syscall.SIGKILL)
	})
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, pid := range []int{a, b} {
			if !gone(pid) {
				return fmt.Errorf("replica %d outlived its SIGKILLed parent", pid)
			}
		}
		return nil
	})
}

// Under chaos kills and with stopping replicas that take their time, more
// processes exist than the autoscaler asked for; MaxLive counts replicas
// that count towards their job, so it never exceeds the scale asked.
func TestMaxLiveCountsReplicasNotDyingProcesses(t *testing.T) {
	a := newTestActuator(t, "stubborn", Options{StopTimeout: 3 * time.Second})
	ctx := context.Background()
	if err := a.Scale(ctx, "j", 3); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, "j", 3)
	// One stopping (ignoring SIGTERM, so alive until StopTimeout) and one
	// killed, each replaced at once.
	if err := a.Scale(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	if err := a.Scale(ctx, "j", 3); err != nil {
		t.Fatal(err)
	}
	if c := a.Counts(); c.Live != 4 {
		t.Errorf("Live %d: want the stopping replica's process counted too (counts %+v)", c.Live, c)
	}
	if !a.KillRandom("j", rand.New(rand.NewPCG(3, 3))) {
		t.Fatal("KillRandom found no replica")
	}
	if err := a.Scale(ctx, "j", 3); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, "j", 3)
	c := a.Counts()
	if c.MaxLive != 3 {
		t.Errorf("MaxLive %d, want 3 (counts %+v)", c.MaxLive, c)
	}
}

func TestJobSeriesGoOnceScaledToZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := New(Options{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     []string{"SLUICE_TEST_REPLICA=1", "SLUICE_TEST_REPLICA_MODE="},
	}, nil, reg)
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	// A second actuator on the registry shares the series instead of panicking.
	New(Options{}, nil, reg)
	ctx := context.Background()
	if err := a.Scale(ctx, "j", 1); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, "j", 1)
	series := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			n += len(mf.GetMetric())
		}
		return n
	}
	if series() == 0 {
		t.Fatal("no series for a running job")
	}
	if err := a.Scale(ctx, "j", 0); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if n := series(); n != 0 {
			return fmt.Errorf("%d series left after the job went to zero", n)
		}
		return nil
	})
}
