//go:build !linux

package fdhttp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"
)

// Options configure a Server.
type Options struct {
	ReadTimeout, IdleTimeout time.Duration
	Logger                   *slog.Logger
}

// Server needs Linux (memfds); elsewhere it serves nothing.
type Server struct{}

var errLinux = errors.New("serving batches on a unix socket needs Linux (memfd)")

// ErrServerClosed is Serve's error after Shutdown.
var ErrServerClosed = errors.New("fdhttp: server closed")

func New(http.Handler, Options) *Server                     { return &Server{} }
func Listen(string, os.FileMode) (*net.UnixListener, error) { return nil, errLinux }
func (*Server) Serve(*net.UnixListener) error               { return errLinux }
func (*Server) Shutdown(context.Context) error              { return nil }
