package itest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/sluice-project/sluice/wire"
)

// Cluster is one scenario's world: a nats-server, versitygw (behind a
// FaultProxy when asked), and the sluice processes started in it. Its
// directory holds every process's log and data; it is kept when the test
// fails (or SLUICE_ITEST_KEEP is set) and its log tails are printed.
type Cluster struct {
	T     testing.TB
	Bins  Binaries
	Dir   string
	NATS  *NATSServer
	S3    *S3Server
	Proxy *FaultProxy // nil without faults
	procs *[]*Process // shared with the copies For makes
}

// For returns the cluster for a subtest: failures and cleanups go to t,
// the processes started stay the cluster's.
func (c *Cluster) For(t testing.TB) *Cluster {
	cc := *c
	cc.T = t
	return &cc
}

// ClusterOptions shape a Cluster.
type ClusterOptions struct {
	// Faults, when set, puts a FaultProxy between the sluice processes and
	// versitygw (the test's own uploads go to versitygw directly).
	Faults *FaultOptions
}

// StartCluster starts nats-server and versitygw for t.
func StartCluster(t testing.TB, bins Binaries, o ClusterOptions) *Cluster {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	dir, err := os.MkdirTemp("", "sluice-itest-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{T: t, Bins: bins, Dir: dir, procs: new([]*Process)}
	// Registered first, so it runs last: after every process stopped.
	t.Cleanup(func() {
		c.killStrays()
		if t.Failed() || os.Getenv("SLUICE_ITEST_KEEP") != "" {
			for _, p := range *c.procs {
				t.Logf("--- %s log (last 40 lines of %s):\n%s", p.Name, p.LogPath, p.Tail(40))
			}
			t.Logf("logs and data kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	certs, err := NewCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	c.NATS = StartNATSServer(t, bins.NATSServer, dir, certs)
	*c.procs = append(*c.procs, c.NATS.Process)
	c.S3 = StartS3Server(t, bins.VersityGW, dir)
	*c.procs = append(*c.procs, c.S3.Process)
	if o.Faults != nil {
		p, err := StartFaultProxy(c.S3.Endpoint(), *o.Faults)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c.Proxy = p
	}
	return c
}

// S3Endpoint is the endpoint the sluice processes use: the fault proxy's
// when there is one.
func (c *Cluster) S3Endpoint() string {
	if c.Proxy != nil {
		return c.Proxy.Endpoint()
	}
	return c.S3.Endpoint()
}

// ConnArgs are the NATS connection flags every sluice command gets.
func (c *Cluster) ConnArgs() []string { return c.NATS.ClientArgs() }

// Env is the environment every sluice process gets: the S3 endpoint and
// credentials (SLUICE_S3_ENDPOINT, since only the commands that read S3
// take --s3-endpoint).
func (c *Cluster) Env() []string {
	return append(c.S3.Env(), "SLUICE_S3_ENDPOINT="+c.S3Endpoint())
}

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
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Bins.Sluice, args...)
	cmd.Env = append(append(os.Environ(), c.Env()...), env...)
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
		c.T.Fatalf("running sluice %s: %v", strings.Join(args, " "), err)
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
	p := StartProcess(c.T, c.Dir, name, c.Bins.Sluice, append(args, c.ConnArgs()...), c.Env())
	*c.procs = append(*c.procs, p)
	return p
}

// ControllerOptions are the controller flags the scenarios vary.
type ControllerOptions struct {
	MaxReplicas int           // --max-replicas (0: 2)
	LeaseTTL    time.Duration // --lease-ttl (0: 3s)
	TaskAckWait time.Duration // --task-ack-wait (0: 5s)
}

// Controller is a `sluice controller` process and the URL of its
// /metrics, /healthz and /readyz.
type Controller struct {
	*Process
	URL string
}

// StartController starts `sluice controller --actuator local --id NAME`
// with short lease and ack timeouts, so that takeovers and redeliveries are
// quick, and waits for its ready line.
func (c *Cluster) StartController(name string, o ControllerOptions) *Controller {
	c.T.Helper()
	if o.MaxReplicas == 0 {
		o.MaxReplicas = 2
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 3 * time.Second
	}
	if o.TaskAckWait == 0 {
		o.TaskAckWait = 5 * time.Second
	}
	p := c.Start(name, "controller", "--actuator", "local", "--id", name,
		"--listen", "127.0.0.1:"+strconv.Itoa(MustFreePort(c.T)),
		"--max-replicas", strconv.Itoa(o.MaxReplicas),
		"--lease-ttl", o.LeaseTTL.String(), "--task-ack-wait", o.TaskAckWait.String())
	// It prints the ready line once it has read the job store.
	url, err := p.Ready(60 * time.Second)
	if err != nil {
		c.T.Fatal(err)
	}
	return &Controller{Process: p, URL: url}
}

// Agent is a `sluice agent` process on a fixed port, so that a restart
// serves on the same address.
type Agent struct {
	*Process
	URL string
}

// StartAgent starts `sluice agent` for job (reader "" is the default) and
// waits for its ready line.
func (c *Cluster) StartAgent(name, job, reader string) *Agent {
	c.T.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(MustFreePort(c.T))
	args := []string{"agent", "--job", job, "--listen", addr, "--log-level", "debug"}
	if reader != "" {
		args = append(args, "--reader", reader)
	}
	a := &Agent{Process: c.Start(name, args...)}
	url, err := a.Ready(60 * time.Second)
	if err != nil {
		c.T.Fatal(err)
	}
	a.URL = url
	return a
}

// Restart SIGKILLs the agent and starts it again on the same address.
func (a *Agent) Restart() (string, error) {
	if err := a.Kill(); err != nil {
		return "", err
	}
	if err := a.Start(); err != nil {
		return "", err
	}
	return a.Ready(60 * time.Second)
}

// Spec is a job spec file's content (keys as in wire.JobSpec's JSON).
type Spec map[string]any

// WriteSpec writes spec as a YAML file in the cluster directory.
func (c *Cluster) WriteSpec(name string, spec Spec) string {
	c.T.Helper()
	b, err := yaml.Marshal(map[string]any(spec))
	if err != nil {
		c.T.Fatal(err)
	}
	path := filepath.Join(c.Dir, name+".yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		c.T.Fatal(err)
	}
	return path
}

// Submit writes spec and submits it with `sluice job submit`.
func (c *Cluster) Submit(spec Spec) Result {
	c.T.Helper()
	return c.MustSluice("job", "submit", c.WriteSpec(fmt.Sprint(spec["id"]), spec))
}

// JetStream is a test-side client of the cluster's server; it reconnects
// across restarts and closes when the test ends.
func (c *Cluster) JetStream() (*nats.Conn, jetstream.JetStream) {
	c.T.Helper()
	nc, err := c.NATS.Connect()
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		c.T.Fatal(err)
	}
	return nc, js
}

// Job reads a job's record from the jobs bucket.
func Job(ctx context.Context, js jetstream.JetStream, id string) (wire.Job, error) {
	kv, err := js.KeyValue(ctx, wire.JobsBucket)
	if err != nil {
		return wire.Job{}, fmt.Errorf("opening %s: %w", wire.JobsBucket, err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		return wire.Job{}, fmt.Errorf("job %s: %w", id, err)
	}
	var j wire.Job
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return wire.Job{}, fmt.Errorf("job %s: %w", id, err)
	}
	return j, nil
}

// WaitJobState polls the job's record until it is in state want.
func (c *Cluster) WaitJobState(js jetstream.JetStream, id string, want wire.JobState, within time.Duration) wire.Job {
	c.T.Helper()
	var j wire.Job
	defer func() {
		if c.T.Failed() {
			c.T.Logf("job %s in JetStream:\n%s", id, DescribeJob(js, id))
		}
	}()
	CheckFor(c.T, within, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if j, err = Job(ctx, js, id); err != nil {
			return err
		}
		if j.State != want {
			return fmt.Errorf("job %s is %s (%s), want %s", id, j.State, j.Reason, want)
		}
		return nil
	})
	return j
}

// CheckFor calls f every sleep until it returns nil, or fails the test with
// f's last error after total (nats-server's checkFor).
func CheckFor(t testing.TB, total, sleep time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", total, err)
		}
		time.Sleep(sleep)
	}
}

