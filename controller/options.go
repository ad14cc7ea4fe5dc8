package controller

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/streams"
)

// Actuator runs the replicas of jobs: it scales them and says which serve
// (autoscale.Actuator) and where: Endpoints are the base URLs the job's
// agents send tasks to (the local actuator: each ready replica's; Knative:
// the Service's). The local actuator is one.
type Actuator interface {
	autoscale.Actuator
	Endpoints(job string) []string
}

// SharedEndpoint is implemented by an actuator whose one endpoint stands
// for every replica (a Knative Service: its activator holds requests, its
// routing picks the pod). A job's dispatch plan then sets no per-endpoint
// limit: the endpoint takes the whole in-flight budget.
type SharedEndpoint interface {
	SharedEndpoint() bool
}

// ReadyReplicas counts a job's replicas; Options.Dispatch is one.
type ReadyReplicas interface {
	Ready(job string) int
}

// Defaults of Options.
const (
	DefaultLeaseTTL = 15 * time.Second
	// DefaultAgentLoginTTL bounds how long a deleted job's agents keep
	// its subjects; each agent reconnects once per TTL (14-80 ms off
	// NATS, measured: docs/design-multi-agent.md).
	DefaultAgentLoginTTL = 15 * time.Minute
	DefaultTick          = time.Second
	DefaultMaxReplicas   = 8
)

// Options configure a controller. NC, JS, Broker and Actuator are required.
type Options struct {
	// ID names this controller in leases and statuses; unique among the
	// controllers sharing a NATS system (the command uses hostname-pid).
	ID string
	// NC receives the agents' demand signals and shard results; JS holds
	// jobs, leases, statuses, dispatch plans and the task stream; Broker
	// changes job states and releases a finished job's tasks.
	NC     *nats.Conn
	JS     jetstream.JetStream
	Broker *broker.Broker
	// Streams are the options the streams and buckets are ensured with.
	Streams streams.Options
	// Actuator runs replicas.
	Actuator Actuator
	// Dispatch sizes each job's in-flight budget (its dispatch plan's
	// InFlight): Dispatch.Ready(job) x ReplicaConcurrency tasks. Nil means
	// Actuator, whose ready replicas are the capacity. Knative's actuator
	// gives the replicas requested instead (knative.Actuator.Requested):
	// its replicas start because requests arrive.
	Dispatch ReadyReplicas
	// LeaseTTL is how long a job's lease lives without renewal (default
	// 15s); it is renewed every LeaseTTL/3. A standby takes a dead
	// controller's jobs after at most LeaseTTL.
	LeaseTTL time.Duration
	// Tick is how often the autoscaler decides, and dispatch plans (where
	// changed) and statuses are written (default 1s).
	Tick time.Duration
	// LearnEvery is how often a running job's per-replica rate is
	// recorded in the plan store (wire.PlansBucket; default
	// DefaultLearnEvery).
	LearnEvery time.Duration
	// TaskAckWait is the AckWait of the jobs' task consumers, set when a
	// controller takes a job: how long the tasks a dead agent held stay
	// stuck before another agent gets them (default
	// streams.DispatchAckWait).
	TaskAckWait time.Duration
	// MaxReplicas is the cluster capacity: replicas over all jobs, and a
	// job's cap when its spec sets none (default 8).
	MaxReplicas int
	// ReplicaConcurrency is how many tasks one replica takes at once (its
	// `fn serve --concurrency`; default 1).
	ReplicaConcurrency int
	// Autoscale tunes the policy; zero means autoscale.DefaultConfig. Its
	// MaxReplicas and ClusterCapacity are set from MaxReplicas.
	Autoscale autoscale.Config
	// CalloutIssuer, when set, makes the controller answer the NATS
	// server's auth callout (natsperm.Render): agents connect as their
	// jobs, each granted its own job's permissions (natsperm.AgentFor),
	// signed with this account key pair, whose public key the server's
	// configuration names as the callout's issuer. Nil: no callout is
	// served (a NATS server without one).
	CalloutIssuer nkeys.KeyPair
	// AgentLoginTTL is how long an agent's login through the callout
	// lasts (the user JWT's expiry): the server then closes the
	// connection, and the agent's reconnect is checked again against the
	// job's record. So an agent of a deleted job, or of an earlier
	// submission of a job id, loses the job's subjects within it (default
	// DefaultAgentLoginTTL).
	AgentLoginTTL time.Duration
	// Abandon makes Run, when its context ends, stop its jobs and return
	// without scaling replicas down, deleting plans or releasing leases,
	// as if the process had died: a standby takes the jobs once the leases
	// expire. For tests of takeover.
	Abandon bool
}

