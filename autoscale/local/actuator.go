package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/promreg"
	"github.com/sluice-project/sluice/internal/ready"
	"github.com/sluice-project/sluice/internal/supervise"
)

// Options configure the actuator.
type Options struct {
	// Command is the argv of one replica, the same for every job.
	Command []string
	// Env is added to the parent's environment. Each replica also gets
	// SLUICE_REPLICA=<job>/<n>.
	Env []string
	// ReadyTimeout is how long a replica may take to print its ready line
	// before it is killed (default 20s); StopTimeout how long a stopped
	// replica may drain before SIGKILL (default 10s).
	ReadyTimeout, StopTimeout time.Duration
}

// Counts sum up replica lifecycles since New.
type Counts struct {
	Started int
	Stopped int // exited after being asked to (SIGTERM)
	Killed  int // by KillRandom
	Crashed int // exited unasked, or never got ready
	// MaxLive is the most replicas counting towards their jobs at once
	// (started and not asked to stop, killed or timed out): never more
	// than Scale asked for in all. A replica killed or stopping but not
	// yet reaped no longer counts, though its process may still exist.
	MaxLive int
	Live    int // replica processes alive now, stopping and killed ones included
	// CPU is the CPU time (user + system) of the replicas that exited.
	CPU time.Duration
}

// Actuator runs replicas as local processes.
type Actuator struct {
	opts Options
	log  *slog.Logger

	liveGauge *prometheus.GaugeVec
	lifecycle *prometheus.CounterVec

	mu     sync.Mutex
	jobs   map[string][]*replica // in start order
	wanted map[string]int        // last Scale per job
	counts Counts
	live   int
	nextID int
	closed bool
}

type replica struct {
	job      string
	id       int
	proc     *supervise.Process
	url      string
	ready    bool
	stopping bool // asked to stop
	killed   bool // by KillRandom
	timedOut bool // not ready within ReadyTimeout
	exited   bool
	done     chan struct{}
	stderr   *stderrLog
	timer    *time.Timer // ready timeout, then stop timeout
}

// alive reports whether r counts towards its job's replicas.
func (r *replica) alive() bool { return !r.stopping && !r.killed && !r.timedOut && !r.exited }

// New creates an actuator; reg may be nil.
func New(opts Options, logger *slog.Logger, reg prometheus.Registerer) *Actuator {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 20 * time.Second
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 10 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Actuator{
		opts: opts,
		log:  logger,
		liveGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_local_replicas", Help: "Replica processes alive, starting and stopping ones included.",
		}, []string{"job"}),
		lifecycle: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_local_replica_events_total", Help: "Replica processes started, stopped, killed and crashed.",
		}, []string{"job", "event"}),
		jobs:   map[string][]*replica{},
		wanted: map[string]int{},
	}
	a.liveGauge = promreg.Register(reg, a.liveGauge)
	a.lifecycle = promreg.Register(reg, a.lifecycle)
	return a
}

// Scale starts or stops replicas of job until n are starting or serving.
// It does not wait: replicas become ready in the background.
func (a *Actuator) Scale(ctx context.Context, job string, n int) error {
	if n < 0 {
		return fmt.Errorf("scaling job %s: %d replicas: want >= 0", job, n)
	}
	if len(a.opts.Command) == 0 {
		return errors.New("local actuator: no replica command configured")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("scaling job %s: actuator closed", job)
	}
	var alive []*replica
	for _, r := range a.jobs[job] {
		if r.alive() {
			alive = append(alive, r)
		}
	}
	for i := len(alive) - 1; i >= n; i-- {
		a.stop(alive[i])
	}
	a.wanted[job] = n
	for range n - len(alive) {
		if err := a.start(job); err != nil {
			return fmt.Errorf("scaling job %s to %d: %w", job, n, err)
		}
	}
	a.forgetIfGone(job)
	return nil
}

// forgetIfGone deletes job's series once it is scaled to zero and its last
// process exited; a.mu must be held.
func (a *Actuator) forgetIfGone(job string) {
	if a.wanted[job] != 0 || len(a.jobs[job]) != 0 {
		return
	}
	delete(a.wanted, job)
	l := prometheus.Labels{"job": job}
	a.liveGauge.DeletePartialMatch(l)
	a.lifecycle.DeletePartialMatch(l)
}

