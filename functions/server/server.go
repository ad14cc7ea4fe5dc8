package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"

	parquetfmt "github.com/sluice-project/sluice/format/parquet"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/memlimit"
	"github.com/sluice-project/sluice/wire"
)

// Config tunes a function replica. Zero values take the defaults.
type Config struct {
	// MaxBodyBytes caps an incoming event body (default 1 MiB; tasks are small JSON).
	MaxBodyBytes int64
	// MaxMemberBytes caps one tar member (default wds.DefaultMaxMemberBytes).
	MaxMemberBytes int64
	// MaxSampleBytes caps one tar sample's members together (default
	// wds.DefaultMaxSampleBytes), MaxSampleMembers their count (default
	// wds.DefaultMaxSampleMembers).
	MaxSampleBytes   int64
	MaxSampleMembers int
	// MaxPixels caps a decoded image (default the image package's, 64 MP).
	MaxPixels int
	// MemoryLimit is the replica's memory limit (default
	// memlimit.Default). Less the shard cache's memory tier, it sizes the
	// decode budget (decodeBudget): what the decoded images of all the
	// replica's shards may hold at once.
	MemoryLimit int64
	// VocabDir is the only directory a task's pipeline may read vocab
	// files from ("": none, builtin only): pipeline.Options.VocabDir.
	VocabDir string
	// Concurrency is how many shards are processed at once; a task beyond
	// it gets 429 (default 1, one shard per replica, as Knative's
	// containerConcurrency would be set).
	Concurrency int
	// FrameWriteTimeout bounds the sending of one frame of a shard's
	// response (default 5m): a client that stops reading for that long
	// counts as gone, so it cannot hold a processing slot forever. Negative
	// means no bound.
	FrameWriteTimeout time.Duration
	// HeartbeatInterval is how long a shard's stream may stay silent
	// before a heartbeat frame goes out (default
	// wire.ShardHeartbeatInterval; negative: none).
	HeartbeatInterval time.Duration
	// Cache keeps the raw bytes of shards read from S3 on local disk and
	// in memory; the zero value caches nothing. Parquet shards bypass it.
	Cache shardcache.Config
	// Parquet bounds what one Parquet shard may make the replica hold
	// (zero fields: format/parquet's defaults).
	Parquet parquetfmt.Limits
}

// Defaults.
const (
	DefaultMaxBodyBytes      = 1 << 20
	DefaultConcurrency       = 1
	DefaultFrameWriteTimeout = 5 * time.Minute
)

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxMemberBytes <= 0 {
		c.MaxMemberBytes = wds.DefaultMaxMemberBytes
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MemoryLimit <= 0 {
		c.MemoryLimit = memlimit.Default
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = wire.ShardHeartbeatInterval
	}
	if c.FrameWriteTimeout == 0 {
		c.FrameWriteTimeout = DefaultFrameWriteTimeout
	}
	return c
}

// Server processes shard tasks. Create it with New.
type Server struct {
	cfg   Config
	s3    *s3.Client
	cache *shardcache.Cache
	log   *slog.Logger
	m     *metrics

	pipelines *pipelineCache
	slots     chan struct{} // one token per shard being processed
	mu        sync.Mutex    // orders admission against Drain
	draining  bool
	inFlight  sync.WaitGroup
}

// New builds a server reading shards with s3c. A nil logger discards; a
// nil registerer skips metric registration.
func New(cfg Config, s3c *s3.Client, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if s3c == nil {
		return nil, errors.New("function server: an s3 client is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cache, err := shardcache.New(cfg.Cache, s3c, logger.With("component", "shard-cache"), reg)
	if err != nil {
		return nil, err
	}
	// One decode budget for all the replica's pipelines: its memory is one.
	opts := pipeline.Options{MaxPixels: cfg.MaxPixels, DecodeBudget: decodeBudget(cfg, logger), VocabDir: cfg.VocabDir,
		Tokenizers: pipeline.NewTokenizerCache()}
	return &Server{cfg: cfg, s3: s3c, cache: cache, log: logger, m: m,
		pipelines: &pipelineCache{opts: opts},
		slots:     make(chan struct{}, cfg.Concurrency)}, nil
}

// Handler serves POST / (a shard task CloudEvent, binary or structured
// mode), GET /healthz (liveness) and GET /readyz (503 while draining).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /{$}", s.serveTask)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.isDraining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	return mux
}

// Drain stops taking tasks (readyz and new tasks answer 503) and waits
// for the ones in flight to finish, or for ctx. Knative sends SIGTERM on
// scale-down; finishing the shards being streamed then saves their
// callers sending them again.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.inFlight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("draining function server: %w", ctx.Err())
	}
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// admit takes a processing slot, or says why not (503 draining, 429 busy).
func (s *Server) admit() (release func(), status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return nil, http.StatusServiceUnavailable
	}
	select {
	case s.slots <- struct{}{}:
	default:
		return nil, http.StatusTooManyRequests
	}
	s.inFlight.Add(1)
	return func() {
		<-s.slots
		s.inFlight.Done()
	}, 0
}