// killStrays SIGKILLs processes of this cluster that outlived their
// parents (replicas of a killed controller): those running the sluice
// binary with this cluster's NATS URL among their arguments.
func (c *Cluster) killStrays() {
	if c.NATS == nil {
		return
	}
	for _, pid := range c.StrayPids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Replicas lists the live `sluice fn serve` processes against this
// cluster's NATS server (the replicas controllers started).
func (c *Cluster) Replicas() []int {
	var out []int
	for _, pid := range c.StrayPids() {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), "\x00fn\x00serve\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// StrayPids lists live processes that run the sluice binary against this
// cluster's NATS server and that the test did not start itself (replicas).
func (c *Cluster) StrayPids() []int {
	own := map[int]bool{}
	for _, p := range *c.procs {
		if p.Running() {
			own[p.Pid()] = true
		}
	}
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || own[pid] {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || args[0] != c.Bins.Sluice {
			continue
		}
		// The URL is on the command line, or in the environment (SLUICE_NATS_URL).
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if !strings.Contains(string(cmdline), c.NATS.URL()) && !strings.Contains(string(environ), c.NATS.URL()) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err != nil || isZombie(string(stat)) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// isZombie reads the state field of /proc/PID/stat ("pid (comm) S ...").
func isZombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z'
}
