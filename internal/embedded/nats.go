package embedded

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSOptions configures the embedded NATS server.
type NATSOptions struct {
	// StoreDir is the JetStream file store; a temporary directory when empty,
	// removed on Shutdown.
	StoreDir string
	// Port to listen on at 127.0.0.1; 0 picks a free one.
	Port int
	// MaxPayload caps a message; default 8 MiB, which output chunks stay under.
	MaxPayload int32
}

// NATS is a running embedded server.
type NATS struct {
	Server  *server.Server
	tempDir string
}

// StartNATS starts a JetStream-enabled server listening on loopback TCP, so
// that function replicas in child processes can reach it too.
func StartNATS(o NATSOptions) (*NATS, error) {
	n := &NATS{}
	if o.StoreDir == "" {
		d, err := os.MkdirTemp("", "sluice-nats-")
		if err != nil {
			return nil, fmt.Errorf("creating jetstream store: %w", err)
		}
		o.StoreDir, n.tempDir = d, d
	}
	port := o.Port
	if port == 0 {
		port = -1 // nats-server's "random port"
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = 8 << 20
	}
	s, err := server.NewServer(&server.Options{
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		MaxPayload: o.MaxPayload,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		n.cleanup()
		return nil, fmt.Errorf("configuring nats server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		n.cleanup()
		return nil, fmt.Errorf("nats server not ready after 10s (store %s)", o.StoreDir)
	}
	n.Server = s
	return n, nil
}

// URL is the nats:// URL clients connect to.
func (n *NATS) URL() string { return n.Server.ClientURL() }

// Shutdown stops the server and removes a temporary store.
func (n *NATS) Shutdown() {
	n.Server.Shutdown()
	n.Server.WaitForShutdown()
	n.cleanup()
}

func (n *NATS) cleanup() {
	if n.tempDir != "" {
		os.RemoveAll(n.tempDir)
	}
}
