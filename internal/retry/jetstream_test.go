package retry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/internal/retry"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
)

func TestTransient(t *testing.T) {
	api := func(code, errCode int) error {
		return fmt.Errorf("creating stream X: %w", &jetstream.APIError{Code: code, ErrorCode: jetstream.ErrorCode(errCode)})
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("creating stream X: %w", context.DeadlineExceeded), true},
		{nats.ErrTimeout, true},
		{nats.ErrNoResponders, true},
		{fmt.Errorf("queueing task (msg id a/e0/s1@x): %w", jetstream.ErrNoStreamResponse), true}, // a stream electing its leader
		{jetstream.ErrJetStreamNotEnabled, true},
		{api(503, 10008), true}, // no meta leader
		{api(400, 10005), true}, // too few peers for R3, yet
		{api(503, 10999), true},
		{api(400, 10058), false}, // stream name in use, another configuration
		{jetstream.ErrJetStreamNotEnabledForAccount, false},
		{context.Canceled, false},
		{errors.New("boom"), false},
	} {
		if got := retry.Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestJetStreamWaitsForAFormingCluster: one node of three is up, so the
// cluster has no meta leader and creating the streams times out, as it
// did for two controllers and a submit started with a fresh 3-node
// cluster. The creation retries, logging each time, until a second node
// gives the cluster a leader; then it succeeds.
func TestJetStreamWaitsForAFormingCluster(t *testing.T) {
	cluster := testenv.NewNATSCluster(t, 3)
	cluster.Start(0)
	js := cluster.JetStream(0)
	logger, logs := logbuf.Logger(slog.LevelWarn)
	done := make(chan error, 1)
	go func() {
		done <- retry.JetStream(context.Background(), logger, js.Conn(), "creating streams and buckets", func(ctx context.Context) error {
			return streams.Ensure(ctx, js, streams.Options{})
		})
	}()
	testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(logs.String(), "creating streams and buckets: not ready yet; retrying") {
			return errors.New("no retry logged yet")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("returned %v with no meta leader", err)
	default:
	}
	t.Logf("before the second node: %s", strings.SplitN(logs.String(), "\n", 2)[0])
	cluster.Start(1)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("once the cluster has a leader: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("streams not created within 60s of the cluster having a quorum")
	}
	if _, err := js.Stream(context.Background(), "SLUICE_TASKS"); err != nil {
		t.Errorf("task stream: %v", err)
	}
}

// TestJetStreamDoesNotRetryAPermissionsViolation: the server drops a
// request the user may not publish, so the client only times out; that is
// not retried, and the error names the violation.
func TestJetStreamDoesNotRetryAPermissionsViolation(t *testing.T) {
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "u", Password: "p", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.INFO"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}}}}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("u", "p"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	logger, logs := logbuf.Logger(slog.LevelWarn)
	calls := 0
	err = retry.JetStream(context.Background(), logger, nc, "creating streams", func(ctx context.Context) error {
		calls++
		return streams.Ensure(ctx, js, streams.Options{})
	})
	if err == nil || calls != 1 || !strings.Contains(strings.ToLower(err.Error()), "permissions violation for publish") {
		t.Errorf("after %d calls: %v; want one call and an error naming the violation", calls, err)
	}
	if strings.Contains(logs.String(), "retrying") {
		t.Errorf("retried:\n%s", logs)
	}
}
