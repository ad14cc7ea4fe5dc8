package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/autoscale/local"
	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/controller"
	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/httpserve"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/internal/ready"
	"github.com/sluice-project/sluice/internal/streams"
)

// actuators are the --actuator values.
var actuators = []string{"local", "knative"}

// autoscaleConfig is the policy's defaults with the --allocator chosen.
func autoscaleConfig(allocator string) autoscale.Config {
	cfg := autoscale.DefaultConfig()
	cfg.Allocator = allocator
	return cfg
}

// replicaStopTimeout is how long a replica may drain at shutdown before it
// is killed; its task goes back to the queue either way.
const replicaStopTimeout = 30 * time.Second

func runController(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runControllerWith(ctx, "controller", args, stdout, stderr, nil)
}

// runControllerWith is `sluice controller`; baselines, when not nil, adds
// the load test's flags that let a baseline size the replicas in place
// of Sluice's policy (`sluice loadtest controller`).
func runControllerWith(ctx context.Context, name string, args []string, stdout, stderr io.Writer, baselines *baselineFlags) error {
	fs := newFlagSet(name, stderr)
	f := registerControllerFlags(fs)
	baselines.register(fs)
	fs.Usage = controllerUsage(fs, name, stderr)
	var conn connect.Config
	var cache shardcache.Config
	var fnToken bearer.Token
	if err := parse(fs, args, append(f.checks(&conn, &cache, &fnToken), baselines.checks(f.concurrency)...)...); err != nil {
		return err
	}
	logger, listen := newLogger(stderr, *f.logLevel).With("component", "controller"), f.listen
	nc, js, err := serveAs(ctx, conn, natsperm.Controller(), "sluice-controller "+*f.id, logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	ops := newOpsServer()
	reg := ops.Registry

	act, dispatch, stopAct, err := f.actuatorFor(ctx, conn, cache, fnToken, baselines, logger, reg)
	if err != nil {
		return err
	}
	defer stopAct()
	c, err := controller.New(controller.Options{
		ID: *f.id, NC: nc, JS: js, Streams: conn.Streams(),
		Broker:   broker.New(js, nil, conn.Streams(), logger.With("component", "broker")),
		Actuator: act, Dispatch: dispatch, LeaseTTL: *f.leaseTTL, Tick: *f.tick, TaskAckWait: *f.ackWait,
		MaxReplicas: *f.maxReplicas, ReplicaConcurrency: *f.concurrency,
		Autoscale: autoscaleConfig(*f.allocator), CalloutIssuer: f.callout, AgentLoginTTL: *f.agentLoginTTL,
	}, logger, reg)
	if err != nil {
		return err
	}
	if *f.actuator == "local" {
		if err := baselines.use(c.Runner(), *f.concurrency, *f.maxReplicas); err != nil {
			return err
		}
	}

	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", *listen, err)
		}
		ops.probes(func(w http.ResponseWriter, _ *http.Request) {
			switch {
			case !nc.IsConnected():
				http.Error(w, "nats disconnected", http.StatusServiceUnavailable)
			case !c.Ready():
				http.Error(w, "reading the job store", http.StatusServiceUnavailable)
			default:
				fmt.Fprintln(w, "ok")
			}
		})
		// Probes and metrics only, answered at once: nothing needs a token,
		// and a response may be bounded as a whole.
		hs, _ := ops.serve(ln, httpserve.Options{WriteTimeout: httpserve.OpsWriteTimeout, Logger: logger})
		defer hs.Close()
		// Scripts and tests wait for this line: the controller serves and runs jobs.
		go ops.announceOnce(ctx, stdout, c.Ready)
		logger.Info("serving", "addr", ln.Addr().String())
	}
	return c.Run(ctx)
}

// controllerFlags are `sluice controller`'s settings.
type controllerFlags struct {
	id, actuator, listen, logLevel, vocabDir, allocator *string
	maxReplicas, replicaCPUs, concurrency               *int
	leaseTTL, tick, ackWait, agentLoginTTL              *time.Duration
	kn                                                  knativeFlags
	conn                                                *connect.Flags
	cache                                               cacheFlags
	fnToken                                             *bearer.Flag
	calloutSeedFile                                     *string
	callout                                             nkeys.KeyPair // from calloutSeedFile
}

