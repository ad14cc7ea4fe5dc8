package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/functions/server"
	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/httpserve"
	"github.com/sluice-project/sluice/wire"
)

func runFnServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	start := time.Now() // a cold start's share: the "serving" line says it
	f := newFnServeFlags(stderr)
	if err := f.parse(args); err != nil {
		return err
	}
	if *f.cpus > 0 {
		runtime.GOMAXPROCS(*f.cpus)
	}
	logger := newLogger(stderr, *f.logLevel).With("component", "function")

	// Refuse an open listener beyond loopback before anything else.
	ln, auth, err := listenAuthed(f.listenAddr(), bearer.Function, f.token, *f.insecure)
	if err != nil {
		return err
	}
	defer ln.Close()

	ops := newOpsServer()
	srv, err := f.newServer(ctx, logger, ops.Registry)
	if err != nil {
		return err
	}
	ops.Mux.Handle("/", srv.Handler()) // with its own probes: it drains
	hs, served := ops.serve(ln, httpserve.Options{Token: f.token, Source: bearer.Function, Logger: logger})
	// The local actuator reads the endpoint from this line, printed once
	// S3 answered and the server listens.
	ops.announce(stdout)
	logger.Info("serving", "addr", ops.addr(), "startup", time.Since(start).Round(time.Millisecond), "pipelines", pipeline.Names(), "auth", auth,
		"memory_limit", bytesize.Format(f.memLimit), "memory_limit_from", f.memSource)

	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	// Knative and the local actuator stop a replica with SIGTERM: finish the
	// shards being streamed (their callers would otherwise send them again
	// and redo them), then close.
	logger.Info("draining")
	dctx, cancel := context.WithTimeout(context.Background(), *f.drain)
	defer cancel()
	if err := srv.Drain(dctx); err != nil {
		logger.Warn("drain incomplete", "err", err)
	}
	if err := hs.Shutdown(dctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}

// fnServeFlags are the flags of `sluice fn serve`, and what parse resolved
// from them.
type fnServeFlags struct {
	fs                          *flag.FlagSet
	listen, logLevel, vocabDir  *string
	connFlags                   *connect.Flags
	concurrency, cpus           *int
	maxPixels, maxBody          *int
	drain, frameTimeout, s3Wait *time.Duration
	cacheFlags                  cacheFlags
	tokenFlag                   *bearer.Flag
	insecure                    *bool
	memFlag                     memoryLimitFlag

	conn      connect.Config
	cache     shardcache.Config
	token     bearer.Token
	memLimit  int64
	memSource string
}

func newFnServeFlags(stderr io.Writer) *fnServeFlags {
	fs := newFlagSet("fn serve", stderr)
	f := &fnServeFlags{fs: fs}
	f.listen = fs.String("listen", "", "address to serve on (default :$PORT as Knative sets it, else 127.0.0.1:8080)")
	f.connFlags = connect.Register(fs, connect.PartS3)
	f.concurrency = fs.Int("concurrency", 1, "shards processed at once; more get 429")
	f.cpus = fs.Int("cpus", 0, "GOMAXPROCS for this replica; 0 keeps Go's default")
	f.maxPixels = fs.Int("max-pixels", 64_000_000, "largest image accepted, in pixels (decompression-bomb guard)")
	f.maxBody = fs.Int("max-body-bytes", 1<<20, "largest CloudEvent body accepted")
	f.drain = fs.Duration("drain-timeout", 5*time.Minute, "how long SIGTERM waits for in-flight shards")
	f.s3Wait = fs.Duration("s3-start-wait", 20*time.Second, "how long a starting replica waits for S3 while it is unreachable (a Service whose pods are still starting) "+
		"before it exits; keep it under the liveness probe's failure time")
	f.frameTimeout = fs.Duration("frame-write-timeout", server.DefaultFrameWriteTimeout,
		"how long a client may leave one frame of a shard's output unread before it counts as gone (its shard stops)")
	f.logLevel = fs.String("log-level", "info", "log level: "+fmt.Sprint(logLevels))
	f.cacheFlags = registerCacheFlags(fs, "")
	f.tokenFlag = bearer.Function.Register(fs, "the token every task must carry (Authorization: Bearer), required when --listen is beyond loopback")
	f.insecure = bearer.RegisterInsecure(fs)
	f.memFlag = registerMemoryLimitFlag(fs)
	f.vocabDir = fs.String("vocab-dir", "", "the only directory WordPiece vocab and BPE tokenizer files are read from (a spec names a file within it); empty: builtin only")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice fn serve [flags]\n\nServes the pipelines %v as a CloudEvents function:\n"+
			"POST / takes a %q event (a shard task) and replies with the shard's output as a\n"+
			"frame stream (%s): its chunks as they are ready, then the shard's end.\n"+
			"GET /healthz, /readyz, /metrics. A replica reads shards from S3 and needs nothing else.\n"+
			"With a token (%s), POST / requires it; the GETs stay open.\n\n",
			pipeline.Names(), wire.EventTypeShardTask, wire.ShardStreamMediaType, bearer.Function.Env)
		fs.PrintDefaults()
	}
	return f
}

func (f *fnServeFlags) parse(args []string) error {
	return parse(f.fs, args,
		loadToken(f.tokenFlag, &f.token),
		intRange("concurrency", f.concurrency, 1, 256),
		intRange("cpus", f.cpus, 0, 1024),
		intRange("max-pixels", f.maxPixels, 1, 1<<30),
		intRange("max-body-bytes", f.maxBody, 1024, 64<<20),
		durationRange("drain-timeout", f.drain, 0, time.Hour),
		durationRange("s3-start-wait", f.s3Wait, 0, 10*time.Minute),
		durationRange("frame-write-timeout", f.frameTimeout, time.Second, 24*time.Hour),
		oneOf("log-level", f.logLevel, logLevels...),
		f.cacheFlags.resolve(&f.cache),
		f.memFlag.resolve(&f.memLimit, &f.memSource),
		resolve(f.connFlags, &f.conn),
	)
}

// listenAddr is --listen, or :$PORT as Knative sets it, else 127.0.0.1:8080.
func (f *fnServeFlags) listenAddr() string {
	if *f.listen != "" {
		return *f.listen
	}
	if p := os.Getenv("PORT"); p != "" {
		return ":" + p
	}
	return "127.0.0.1:8080"
}

// newServer checks S3, then builds the function server. A replica that
// cannot read S3 would report ready and then fail every task.
func (f *fnServeFlags) newServer(ctx context.Context, logger *slog.Logger, reg prometheus.Registerer) (*server.Server, error) {
	s3client, err := f.conn.S3Client(ctx, reg)
	if err != nil {
		return nil, err
	}
	if err := connect.WaitS3(ctx, s3client, logger, *f.s3Wait); err != nil {
		return nil, fmt.Errorf("checking s3: %w", err)
	}
	return server.New(server.Config{
		MaxBodyBytes:      int64(*f.maxBody),
		MaxPixels:         *f.maxPixels,
		MemoryLimit:       f.memLimit,
		VocabDir:          *f.vocabDir,
		Concurrency:       *f.concurrency,
		FrameWriteTimeout: *f.frameTimeout,
		Cache:             f.cache,
	}, s3client, logger, reg)
}
