package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/natsperm"
)

// resolve is a parse check that merges the connection settings (flags,
// SLUICE_* environment, config file) into *out; its error holds every
// problem, one per line, which parse prints each on its own.
func resolve(f *connect.Flags, out *connect.Config) func() error {
	return func() error {
		c, err := f.Resolve()
		*out = c
		return err
	}
}

// connectAs connects to NATS as the component of role: with the role's
// inbox prefix, the one reply subject space its least-privilege NATS user
// (deploy/knative/nats/nats.conf) may subscribe to.
func connectAs(ctx context.Context, c connect.Config, role natsperm.Role, name string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	c.NATS.InboxPrefix = role.InboxPrefix
	return c.ConnectNATS(ctx, name, logger)
}

// agentAs is connectAs for an agent: a NATS server that does not answer
// is retried for agentConnectWindow (connect.Config.ConnectNATSWithin), as
// an agent is started when a trainer node is replaced, often just after
// a node (and maybe the NATS server on it) was lost. A refused connection
// (a wrong URL) still fails at once.
func agentAs(ctx context.Context, c connect.Config, role natsperm.Role, name string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	c.NATS.InboxPrefix = role.InboxPrefix
	return c.ConnectNATSWithin(ctx, agentConnectWindow, name, logger)
}

// agentConnectWindow outlasts a lost node's NATS endpoint: the node
// controller's grace period (40 s by default) and the endpoint update.
const agentConnectWindow = time.Minute

// serveAs is connectAs for the controller, a cluster service deployed
// beside NATS: it waits for a NATS server that is not reachable yet
// (connect.Config.ConnectNATSWaiting). The CLI fails at once with one
// clear error instead: a user is waiting on it.
func serveAs(ctx context.Context, c connect.Config, role natsperm.Role, name string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	c.NATS.InboxPrefix = role.InboxPrefix
	return c.ConnectNATSWaiting(ctx, name, logger)
}
