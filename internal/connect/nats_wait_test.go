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

// TestConnectNATSWithinGivesUp: with no server, ConnectNATSWithin retries
// for its window only, then fails with the error ConnectNATS gives.
func TestConnectNATSWithinGivesUp(t *testing.T) {
	port := unusedPort(t)
	c := Config{NATS: NATS{URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}}}
	logger, logs := logbuf.Logger(0)
	start := time.Now()
	_, _, err := c.ConnectNATSWithin(context.Background(), 2*time.Second, "t", logger)
	if !errors.Is(err, ErrNATSUnreachable) {
		t.Fatalf("ConnectNATSWithin without a server: %v, want ErrNATSUnreachable", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("gave up after %v, past its 2s window", took)
	}
	if !strings.Contains(logs.String(), "connecting to nats: not ready yet; retrying") {
		t.Errorf("no retry logged: %s", logs.String())
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
