package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/httpserve"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/jobspec"
	"github.com/sluice-project/sluice/kubejobs"
	"github.com/sluice-project/sluice/planner"
)

// kubeJobsKeyFileEnv names the file of the key the team keys are derived
// from when --key-file is not given.
const kubeJobsKeyFileEnv = "SLUICE_KUBE_JOBS_KEY_FILE"

// kubeJobsNamespaceEnv is the namespace of the reconciler's Lease when
// --lease-namespace is not given (deploy/knative sets it to the pod's).
const kubeJobsNamespaceEnv = "SLUICE_KUBE_JOBS_NAMESPACE"

// runKubeJobs is `sluice kube-jobs`: SluiceJob objects reconciled into the
// job store, by the replica holding the Lease.
func runKubeJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("kube-jobs", stderr)
	host, _ := os.Hostname()
	var (
		kubeconfig = fs.String("kubeconfig", "", "kubeconfig `file` (default: $KUBECONFIG, ~/.kube/config, else the pod's ServiceAccount)")
		namespace  = fs.String("namespace", "", "watch SluiceJobs in this namespace only (default: every namespace)")
		leaseNS    = fs.String("lease-namespace", "", "the namespace of the Lease that elects one replica (env "+kubeJobsNamespaceEnv+"; default: the kubeconfig's, in a pod its own)")
		id         = fs.String("id", fmt.Sprintf("%s-%d", host, os.Getpid()), "this replica's name in the Lease")
		keyFile    = fs.String("key-file", "", "`FILE` holding the secret key each job's team key is derived from, at least 32 bytes (env "+kubeJobsKeyFileEnv+")")
		poll       = fs.Duration("poll", kubejobs.DefaultPoll, "how often a running job's object status is refreshed")
		listen     = fs.String("listen", "", "address for /metrics, /healthz and /readyz (empty: none)")
		logLevel   = fs.String("log-level", "info", "log level: "+fmt.Sprint(logLevels))
		connFlags  = connect.Register(fs, connect.PartAll)
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice kube-jobs [flags]\n\nReconciles SluiceJob and SluiceSweep objects (deploy/knative/kube-jobs) into the job store:\n"+
			"submits each applied one, keeps its status current, cancels and removes its job when it is deleted.\n"+
			"It connects to NATS as sluice-admin (deleting a job purges what its agents wrote) and lists\n"+
			"datasets in S3. One replica reconciles at a time (a Lease). See docs/kubernetes-resources.md.\n\n")
		fs.PrintDefaults()
	}
	var conn connect.Config
	var key []byte
	if err := parse(fs, args, oneOf("log-level", logLevel, logLevels...),
		durationRange("poll", poll, 500*time.Millisecond, time.Minute),
		func() error {
			if *id == "" {
				return errors.New("--id: want a name")
			}
			return nil
		},
		resolve(connFlags, &conn),
		func() error {
			var err error
			key, err = readKubeJobsKey(*keyFile)
			return err
		}); err != nil {
		return err
	}
	logger := newLogger(stderr, *logLevel).With("component", "kube-jobs")
	cfg, kns, err := kubejobs.RESTConfig(*kubeconfig)
	if err != nil {
		return err
	}
	if *leaseNS == "" {
		*leaseNS = os.Getenv(kubeJobsNamespaceEnv)
	}
	if *leaseNS == "" {
		*leaseNS = kns
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	nc, js, err := serveAs(ctx, conn, natsperm.Admin(), "sluice-kube-jobs "+*id, logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	ops := newOpsServer()
	s3c, err := conn.S3Client(ctx, ops.Registry)
	if err != nil {
		return fmt.Errorf("s3 client: %w", err)
	}
	b := broker.New(js, s3c, conn.Streams(), logger.With("component", "broker")).WithSpecCheck(jobspec.Check)
	// A sweep's jobs are pre-warmed from the learned per-replica rates,
	// as `sluice sweep submit` does.
	store, err := planner.Open(ctx, js)
	if err != nil {
		return fmt.Errorf("reading learned rates: %w", err)
	}
	rec, err := kubejobs.New(kubejobs.Options{Dynamic: dyn, Core: core, Broker: b, Key: key, Namespace: *namespace, Poll: *poll,
		Planner: planner.ByRate{PerReplica: store.PerReplica}}, logger, ops.Registry)
	if err != nil {
		return err
	}
	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", *listen, err)
		}
		// Ready while connected: a standby is ready too, waiting for the Lease.
		ops.probes(func(w http.ResponseWriter, _ *http.Request) {
			if !nc.IsConnected() {
				http.Error(w, "nats disconnected", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		hs, _ := ops.serve(ln, httpserve.Options{WriteTimeout: httpserve.OpsWriteTimeout, Logger: logger})
		defer hs.Close()
		ops.announce(stdout)
		logger.Info("serving", "addr", ln.Addr().String())
	}
	return kubejobs.RunElected(ctx, core, *leaseNS, "sluice-kube-jobs", *id, logger, rec.Run)
}

// readKubeJobsKey reads the team key derivation key from file (or the
// file $SLUICE_KUBE_JOBS_KEY_FILE names). Its errors name the file, never
// the key.
func readKubeJobsKey(file string) ([]byte, error) {
	from := "--key-file"
	if file == "" {
		file, from = os.Getenv(kubeJobsKeyFileEnv), "$"+kubeJobsKeyFileEnv
	}
	if file == "" {
		return nil, fmt.Errorf("--key-file: want the file of the key team keys are derived from (or $%s)", kubeJobsKeyFileEnv)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	if len(data) < kubejobs.MinKeyBytes {
		return nil, fmt.Errorf("%s %s: %d bytes, want at least %d (e.g. openssl rand -hex 32)", from, file, len(data), kubejobs.MinKeyBytes)
	}
	return data, nil
}
