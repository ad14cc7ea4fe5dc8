package httpserve

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/sluice-project/sluice/internal/bearer"
)

// Defaults of Options.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	// OpsWriteTimeout is the WriteTimeout of an endpoint of probes and
	// metrics alone, which answers at once.
	OpsWriteTimeout = 30 * time.Second
	// MaxHeaderBytes bounds a request's headers (net/http's default is
	// 1 MiB; Sluice's requests carry a few hundred bytes).
	MaxHeaderBytes = 64 << 10
)

// Public are the paths served to GET and HEAD without the token.
var Public = []string{"/healthz", "/readyz", "/metrics"}

// Options configure a server. Zero durations take the defaults.
type Options struct {
	// Token, when set, is required of every request but GET and HEAD of
	// Public; Source names where it comes from, for the 401's message.
	Token  bearer.Token
	Source bearer.Source

	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration // the headers and the body
	IdleTimeout       time.Duration
	// WriteTimeout bounds a whole response; 0 none (see the package doc).
	WriteTimeout time.Duration

	// Logger takes refused requests (debug) and net/http's own errors
	// (warn); nil discards.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// New is the server for h, as the package doc says.
func New(h http.Handler, o Options) *http.Server {
	o = o.withDefaults()
	return &http.Server{
		Handler:           bearer.Require(o.Token, o.Source, h, o.Logger, Public...),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		IdleTimeout:       o.IdleTimeout,
		WriteTimeout:      o.WriteTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
}