// The options' ranges: validate holds them, and a command's flags check
// them by these names, so that each bound has one owner.
const (
	MinLeaseTTL, MaxLeaseTTL           = 100 * time.Millisecond, time.Hour
	MinTick, MaxTick                   = 10 * time.Millisecond, time.Minute
	MinTaskAckWait, MaxTaskAckWait     = 100 * time.Millisecond, time.Hour
	MinAgentLoginTTL, MaxAgentLoginTTL = 2 * time.Second, 24 * time.Hour
	MaxMaxReplicas                     = 10000
	MaxReplicaConcurrency              = 256
)

func (o Options) withDefaults() Options {
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.Tick == 0 {
		o.Tick = DefaultTick
	}
	if o.TaskAckWait == 0 {
		o.TaskAckWait = streams.DispatchAckWait
	}
	if o.LearnEvery == 0 {
		o.LearnEvery = DefaultLearnEvery
	}
	if o.AgentLoginTTL == 0 {
		o.AgentLoginTTL = DefaultAgentLoginTTL
	}
	if o.MaxReplicas == 0 {
		o.MaxReplicas = DefaultMaxReplicas
	}
	if o.ReplicaConcurrency == 0 {
		o.ReplicaConcurrency = 1
	}
	if o.Autoscale == (autoscale.Config{}) {
		o.Autoscale = autoscale.DefaultConfig()
	}
	o.Autoscale.MaxReplicas, o.Autoscale.ClusterCapacity = o.MaxReplicas, o.MaxReplicas
	o.Autoscale.MinReplicas = min(o.Autoscale.MinReplicas, o.MaxReplicas)
	o.Autoscale.InitialReplicas = min(max(o.Autoscale.InitialReplicas, 1), o.MaxReplicas)
	return o
}

// validate names every option out of range at once.
func (o Options) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if strings.TrimSpace(o.ID) == "" {
		bad("id: want a name unique among controllers")
	}
	if o.NC == nil || o.JS == nil {
		bad("a NATS connection and JetStream are required")
	}
	if o.CalloutIssuer != nil {
		if pub, err := o.CalloutIssuer.PublicKey(); err != nil || !nkeys.IsValidPublicAccountKey(pub) {
			bad("callout issuer: want an account nkey (its seed starts with SA)")
		}
	}
	if o.AgentLoginTTL < MinAgentLoginTTL || o.AgentLoginTTL > MaxAgentLoginTTL {
		bad("agent login ttl %v: want %v..%v", o.AgentLoginTTL, MinAgentLoginTTL, MaxAgentLoginTTL)
	}
	if o.Broker == nil {
		bad("a broker is required")
	}
	if o.Actuator == nil {
		bad("an actuator is required")
	}
	if o.LeaseTTL < MinLeaseTTL || o.LeaseTTL > MaxLeaseTTL {
		bad("lease ttl %v: want %v..%v", o.LeaseTTL, MinLeaseTTL, MaxLeaseTTL)
	}
	if o.Tick < MinTick || o.Tick > MaxTick {
		bad("tick %v: want %v..%v", o.Tick, MinTick, MaxTick)
	}
	if o.LearnEvery < 10*time.Millisecond || o.LearnEvery > time.Hour {
		bad("learn every %v: want 10ms..1h", o.LearnEvery)
	}
	if o.TaskAckWait < MinTaskAckWait || o.TaskAckWait > MaxTaskAckWait {
		bad("task ack wait %v: want %v..%v", o.TaskAckWait, MinTaskAckWait, MaxTaskAckWait)
	}
	if o.MaxReplicas < 1 || o.MaxReplicas > MaxMaxReplicas {
		bad("max replicas %d: want 1..%d", o.MaxReplicas, MaxMaxReplicas)
	}
	if o.ReplicaConcurrency < 1 || o.ReplicaConcurrency > MaxReplicaConcurrency {
		bad("replica concurrency %d: want 1..%d", o.ReplicaConcurrency, MaxReplicaConcurrency)
	}
	if err := o.Streams.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Autoscale.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("controller: %w", errors.Join(errs...))
	}
	return nil
}
