package testenv

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ConfiguredNATS is a nats-server in-process started from a configuration
// file, with the server's permissions violations recorded.
type ConfiguredNATS struct {
	*server.Server
	log *violationLog
}

// NATSFromConfig starts a nats-server from the configuration file at path
// (its users, permissions, limits), listening on 127.0.0.1 at a free port
// with its JetStream store in t.TempDir and no monitoring port, whatever
// the file says about those. Variables the file reads ($NAME) come from
// the environment: set them (t.Setenv) first.
func NATSFromConfig(t testing.TB, path string) *ConfiguredNATS {
	t.Helper()
	o, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses %s: %v", path, err)
	}
	o.Host, o.Port, o.HTTPPort, o.HTTPHost = "127.0.0.1", -1, 0, ""
	o.StoreDir, o.NoSigs = t.TempDir(), true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	l := &violationLog{}
	s.SetLoggerV2(l, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return &ConfiguredNATS{Server: s, log: l}
}

// Violations are the permissions violations the server logged since the
// last call, each naming the connection and the subject.
func (n *ConfiguredNATS) Violations() []string { return n.log.take() }

// violationLog is a server.Logger keeping the permissions violations.
type violationLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *violationLog) Errorf(format string, v ...any) {
	if line := fmt.Sprintf(format, v...); strings.Contains(line, "Violation") {
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
	}
}

func (l *violationLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

func (l *violationLog) Noticef(string, ...any) {}
func (l *violationLog) Warnf(string, ...any)   {}
func (l *violationLog) Fatalf(string, ...any)  {}
func (l *violationLog) Debugf(string, ...any)  {}
func (l *violationLog) Tracef(string, ...any)  {}