// calloutSeedFileEnv names the file of the auth callout issuer's seed
// when --nats-callout-seed-file is not given.
const calloutSeedFileEnv = "SLUICE_NATS_CALLOUT_SEED_FILE"

func registerControllerFlags(fs *flag.FlagSet) *controllerFlags {
	host, _ := os.Hostname()
	return &controllerFlags{
		id:          fs.String("id", fmt.Sprintf("%s-%d", host, os.Getpid()), "this controller's name in job leases; unique among controllers"),
		actuator:    fs.String("actuator", "local", "how replicas run: local (sluice fn serve processes on this machine) or knative (pods of a Knative Service, see deploy/knative)"),
		maxReplicas: fs.Int("max-replicas", controller.DefaultMaxReplicas, "replicas over all jobs (the capacity jobs share), and a job's cap when its spec sets none"),
		replicaCPUs: fs.Int("replica-cpus", 1, "cores (GOMAXPROCS) of one replica"),
		concurrency: fs.Int("replica-concurrency", 1, "shards one replica processes at once"),
		leaseTTL:    fs.Duration("lease-ttl", controller.DefaultLeaseTTL, "how long a job's lease lives unrenewed: a standby takes a dead controller's jobs after at most this"),
		tick:        fs.Duration("tick", controller.DefaultTick, "how often the autoscaler decides and job dispatch plans (where changed) and statuses are written"),
		ackWait:     fs.Duration("task-ack-wait", streams.DispatchAckWait, "how long a task a dead agent held waits before it is redelivered to another agent of the job (the job's task consumer's ack wait)"),
		listen:      fs.String("listen", "", "address for /metrics, /healthz and /readyz (empty: none)"),
		logLevel:    fs.String("log-level", "info", "log level: "+fmt.Sprint(logLevels)),
		kn:          registerKnativeFlags(fs),
		conn:        connect.Register(fs, connect.PartAll),
		cache:       registerCacheFlags(fs, " of the replicas this controller starts"),
		fnToken:     bearer.Function.Register(fs, "with --actuator local: the token the replicas require of every task (given them through their environment); the agents must send it"),
		vocabDir:    fs.String("vocab-dir", "", "with --actuator local: the directory the replicas read WordPiece vocab and BPE tokenizer files from (fn serve --vocab-dir); empty: builtin only"),
		calloutSeedFile: fs.String("nats-callout-seed-file", "", "`FILE` holding the account nkey seed (SA...) the NATS server's auth callout trusts: the controller then lets "+
			"each job's agents in as their job, with that job's permissions only (deploy/knative/nats/nats.conf; env "+calloutSeedFileEnv+"; empty: no callout served)"),
		agentLoginTTL: fs.Duration("agent-login-ttl", controller.DefaultAgentLoginTTL, "with --nats-callout-seed-file: how long an agent's NATS login lasts before its reconnect is checked "+
			"again against its job's record (an agent of a deleted or resubmitted job loses the job within this)"),
		allocator: fs.String("allocator", autoscale.AllocatorMarginal, "how replicas are shared when jobs want more than --max-replicas: marginal (each next replica to the job whose trainer gains most) or fair (weighted max-min)"),
	}
}

// checks are the flags' checks; they resolve the connection, cache and
// token settings into conn, cache and fnToken.
func (f *controllerFlags) checks(conn *connect.Config, cache *shardcache.Config, fnToken *bearer.Token) []func() error {
	return []func() error{
		loadToken(f.fnToken, fnToken),
		oneOf("actuator", f.actuator, actuators...),
		oneOf("allocator", f.allocator, autoscale.AllocatorMarginal, autoscale.AllocatorFair),
		intRange("max-replicas", f.maxReplicas, 1, controller.MaxMaxReplicas),
		intRange("replica-cpus", f.replicaCPUs, 1, 1024),
		intRange("replica-concurrency", f.concurrency, 1, controller.MaxReplicaConcurrency),
		durationRange("lease-ttl", f.leaseTTL, controller.MinLeaseTTL, controller.MaxLeaseTTL),
		durationRange("agent-login-ttl", f.agentLoginTTL, controller.MinAgentLoginTTL, controller.MaxAgentLoginTTL),
		durationRange("tick", f.tick, controller.MinTick, controller.MaxTick),
		durationRange("task-ack-wait", f.ackWait, controller.MinTaskAckWait, controller.MaxTaskAckWait),
		oneOf("log-level", f.logLevel, logLevels...),
		func() error {
			if *f.id == "" {
				return errors.New("--id: want a name")
			}
			return nil
		},
		f.cache.resolve(cache),
		resolve(f.conn, conn),
		f.loadCalloutSeed,
	}
}