// rejectTask marks a 4xx that rejects the task itself as the function's
// verdict (wire.HeaderTaskRejected): the agent gives the task up.
func rejectTask(w http.ResponseWriter, status int) {
	if status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests {
		w.Header().Set(wire.HeaderTaskRejected, "true")
	}
}

func (s *Server) serveTask(w http.ResponseWriter, r *http.Request) {
	// The body first, then a slot: a client that sends its body slowly (or
	// never) holds a connection until the server's read timeout, not a
	// slot that a real task could have.
	task, status, err := s.readTask(w, r)
	if err != nil {
		s.log.Warn("rejecting shard task event", "status", status, "err", err)
		rejectTask(w, status)
		http.Error(w, err.Error(), status)
		return
	}
	release, status := s.admit()
	switch status {
	case http.StatusServiceUnavailable:
		s.m.rejected.WithLabelValues("draining").Inc()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "draining: send the task to another replica", status)
		return
	case http.StatusTooManyRequests:
		s.m.rejected.WithLabelValues("busy").Inc()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy: "+strconv.Itoa(s.cfg.Concurrency)+" shard(s) in flight", status)
		return
	}
	defer release()

	sink := &responseSink{w: w, rc: http.NewResponseController(w), timeout: s.cfg.FrameWriteTimeout}
	stop := sink.keepAlive(s.cfg.HeartbeatInterval)
	_, err = s.ProcessShard(r.Context(), task, sink)
	stop()
	switch {
	case err == nil:
	case !sink.started:
		// Nothing sent yet: the status says what went wrong.
		status := http.StatusInternalServerError
		switch {
		case errors.Is(err, ErrInvalidTask):
			status = http.StatusBadRequest
		case errors.Is(err, ErrShardNotFound):
			status = http.StatusNotFound
		}
		if r.Context().Err() == nil { // else no one is there to read it
			rejectTask(w, status)
			http.Error(w, err.Error(), status)
		}
	case sink.err == nil && r.Context().Err() == nil:
		// The 200 is out: the error is the stream's last frame.
		if err := sink.writeError(err); err != nil {
			s.log.Warn("sending shard error frame", "task", task.ID(), "err", err)
		}
	}
}

// Media types of a shard task request: a binary-mode event's data, and a
// structured-mode event.
const (
	mediaJSON       = "application/json"
	mediaCloudEvent = "application/cloudevents+json"
)

// readTask decodes and validates the task event of r.
func (s *Server) readTask(w http.ResponseWriter, r *http.Request) (wire.ShardTask, int, error) {
	var task wire.ShardTask
	unsupported := func(format string, args ...any) (wire.ShardTask, int, error) {
		s.m.rejected.WithLabelValues("unsupported_media_type").Inc()
		w.Header().Set("Accept-Post", mediaJSON+", "+mediaCloudEvent)
		return task, http.StatusUnsupportedMediaType, fmt.Errorf(format, args...)
	}
	if cehttp.IsHTTPBatch(r.Header) {
		s.m.rejected.WithLabelValues("bad_event").Inc()
		return task, http.StatusBadRequest, errors.New("batched events are not accepted: send one shard task per request")
	}
	ct := r.Header.Get("Content-Type")
	structured := mediaType(ct) == mediaCloudEvent
	if !structured && mediaType(ct) != mediaJSON {
		return unsupported("Content-Type %q: want %s (a binary-mode event) or %s (structured mode)", ct, mediaJSON, mediaCloudEvent)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.m.rejected.WithLabelValues("too_large").Inc()
			return task, http.StatusRequestEntityTooLarge, fmt.Errorf("event body over %d bytes", tooBig.Limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) { // the server's read timeout
			s.m.rejected.WithLabelValues("timeout").Inc()
			return task, http.StatusRequestTimeout, fmt.Errorf("reading event body: not sent within the read timeout: %w", err)
		}
		return task, http.StatusBadRequest, fmt.Errorf("reading event body: %w", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	bad := func(format string, args ...any) (wire.ShardTask, int, error) {
		s.m.rejected.WithLabelValues("bad_event").Inc()
		return task, http.StatusBadRequest, fmt.Errorf(format, args...)
	}
	ev, err := cehttp.NewEventFromHTTPRequest(r)
	if err != nil {
		return bad("decoding cloudevent: %v", err)
	}
	if err := ev.Validate(); err != nil {
		return bad("invalid cloudevent: %v", err)
	}
	// A structured event's data is JSON unless it says otherwise.
	if dct := ev.DataContentType(); structured && dct != "" && mediaType(dct) != mediaJSON {
		return unsupported("datacontenttype %q: want %s", dct, mediaJSON)
	}
	if ev.Type() != wire.EventTypeShardTask {
		return bad("event type %q: want %q", ev.Type(), wire.EventTypeShardTask)
	}
	if err := json.Unmarshal(ev.Data(), &task); err != nil {
		return bad("event data: want a JSON shard task: %v", err)
	}
	if err := task.Validate(); err != nil {
		return bad("%v", err)
	}
	return task, 0, nil
}

// mediaType is a Content-Type's media type, lowercased and without
// parameters ("application/json; charset=utf-8" is "application/json");
// "" when it does not parse.
func mediaType(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return ""
	}
	return mt
}
