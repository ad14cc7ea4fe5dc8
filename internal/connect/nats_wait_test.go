package connect

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-project/sluice/internal/logbuf"
)

// TestConnectNATSWaitingWaitsForTheServer starts the server only after a
// first attempt failed: the connect logs a retry and then succeeds, where
// ConnectNATS fails at once.
func TestConnectNATSWaitingWaitsForTheServer(t *testing.T) {
	port := unusedPort(t)
	c := Config{NATS: NATS{URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}}}
	if _, _, err := c.ConnectNATS(context.Background(), "t", nil); !errors.Is(err, ErrNATSUnreachable) {
		t.Fatalf("ConnectNATS without a server: %v, want ErrNATSUnreachable", err)
	}
	logger, logs := logbuf.Logger(0)
	go func() {
		time.Sleep(500 * time.Millisecond)
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
		if err != nil {
			t.Error(err)
			return
		}
		s.Start()
		t.Cleanup(s.Shutdown)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, _, err := c.ConnectNATSWaiting(ctx, "t", logger)
	if err != nil {
		t.Fatalf("ConnectNATSWaiting: %v", err)
	}
	nc.Close()
	if !strings.Contains(logs.String(), "connecting to nats: not ready yet; retrying") {
		t.Errorf("no retry logged: %s", logs.String())
	}
}

// TestConnectNATSWithinRetriesASilentServer: a server that accepts the
// connection and never answers (a lost node's, behind a ClusterIP) is
// retried; once a real one listens there, the connect succeeds.
func TestConnectNATSWithinRetriesASilentServer(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	port := silent.Addr().(*net.TCPAddr).Port
	c := Config{NATS: NATS{URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}}}
	logger, logs := logbuf.Logger(0)
	done := make(chan error, 1)
	go func() {
		nc, _, err := c.ConnectNATSWithin(context.Background(), time.Minute, "t", logger)
		if err == nil {
			nc.Close()
		}
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "connecting to nats: not ready yet; retrying") {
		if time.Now().After(deadline) {
			t.Fatalf("no retry of the silent server logged: %s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	silent.Close()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if err := <-done; err != nil {
		t.Fatalf("ConnectNATSWithin: %v", err)
	}
}

// TestConnectNATSWithinRefusedAtOnce: where nothing listens (a wrong
// URL), ConnectNATSWithin fails at once, as ConnectNATS does.
func TestConnectNATSWithinRefusedAtOnce(t *testing.T) {
	c := Config{NATS: NATS{URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", unusedPort(t))}}}
	logger, logs := logbuf.Logger(0)
	_, _, err := c.ConnectNATSWithin(context.Background(), time.Minute, "t", logger)
	if !errors.Is(err, ErrNATSUnreachable) {
		t.Fatalf("ConnectNATSWithin without a server: %v, want ErrNATSUnreachable", err)
	}
	if strings.Contains(logs.String(), "retrying") {
		t.Errorf("a refused connection was retried: %s", logs.String())
	}
}

// unusedPort is a loopback port nothing listens on (just now).
func unusedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
