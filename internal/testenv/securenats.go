package testenv

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/kvpoll"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/wire"
)

// SecureNATS is a JetStream server with the shipped authorization: a
// user per static role, and the auth callout through which a controller
// started with Auth.CalloutIssuer lets each job's agents in.
type SecureNATS struct {
	*embedded.NATS
	Auth *embedded.NATSAuth
}

// NewSecureNATS starts one with its store in t.TempDir.
func NewSecureNATS(t testing.TB) *SecureNATS {
	t.Helper()
	auth, err := embedded.NewNATSAuth()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: t.TempDir(), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return &SecureNATS{NATS: srv, Auth: auth}
}

// Connect connects as r's user, with r's inbox prefix, as the commands do.
func (s *SecureNATS) Connect(t testing.TB, r natsperm.Role) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.URL(), nats.UserInfo(r.User(), s.Auth.Passwords[r.Name]), nats.CustomInboxPrefix(r.InboxPrefix), nats.Name("test-"+r.Name))
	if err != nil {
		t.Fatalf("connecting as %s: %v", r.User(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// ConnectAgent connects as `sluice agent --job job` does with the job's
// team key: as the job, let in by a controller answering the callout,
// following the job's record and plan by reading them (kvpoll).
func (s *SecureNATS) ConnectAgent(t testing.TB, job string, key []byte) (*nats.Conn, jetstream.JetStream, error) {
	t.Helper()
	nc, err := nats.Connect(s.URL(), nats.UserInfo(wire.AgentNATSUser(job), wire.AgentNATSPassword(key)),
		nats.CustomInboxPrefix(natsperm.AgentFor(job).InboxPrefix), nats.Name("test-agent-"+job), nats.IgnoreAuthErrorAbort())
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	return nc, kvpoll.JetStream(js, 0), nil
}
