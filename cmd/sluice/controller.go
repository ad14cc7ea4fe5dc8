package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

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
	fs := newFlagSet("controller", stderr)
	host, _ := os.Hostname()
	id := fs.String("id", fmt.Sprintf("%s-%d", host, os.Getpid()), "this controller's name in job leases; unique among controllers")
	actuator := fs.String("actuator", "local", "how replicas run: local (sluice fn serve processes on this machine) or knative (pods of a Knative Service, see deploy/knative)")
	maxReplicas := fs.Int("max-replicas", controller.DefaultMaxReplicas, "replicas over all jobs (the capacity jobs share), and a job's cap when its spec sets none")
	replicaCPUs := fs.Int("replica-cpus", 1, "cores (GOMAXPROCS) of one replica")
	concurrency := fs.Int("replica-concurrency", 1, "shards one replica processes at once")
	leaseTTL := fs.Duration("lease-ttl", controller.DefaultLeaseTTL, "how long a job's lease lives unrenewed: a standby takes a dead controller's jobs after at most this")
	tick := fs.Duration("tick", controller.DefaultTick, "how often the autoscaler decides and job dispatch plans (where changed) and statuses are written")
	ackWait := fs.Duration("task-ack-wait", streams.DispatchAckWait, "how long a task a dead agent held waits before it is redelivered to another agent of the job (the job's task consumer's ack wait)")
	listen := fs.String("listen", "", "address for /metrics, /healthz and /readyz (empty: none)")
	logLevel := fs.String("log-level", "info", "log level: "+fmt.Sprint(logLevels))
	kn := registerKnativeFlags(fs)
	localScaling := fs.String("local-scaling", "sluice", "with --actuator local: who sizes replicas: sluice (its demand-driven policy), kpa (Knative's KPA emulated alone, from the requests a push dispatcher with a fixed parallelism would keep outstanding) or keda (a KEDA ScaledObject on the job's queue lag and its HPA, emulated): the baselines to compare with")
	kpaWindow := fs.Duration("kpa-window", 60*time.Second, "with --local-scaling kpa: the KPA's stable window (Knative's window annotation)")
	kedaCfg := local.DefaultKEDAConfig()
	fs.DurationVar(&kedaCfg.PollingInterval, "keda-polling-interval", kedaCfg.PollingInterval, "with --local-scaling keda: KEDA's pollingInterval (activation and deactivation)")
	fs.DurationVar(&kedaCfg.HPASyncPeriod, "keda-hpa-sync", kedaCfg.HPASyncPeriod, "with --local-scaling keda: how often the HPA resizes an active job")
	fs.Float64Var(&kedaCfg.LagThreshold, "keda-lag-threshold", kedaCfg.LagThreshold, "with --local-scaling keda: the queue lag (tasks pending and in flight) one replica is sized for")
	fs.DurationVar(&kedaCfg.CooldownPeriod, "keda-cooldown", kedaCfg.CooldownPeriod, "with --local-scaling keda: KEDA's cooldownPeriod before a job without lag goes to its min replicas")
	fs.DurationVar(&kedaCfg.ScaleDownStabilization, "keda-scale-down-window", kedaCfg.ScaleDownStabilization, "with --local-scaling keda: the HPA's scale-down stabilization window")
	connFlags := connect.Register(fs, connect.PartAll)
	cacheFlags := registerCacheFlags(fs, " of the replicas this controller starts")
	fnTokenFlag := bearer.Function.Register(fs, "with --actuator local: the token the replicas require of every task (given them through their environment); the agents must send it")
	vocabDir := fs.String("vocab-dir", "", "with --actuator local: the directory the replicas read WordPiece vocab files from (fn serve --vocab-dir); empty: builtin only")
	allocator := fs.String("allocator", autoscale.AllocatorMarginal, "how replicas are shared when jobs want more than --max-replicas: marginal (each next replica to the job whose trainer gains most) or fair (weighted max-min)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice controller [flags]\n\nRuns every active job of the job store: its replicas (autoscaled), its dispatch plan\n"+
			"(the replicas its agents send tasks to, and how many at once) and its status. Several\n"+
			"controllers may run: each job is owned by one (a lease), and a standby takes the jobs of one\n"+
			"that died. SIGTERM hands the jobs over at once. With --listen it prints\n"+
			"%q on stdout once it has read the job store.\n\n", ready.Prefix+"http://ADDR")
		fs.PrintDefaults()
	}
	var conn connect.Config
	var cache shardcache.Config
	var fnToken bearer.Token
	if err := parse(fs, args,
		loadToken(fnTokenFlag, &fnToken),
		oneOf("actuator", actuator, actuators...),
		oneOf("local-scaling", localScaling, "sluice", "kpa", "keda"),
		kedaCfg.Validate,
		oneOf("allocator", allocator, autoscale.AllocatorMarginal, autoscale.AllocatorFair),
		durationRange("kpa-window", kpaWindow, 6*time.Second, time.Hour),
		intRange("max-replicas", maxReplicas, 1, 10000),
		intRange("replica-cpus", replicaCPUs, 1, 1024),
		intRange("replica-concurrency", concurrency, 1, 256),
		durationRange("lease-ttl", leaseTTL, 100*time.Millisecond, time.Hour),
		durationRange("tick", tick, 10*time.Millisecond, time.Minute),
		durationRange("task-ack-wait", ackWait, 100*time.Millisecond, time.Hour),
		oneOf("log-level", logLevel, logLevels...),
		func() error {
			if *id == "" {
				return errors.New("--id: want a name")
			}
			return nil
		},
		cacheFlags.resolve(&cache),
		resolve(connFlags, &conn),
	); err != nil {
		return err
	}
	logger := newLogger(stderr, *logLevel).With("component", "controller")

	nc, js, err := connectAs(ctx, conn, natsperm.Controller(), "sluice-controller "+*id, logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	ops := newOpsServer()
	reg := ops.Registry

	var act controller.Actuator
	var dispatch controller.ReadyReplicas
	// The KPA emulation reads each job's backlog from the controller's
	// autoscaler, which exists only once the controller does.
	var runner atomic.Pointer[autoscale.Runner]
	switch *actuator {
	case "knative":
		ka, err := kn.actuator(ctx, *concurrency, *maxReplicas, logger.With("component", "actuator"), reg)
		if err != nil {
			return err
		}
		kctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); ka.Run(kctx) }()
		defer func() { stop(); <-done }()
		// The jobs' in-flight budgets are the replicas requested: requests
		// wait in the activator through a cold start, and make the KPA
		// scale. The Service's one URL stands for all its pods
		// (SharedEndpoint).
		act, dispatch = ka, ka.Requested()
	default:
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this binary to run replicas: %w", err)
		}
		// Replicas are this binary's `fn serve`, with this controller's
		// connection settings (secrets through the environment).
		ropts := local.FnServe([]string{exe, "fn", "serve"}, *replicaCPUs, *concurrency, conn).WithCache(cache).WithToken(fnToken).WithVocabDir(*vocabDir)
		ropts.StopTimeout = replicaStopTimeout
		la := local.New(ropts, logger.With("component", "actuator"), reg)
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), replicaStopTimeout+5*time.Second)
			defer cancel()
			if err := la.Close(cctx); err != nil {
				logger.Warn("stopping replicas", "err", err)
			}
		}()
		act = la
		if *localScaling == "kpa" {
			cfg := local.DefaultKPAConfig(*concurrency)
			cfg.StableWindow, cfg.MaxScale = *kpaWindow, *maxReplicas
			kpa, err := local.NewKPAMode(la, cfg, local.BacklogConcurrency{
				Parallelism: *maxReplicas * *concurrency,
				Backlog: func(job string) (int, int, bool) {
					if r := runner.Load(); r != nil {
						return r.Backlog(job)
					}
					return 0, 0, false
				},
			}, logger.With("component", "kpa"))
			if err != nil {
				return err
			}
			act = kpa
		}
		if *localScaling == "keda" {
			kedaCfg.MaxReplicaCount = *maxReplicas
			keda, err := local.NewKEDAMode(la, kedaCfg, local.BacklogLag{
				Backlog: func(job string) (int, int, bool) {
					if r := runner.Load(); r != nil {
						return r.Backlog(job)
					}
					return 0, 0, false
				},
			}, logger.With("component", "keda"))
			if err != nil {
				return err
			}
			act = keda
		}
	}

	c, err := controller.New(controller.Options{
		ID: *id, NC: nc, JS: js, Streams: conn.Streams(),
		Broker:   broker.New(js, nil, conn.Streams(), logger.With("component", "broker")),
		Actuator: act, Dispatch: dispatch, LeaseTTL: *leaseTTL, Tick: *tick, TaskAckWait: *ackWait,
		MaxReplicas: *maxReplicas, ReplicaConcurrency: *concurrency,
		Autoscale: autoscaleConfig(*allocator),
	}, logger, reg)
	if err != nil {
		return err
	}
	runner.Store(c.Runner())

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
