package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-project/sluice/autoscale/local"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/functions/server"
	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/connect"
)

func runFnServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fn serve", stderr)
	listen := fs.String("listen", "", "address to serve on (default :$PORT as Knative sets it, else 127.0.0.1:8080)")
	connFlags := connect.Register(fs, connect.PartNATS|connect.PartS3)
	concurrency := fs.Int("concurrency", 1, "shards processed at once; more get 429")
	cpus := fs.Int("cpus", 0, "GOMAXPROCS for this replica; 0 keeps Go's default")
	maxPixels := fs.Int("max-pixels", 64_000_000, "largest image accepted, in pixels (decompression-bomb guard)")
	maxBody := fs.Int("max-body-bytes", 1<<20, "largest CloudEvent body accepted")
	drain := fs.Duration("drain-timeout", 5*time.Minute, "how long SIGTERM waits for in-flight shards")
	logLevel := fs.String("log-level", "info", "log level: "+fmt.Sprint(logLevels))
	cacheFlags := registerCacheFlags(fs, "")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice fn serve [flags]\n\nServes the pipelines %v as a CloudEvents function:\n"+
			"POST / takes a %q event and replies with the shard's result; GET /healthz, /readyz, /metrics.\n\n", pipeline.Names(), "dev.sluice.shard.task.v1")
		fs.PrintDefaults()
	}
	var conn connect.Config
	var cache shardcache.Config
	if err := parse(fs, args,
		intRange("concurrency", concurrency, 1, 256),
		intRange("cpus", cpus, 0, 1024),
		intRange("max-pixels", maxPixels, 1, 1<<30),
		intRange("max-body-bytes", maxBody, 1024, 64<<20),
		durationRange("drain-timeout", drain, 0, time.Hour),
		oneOf("log-level", logLevel, logLevels...),
		cacheFlags.resolve(&cache),
		resolve(connFlags, &conn),
	); err != nil {
		return err
	}
	if *cpus > 0 {
		runtime.GOMAXPROCS(*cpus)
	}
	logger := newLogger(stderr, *logLevel).With("component", "function")
	if *listen == "" {
		*listen = "127.0.0.1:8080"
		if p := os.Getenv("PORT"); p != "" {
			*listen = ":" + p
		}
	}

	// Check both servers before serving: a replica that cannot reach them
	// would report ready and then fail every task.
	nc, js, err := conn.ConnectNATS(ctx, "sluice-function", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s3client, err := conn.S3Client(ctx, reg)
	if err != nil {
		return err
	}
	if err := connect.CheckS3(ctx, s3client, logger); err != nil {
		return fmt.Errorf("checking s3: %w", err)
	}
	srv, err := server.New(server.Config{
		MaxBodyBytes: int64(*maxBody),
		MaxPixels:    *maxPixels,
		Concurrency:  *concurrency,
		Cache:        cache,
	}, js, s3client, logger, reg)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	tasks := srv.Handler()
	// Not ready while NATS is away: results could not be published.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !nc.IsConnected() {
			http.Error(w, "nats disconnected", http.StatusServiceUnavailable)
			return
		}
		tasks.ServeHTTP(w, r)
	})
	mux.Handle("/", tasks)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *listen, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	// The local actuator reads the endpoint from this line, printed once
	// NATS and S3 answered and the server listens.
	fmt.Fprintf(stdout, "%shttp://%s\n", local.ReadyPrefix, ln.Addr())
	logger.Info("serving", "addr", ln.Addr().String(), "pipelines", pipeline.Names())

	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	// Knative and the local actuator stop a replica with SIGTERM: finish the
	// shards in flight (their tasks would otherwise be redelivered and done
	// twice), then close.
	logger.Info("draining")
	dctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := srv.Drain(dctx); err != nil {
		logger.Warn("drain incomplete", "err", err)
	}
	if err := hs.Shutdown(dctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}
