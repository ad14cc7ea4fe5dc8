package integration

import (
	"strconv"
	"time"
)

// taskAckWait is the scenarios' task ack wait, short so that the tasks a
// killed agent held are redelivered quickly. Controllers set it on the
// jobs' task consumers and agents ping within it (both --task-ack-wait):
// an agent that opened a consumer before its controller shortened the
// wait would otherwise ping at a third of the default 30s.
const taskAckWait = 5 * time.Second

// ControllerOptions are the controller flags the scenarios vary.
type ControllerOptions struct {
	MaxReplicas int           // --max-replicas (0: 2)
	LeaseTTL    time.Duration // --lease-ttl (0: 3s)
	TaskAckWait time.Duration // --task-ack-wait (0: taskAckWait)
	VocabDir    string        // --vocab-dir: the replicas' vocab and tokenizer files (empty: builtin only)
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
		o.TaskAckWait = taskAckWait
	}
	args := []string{"controller", "--actuator", "local", "--id", name,
		"--nats-callout-seed-file", c.NATS.CalloutSeedFile,
		"--listen", "127.0.0.1:" + strconv.Itoa(MustFreePort(c.T)),
		"--max-replicas", strconv.Itoa(o.MaxReplicas),
		"--lease-ttl", o.LeaseTTL.String(), "--task-ack-wait", o.TaskAckWait.String()}
	if o.VocabDir != "" {
		args = append(args, "--vocab-dir", o.VocabDir)
	}
	p := c.Start(name, args...)
	// It prints the ready line once it has read the job store.
	url, err := p.Ready(60 * time.Second)
	if err != nil {
		c.T.Fatal(err)
	}
	return &Controller{Process: p, URL: url}
}

// Agent is a `sluice agent` process on a fixed port, so that a restart
// serves on the same address. It serves every reader of its job: the
// first (the only one, for most jobs) at URL, each at ReaderURL.
type Agent struct {
	*Process
	URL string
}

// ReaderURL is the base URL of reader's API on the agent (its /v1/batch
// is ReaderURL(reader)+"/v1/batch").
func (a *Agent) ReaderURL(reader string) string { return a.URL + "/r/" + reader }

// StartAgent starts `sluice agent --job JOB --name NAME` (it serves every
// reader the job declares) with extra flags, and waits for its ready line.
// It connects as its job, with the team key `job submit` wrote in the
// cluster's directory, let in by a controller (the auth callout).
func (c *Cluster) StartAgent(name, job string, extra ...string) *Agent {
	c.T.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(MustFreePort(c.T))
	args := []string{"agent", "--job", job, "--name", name, "--listen", addr, "--log-level", "debug",
		"--task-ack-wait", taskAckWait.String()}
	args = append(args, extra...)
	a := &Agent{Process: c.startWith(name, c.NATS.AgentArgs(), args...)}
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
