package embedded

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/sluice-project/sluice/internal/natsperm"
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
	// Auth, when set, runs the server with the shipped authorization
	// (natsperm.Render, deploy/knative/nats/nats.conf): a user per static
	// role with its permissions, and the auth callout through which the
	// controllers let each job's agents in. Nil: no authentication.
	Auth *NATSAuth
}

// NATSAuth are the credentials of a server with the shipped authorization.
type NATSAuth struct {
	// Passwords of the static users, by role name (natsperm.Roles:
	// controller, cli, admin).
	Passwords map[string]string
	// CalloutIssuer is the account key pair the controllers sign the
	// callout's answers with; the server trusts its public key.
	CalloutIssuer nkeys.KeyPair
}

// NewNATSAuth draws random passwords for every static role and a new
// callout issuer.
func NewNATSAuth() (*NATSAuth, error) {
	kp, err := nkeys.CreateAccount()
	if err != nil {
		return nil, fmt.Errorf("making the callout issuer: %w", err)
	}
	a := &NATSAuth{Passwords: map[string]string{}, CalloutIssuer: kp}
	for _, r := range natsperm.Roles() {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		a.Passwords[r.Name] = hex.EncodeToString(b)
	}
	return a, nil
}

// serverAuth is what natsperm.Render configures, as server options.
func (a *NATSAuth) serverAuth(o *server.Options) error {
	pub, err := a.CalloutIssuer.PublicKey()
	if err != nil {
		return err
	}
	ac := &server.AuthCallout{Issuer: pub, Account: "$G"}
	for _, r := range natsperm.Roles() {
		pw, ok := a.Passwords[r.Name]
		if !ok {
			return fmt.Errorf("no password for the %s role", r.Name)
		}
		o.Users = append(o.Users, &server.User{Username: r.User(), Password: pw, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: r.Publish},
			Subscribe: &server.SubjectPermission{Allow: r.Subscribe},
		}})
		ac.AuthUsers = append(ac.AuthUsers, r.User())
	}
	o.AuthCallout = ac
	o.AuthTimeout = natsperm.CalloutWait.Seconds()
	return nil
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
	so := &server.Options{
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		MaxPayload: o.MaxPayload,
		NoLog:      true,
		NoSigs:     true,
	}
	if o.Auth != nil {
		if err := o.Auth.serverAuth(so); err != nil {
			n.cleanup()
			return nil, fmt.Errorf("configuring nats server: %w", err)
		}
	}
	s, err := server.NewServer(so)
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