// aliveLocked counts the replicas of every job that count towards it; a.mu
// must be held.
func (a *Actuator) aliveLocked() int {
	n := 0
	for _, reps := range a.jobs {
		for _, r := range reps {
			if r.alive() {
				n++
			}
		}
	}
	return n
}

// start launches one replica of job; a.mu must be held.
func (a *Actuator) start(job string) error {
	a.nextID++
	r := &replica{job: job, id: a.nextID, done: make(chan struct{})}
	r.stderr = &stderrLog{log: a.log.With("job", job, "replica", r.id)}
	cmd := exec.Command(a.opts.Command[0], a.opts.Command[1:]...)
	cmd.Env = append(append(os.Environ(), a.opts.Env...), fmt.Sprintf("SLUICE_REPLICA=%s/%d", job, r.id))
	cmd.Stderr = r.stderr
	// Its own process group, and SIGKILL from the kernel when this process
	// dies (see the package doc). Pdeathsig follows the thread that forked:
	// Go only ends threads that a goroutine locked and did not unlock, and
	// Scale runs on no such thread.
	proc, err := supervise.Start(cmd, supervise.Options{Group: true, DieWithParent: true,
		Stdout: func(stdout io.Reader) { a.readStdout(r, stdout) }})
	if err != nil {
		return fmt.Errorf("starting replica %q: %w", a.opts.Command[0], err)
	}
	r.proc = proc
	a.jobs[job] = append(a.jobs[job], r)
	a.counts.Started++
	a.live++
	a.counts.MaxLive = max(a.counts.MaxLive, a.aliveLocked())
	a.liveGauge.WithLabelValues(job).Inc()
	a.lifecycle.WithLabelValues(job, "started").Inc()
	a.log.Debug("replica starting", "job", job, "replica", r.id, "pid", proc.Pid())
	r.timer = time.AfterFunc(a.opts.ReadyTimeout, func() { a.readyTimeout(r) })
	go a.reap(r)
	return nil
}

// readStdout reads the replica's stdout for its ready line (supervise
// discards what a line too long for the scanner leaves).
func (a *Actuator) readStdout(r *replica, stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		url, ok := ready.Parse(line)
		if !ok {
			r.stderr.log.Debug("replica stdout", "line", line)
			continue
		}
		a.mu.Lock()
		if r.url == "" && r.alive() {
			r.url, r.ready = url, true
			r.timer.Stop()
			a.log.Info("replica ready", "job", r.job, "replica", r.id, "url", r.url)
		}
		a.mu.Unlock()
	}
}

// reap waits for the replica to exit and accounts for it.
func (a *Actuator) reap(r *replica) {
	<-r.proc.Done()
	err := r.proc.Err()
	var cpu time.Duration
	if ps := r.proc.State(); ps != nil {
		cpu = ps.UserTime() + ps.SystemTime()
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	r.exited, r.ready = true, false
	r.timer.Stop()
	a.counts.CPU += cpu
	close(r.done)
	reps := a.jobs[r.job]
	for i, x := range reps {
		if x == r {
			a.jobs[r.job] = append(reps[:i:i], reps[i+1:]...)
			break
		}
	}
	if len(a.jobs[r.job]) == 0 {
		delete(a.jobs, r.job)
	}
	a.live--
	a.liveGauge.WithLabelValues(r.job).Dec()
	defer a.forgetIfGone(r.job)
	switch {
	case r.killed:
		a.log.Debug("killed replica exited", "job", r.job, "replica", r.id)
	case r.stopping:
		a.counts.Stopped++
		a.lifecycle.WithLabelValues(r.job, "stopped").Inc()
		a.log.Debug("replica stopped", "job", r.job, "replica", r.id, "exit", err)
	default:
		a.counts.Crashed++
		a.lifecycle.WithLabelValues(r.job, "crashed").Inc()
		reason := fmt.Sprint(err)
		if r.timedOut {
			reason = fmt.Sprintf("no %q line within %v", strings.TrimSpace(ready.Prefix), a.opts.ReadyTimeout)
		}
		a.log.Warn("replica died unasked", "job", r.job, "replica", r.id, "reason", reason, "stderr", r.stderr.tail())
	}
}

// readyTimeout kills a replica that never said it was ready.
func (a *Actuator) readyTimeout(r *replica) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.ready || !r.alive() {
		return
	}
	r.timedOut = true
	signalGroup(r, syscall.SIGKILL)
}