// loadCalloutSeed reads the auth callout issuer's seed from its file. Its
// errors name the file, never the seed.
func (f *controllerFlags) loadCalloutSeed() error {
	file, from := *f.calloutSeedFile, "--nats-callout-seed-file"
	if file == "" {
		file, from = os.Getenv(calloutSeedFileEnv), "$"+calloutSeedFileEnv
	}
	if file == "" {
		return nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(data))
	if err != nil {
		return fmt.Errorf("%s %s: not an nkey seed", from, file)
	}
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		return fmt.Errorf("%s %s: not an account seed (SA...): the callout's issuer is an account key", from, file)
	}
	f.callout = kp
	return nil
}

// actuatorFor starts the actuator --actuator names and the replicas'
// ready count the jobs' dispatch reads (nil: the actuator's); stop ends
// it.
func (f *controllerFlags) actuatorFor(ctx context.Context, conn connect.Config, cache shardcache.Config, fnToken bearer.Token,
	baselines *baselineFlags, logger *slog.Logger, reg prometheus.Registerer) (controller.Actuator, controller.ReadyReplicas, func(), error) {
	if *f.actuator == "knative" {
		kpa := baselines.kpaAlone()
		ka, err := f.kn.actuator(ctx, *f.concurrency, *f.maxReplicas, kpa, logger.With("component", "actuator"), reg)
		if err != nil {
			return nil, nil, nil, err
		}
		kctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); ka.Run(kctx) }()
		if kpa {
			// The baseline: every job's agents keep a fixed number of
			// tasks in flight and the KPA sizes the Service by it.
			return ka, kpaDispatch{*baselines.kpaInFlight / *f.concurrency}, func() { stop(); <-done }, nil
		}
		// The jobs' in-flight budgets are the replicas requested: requests
		// wait in the activator through a cold start, and make the KPA
		// scale. The Service's one URL stands for all its pods
		// (SharedEndpoint).
		return ka, ka.Requested(), func() { stop(); <-done }, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("finding this binary to run replicas: %w", err)
	}
	// Replicas are this binary's `fn serve`, with this controller's
	// connection settings (secrets through the environment).
	ropts := local.FnServe([]string{exe, "fn", "serve"}, *f.replicaCPUs, *f.concurrency, conn).WithCache(cache).WithToken(fnToken).WithVocabDir(*f.vocabDir)
	ropts.StopTimeout = replicaStopTimeout
	la := local.New(ropts, logger.With("component", "actuator"), reg)
	return la, nil, func() {
		cctx, cancel := context.WithTimeout(context.Background(), replicaStopTimeout+5*time.Second)
		defer cancel()
		if err := la.Close(cctx); err != nil {
			logger.Warn("stopping replicas", "err", err)
		}
	}, nil
}

// controllerUsage prints the command's usage and flags.
func controllerUsage(fs *flag.FlagSet, name string, stderr io.Writer) func() {
	return func() {
		fmt.Fprintf(stderr, "Usage: sluice %s [flags]\n\nRuns every active job of the job store: its replicas (autoscaled), its dispatch plan\n"+
			"(the replicas its agents send tasks to, and how many at once) and its status. Several\n"+
			"controllers may run: each job is owned by one (a lease), and a standby takes the jobs of one\n"+
			"that died. SIGTERM hands the jobs over at once. With --listen it prints\n"+
			"%q on stdout once it has read the job store.\n\n", name, ready.Prefix+"http://ADDR")
		fs.PrintDefaults()
	}
}
