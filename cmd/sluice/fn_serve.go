package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/functions/server"
	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/httpserve"
	"github.com/sluice-project/sluice/internal/ready"
	"github.com/sluice-project/sluice/wire"
)

func runFnServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fn serve", stderr)
	listen := fs.String("listen", "", "address to serve on (default :$PORT as Knative sets it, else 127.0.0.1:8080)")
	connFlags := connect.Register(fs, connect.PartS3)
	concurrency := fs.Int("concurrency", 1, "shards processed at once; more get 429")
	cpus := fs.Int("cpus", 0, "GOMAXPROCS for this replica; 0 keeps Go's default")
	maxPixels := fs.Int("max-pixels", 64_000_000, "largest image accepted, in pixels (decompression-bomb guard)")
	maxBody := fs.Int("max-body-bytes", 1<<20, "largest CloudEvent body accepted")
	drain := fs.Duration("drain-timeout", 5*time.Minute, "how long SIGTERM waits for in-flight shards")
	frameTimeout := fs.Duration("frame-write-timeout", server.DefaultFrameWriteTimeout,
		"how long a client may leave one frame of a shard's output unread before it counts as gone (its shard stops)")
	logLevel := fs.String("log-level", "info", "log level: "+fmt.Sprint(logLevels))
	cacheFlags := registerCacheFlags(fs, "")
	tokenFlag := bearer.Function.Register(fs, "the token every task must carry (Authorization: Bearer), required when --listen is beyond loopback")
	insecure := bearer.RegisterInsecure(fs)
	memFlag := registerMemoryLimitFlag(fs)
	vocabDir := fs.String("vocab-dir", "", "the only directory WordPiece vocab files are read from (a spec names a file within it); empty: builtin only")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice fn serve [flags]\n\nServes the pipelines %v as a CloudEvents function:\n"+
			"POST / takes a %q event (a shard task) and replies with the shard's output as a\n"+
			"frame stream (%s): its chunks as they are ready, then the shard's end.\n"+
			"GET /healthz, /readyz, /metrics. A replica reads shards from S3 and needs nothing else.\n"+
			"With a token (%s), POST / requires it; the GETs stay open.\n\n",
			pipeline.Names(), wire.EventTypeShardTask, wire.ShardStreamMediaType, bearer.Function.Env)
		fs.PrintDefaults()
	}
	var conn connect.Config
	var cache shardcache.Config
	var token bearer.Token
	var memLimit int64
	var memSource string
	if err := parse(fs, args,
		loadToken(tokenFlag, &token),
		intRange("concurrency", concurrency, 1, 256),
		intRange("cpus", cpus, 0, 1024),
		intRange("max-pixels", maxPixels, 1, 1<<30),
		intRange("max-body-bytes", maxBody, 1024, 64<<20),
		durationRange("drain-timeout", drain, 0, time.Hour),
		durationRange("frame-write-timeout", frameTimeout, time.Second, 24*time.Hour),
		oneOf("log-level", logLevel, logLevels...),
		cacheFlags.resolve(&cache),
		memFlag.resolve(&memLimit, &memSource),
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

	// Refuse an open listener beyond loopback before anything else.
	ln, auth, err := listenAuthed(*listen, bearer.Function, token, *insecure)
	if err != nil {
		return err
	}
	defer ln.Close()

	// Check S3 before serving: a replica that cannot read it would report
	// ready and then fail every task.
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
		MaxBodyBytes:      int64(*maxBody),
		MaxPixels:         *maxPixels,
		MemoryLimit:       memLimit,
		VocabDir:          *vocabDir,
		Concurrency:       *concurrency,
		FrameWriteTimeout: *frameTimeout,
		Cache:             cache,
	}, s3client, logger, reg)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", srv.Handler())
	hs := httpserve.New(mux, httpserve.Options{Token: token, Source: bearer.Function, Logger: logger})
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	// The local actuator reads the endpoint from this line, printed once
	// S3 answered and the server listens.
	_ = ready.Announce(stdout, "http://"+ln.Addr().String())
	logger.Info("serving", "addr", ln.Addr().String(), "pipelines", pipeline.Names(), "auth", auth,
		"memory_limit", bytesize.Format(memLimit), "memory_limit_from", memSource)

	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	// Knative and the local actuator stop a replica with SIGTERM: finish the
	// shards being streamed (their callers would otherwise send them again
	// and redo them), then close.
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