// stop asks r to drain and exit, and kills it after StopTimeout; a.mu must be held.
func (a *Actuator) stop(r *replica) {
	if r.exited || r.stopping || r.killed || r.timedOut {
		return // gone or being killed already
	}
	r.stopping, r.ready = true, false
	r.timer.Stop()
	signalGroup(r, syscall.SIGTERM)
	r.timer = time.AfterFunc(a.opts.StopTimeout, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if !r.exited {
			a.log.Warn("replica did not stop in time; killing it", "job", r.job, "replica", r.id, "timeout", a.opts.StopTimeout)
			signalGroup(r, syscall.SIGKILL)
		}
	})
}

// signalGroup signals the replica's process group (it leads it), or the
// process itself if the group is gone; the caller holds a.mu.
func signalGroup(r *replica, sig syscall.Signal) {
	if !r.exited {
		r.proc.Signal(sig)
	}
}

// Ready is the number of replicas of job that serve.
func (a *Actuator) Ready(job string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.jobs[job] {
		if r.ready && r.alive() {
			n++
		}
	}
	return n
}

// Endpoints are the base URLs of job's ready replicas, oldest first.
func (a *Actuator) Endpoints(job string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, r := range a.jobs[job] {
		if r.ready && r.alive() {
			out = append(out, r.url)
		}
	}
	return out
}

// KillRandom SIGKILLs a random ready replica of job (chaos testing) and
// reports whether there was one. The next Scale replaces it.
func (a *Actuator) KillRandom(job string, rng *rand.Rand) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ready []*replica
	for _, r := range a.jobs[job] {
		if r.ready && r.alive() {
			ready = append(ready, r)
		}
	}
	if len(ready) == 0 {
		return false
	}
	r := ready[rng.IntN(len(ready))]
	r.killed, r.ready = true, false
	r.timer.Stop()
	signalGroup(r, syscall.SIGKILL)
	a.counts.Killed++
	a.lifecycle.WithLabelValues(job, "killed").Inc()
	a.log.Info("killed a replica", "job", job, "replica", r.id, "url", r.url)
	return true
}

// Counts returns the lifecycle counts so far.
func (a *Actuator) Counts() Counts {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.counts
	c.Live = a.live
	return c
}

// Close stops every replica (SIGTERM, SIGKILL after StopTimeout) and waits
// for all of them to exit. If ctx ends first the rest are killed at once,
// waited for, and ctx's error returned. Scale fails after Close.
func (a *Actuator) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	var all []*replica
	for _, reps := range a.jobs {
		for _, r := range reps {
			a.stop(r)
			all = append(all, r)
		}
	}
	a.mu.Unlock()

	wait := func() bool {
		for _, r := range all {
			select {
			case <-r.done:
			case <-ctx.Done():
				return false
			}
		}
		return true
	}
	if wait() {
		return nil
	}
	a.mu.Lock()
	for _, r := range all {
		signalGroup(r, syscall.SIGKILL)
	}
	a.mu.Unlock()
	for _, r := range all {
		<-r.done
	}
	return ctx.Err()
}

// stderrLog sends a replica's stderr to the logger at debug level and
// keeps its last lines for when it dies.
type stderrLog struct {
	log *slog.Logger

	mu    sync.Mutex
	part  []byte
	lines []string
}

const stderrTail = 20

func (s *stderrLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.part = append(s.part, p...)
	for {
		i := bytes.IndexByte(s.part, '\n')
		if i < 0 {
			break
		}
		line := string(s.part[:i])
		s.part = s.part[i+1:]
		s.log.Debug("replica stderr", "line", line)
		s.lines = append(s.lines, line)
		if len(s.lines) > stderrTail {
			s.lines = s.lines[len(s.lines)-stderrTail:]
		}
	}
	if len(s.part) > 64<<10 { // a runaway line without newline: drop it
		s.part = s.part[:0]
	}
	return len(p), nil
}

func (s *stderrLog) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(append(slices.Clone(s.lines), string(s.part)), "\n")
}
