package local

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/connect"
)

// TestReplicaCommandLineHoldsNoSecret starts a replica as a controller
// does (FnServe) with every secret a configuration can hold, and reads
// its command line where `ps` does, from /proc: no secret is on it.
func TestReplicaCommandLineHoldsNoSecret(t *testing.T) {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("no /proc")
	}
	conn := connect.Default()
	conn.NATS.URLs = []string{"nats://alice:secret-in-nats-url@127.0.0.1:4222"}
	conn.NATS.User, conn.NATS.Password, conn.NATS.Token = "alice", "secret-nats-password", "secret-nats-token"
	// Credentials in an S3 endpoint are refused when resolved, but a
	// Config built in code can still hold them.
	conn.S3.Endpoint, conn.S3.PathStyle = "http://key:secret-in-s3-url@127.0.0.1:9000", true
	opts := FnServe([]string{os.Args[0], "-test.run=^$"}, 1, 1, conn)
	opts.Env = append(opts.Env, "SLUICE_TEST_REPLICA=1", "SLUICE_TEST_REPLICA_MODE=")
	a := newTestActuator(t, "", opts)
	a.opts.Command = opts.Command // newTestActuator sets the bare test binary
	if err := a.Scale(t.Context(), "j", 1); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, "j", 1)
	pids := a.pids()
	if len(pids) != 1 {
		t.Fatalf("replicas %v, want 1", pids)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pids[0]))
	if err != nil {
		t.Fatal(err)
	}
	argv := string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
	if !strings.Contains(argv, "--listen") {
		t.Fatalf("replica's command line %q is not FnServe's", argv)
	}
	if strings.Contains(argv, "secret") {
		t.Errorf("replica's command line holds a secret: %q", argv)
	}
}
