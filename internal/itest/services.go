package itest

import (
	"strconv"
	"time"
)

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

// StartAgent starts `sluice agent` for job (reader "" is the default),
// with extra flags, and waits for its ready line.
func (c *Cluster) StartAgent(name, job, reader string, extra ...string) *Agent {
	c.T.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(MustFreePort(c.T))
	args := []string{"agent", "--job", job, "--listen", addr, "--log-level", "debug"}
	if reader != "" {
		args = append(args, "--reader", reader)
	}
	args = append(args, extra...)
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
