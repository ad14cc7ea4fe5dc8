package connect

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/internal/testpki"
)

// startNATS runs a real nats-server in-process on loopback, configured by
// edit, and returns it.
func startNATS(t *testing.T, edit func(*server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	if edit != nil {
		edit(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func natsConfig(url string, edit func(*NATS)) Config {
	c := Default()
	c.NATS.URLs = []string{url}
	if edit != nil {
		edit(&c.NATS)
	}
	return c
}

// connectOK connects with c, publishes through JetStream's account info
// (ConnectNATS checks it) and closes.
func connectOK(t *testing.T, c Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, _, err := c.ConnectNATS(ctx, "test", nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	nc.Close()
}

func connectErr(t *testing.T, c Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, _, err := c.ConnectNATS(ctx, "test", nil)
	if err == nil {
		nc.Close()
		t.Fatal("connected; want an error")
	}
	return err
}

func TestConnectNATSUserPassword(t *testing.T) {
	s := startNATS(t, func(o *server.Options) { o.Username, o.Password = "bob", "s3cret" })
	connectOK(t, natsConfig(s.ClientURL(), func(n *NATS) { n.User, n.Password = "bob", "s3cret" }))

	err := connectErr(t, natsConfig(s.ClientURL(), func(n *NATS) { n.User, n.Password = "bob", "wrong" }))
	if !errors.Is(err, ErrNATSAuthorization) || !strings.Contains(err.Error(), `authorization failed for user "bob"`) || strings.Contains(err.Error(), "wrong") {
		t.Errorf("wrong password: %v; want an authorization error naming the user, not the password", err)
	}
	err = connectErr(t, natsConfig(s.ClientURL(), nil))
	if !errors.Is(err, ErrNATSAuthorization) || !strings.Contains(err.Error(), "no credentials given") {
		t.Errorf("no credentials: %v", err)
	}
}

func TestConnectNATSToken(t *testing.T) {
	s := startNATS(t, func(o *server.Options) { o.Authorization = "tok-123" })
	connectOK(t, natsConfig(s.ClientURL(), func(n *NATS) { n.Token = "tok-123" }))
	err := connectErr(t, natsConfig(s.ClientURL(), func(n *NATS) { n.Token = "tok-456" }))
	if !errors.Is(err, ErrNATSAuthorization) || !strings.Contains(err.Error(), "authorization failed for the token") || strings.Contains(err.Error(), "tok-456") {
		t.Errorf("wrong token: %v", err)
	}
}

// TestConnectNATSTLS: a server that requires TLS with client
// certificates, from a CA made in the test.
func TestConnectNATSTLS(t *testing.T) {
	pki := newPKI(t)
	s := startNATS(t, func(o *server.Options) {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: pki.serverCert, KeyFile: pki.serverKey, CaFile: pki.ca, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, true, 5
	})
	url := strings.Replace(s.ClientURL(), "nats://", "tls://", 1)
	connectOK(t, natsConfig(url, func(n *NATS) { n.TLSCA, n.TLSCert, n.TLSKey = pki.ca, pki.clientCert, pki.clientKey }))

	// The server's CA not trusted.
	err := connectErr(t, natsConfig(url, func(n *NATS) { n.TLSCert, n.TLSKey = pki.clientCert, pki.clientKey }))
	if !errors.Is(err, ErrNATSTLS) || !strings.Contains(err.Error(), "--nats-tls-ca") {
		t.Errorf("unknown CA: %v; want a TLS error suggesting --nats-tls-ca", err)
	}
	// No client certificate: the server says "certificate required", or
	// closes the connection before the client reads that.
	err = connectErr(t, natsConfig(url, func(n *NATS) { n.TLSCA = pki.ca }))
	if !errors.Is(err, ErrNATSTLS) {
		t.Errorf("no client certificate: %v; want a TLS error", err)
	}
	// Plain nats:// to a TLS server, no TLS settings.
	err = connectErr(t, natsConfig(s.ClientURL(), nil))
	if !errors.Is(err, ErrNATSTLS) {
		t.Errorf("plain to TLS: %v; want a TLS error", err)
	}
}

func TestConnectNATSNKey(t *testing.T) {
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := writeFile(t, "user.nk", string(seed))
	s := startNATS(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	connectOK(t, natsConfig(s.ClientURL(), func(n *NATS) { n.NKeyFile = seedFile }))

	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := writeFile(t, "other.nk", string(otherSeed))
	err = connectErr(t, natsConfig(s.ClientURL(), func(n *NATS) { n.NKeyFile = otherFile }))
	if !errors.Is(err, ErrNATSAuthorization) || !strings.Contains(err.Error(), "for nkey seed "+otherFile) {
		t.Errorf("unknown nkey: %v", err)
	}
}

func TestConnectNATSUnreachableNamesEveryURL(t *testing.T) {
	c := Default()
	c.NATS.URLs = []string{"nats://127.0.0.1:1", "nats://127.0.0.1:2"}
	err := connectErr(t, c)
	if !errors.Is(err, ErrNATSUnreachable) || !strings.Contains(err.Error(), "nats://127.0.0.1:1,nats://127.0.0.1:2") {
		t.Errorf("unreachable: %v", err)
	}
}

func TestConnectNATSWithoutJetStream(t *testing.T) {
	s := startNATS(t, func(o *server.Options) { o.JetStream = false })
	err := connectErr(t, natsConfig(s.ClientURL(), nil))
	if !errors.Is(err, ErrNoJetStream) || !strings.Contains(err.Error(), "-js") || !strings.Contains(err.Error(), "nats at "+s.ClientURL()) {
		t.Errorf("no jetstream: %v; want it said, naming the server", err)
	}
}

// pki is a CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	p := pki{ca: path("ca.pem"), serverCert: path("server.pem"), serverKey: path("server-key.pem"),
		clientCert: path("client.pem"), clientKey: path("client-key.pem")}
	ca, err := testpki.NewCA(p.ca)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Cert("server", x509.ExtKeyUsageServerAuth, p.serverCert, p.serverKey); err != nil {
		t.Fatal(err)
	}
	if err := ca.Cert("client", x509.ExtKeyUsageClientAuth, p.clientCert, p.clientKey); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConnectNATSWaitsForJetStreamOfAFormingCluster: with one node of a
// 3-node cluster up, JetStream has no meta leader and cannot answer;
// ConnectNATS waits, logging each retry, and connects once it can.
func TestConnectNATSWaitsForJetStreamOfAFormingCluster(t *testing.T) {
	cluster := testenv.NewNATSCluster(t, 3)
	first := cluster.Start(0)
	logger, logs := logbuf.Logger(slog.LevelWarn)
	done := make(chan error, 1)
	go func() {
		nc, _, err := natsConfig(first.ClientURL(), nil).ConnectNATS(context.Background(), "test", logger)
		if err == nil {
			nc.Close()
		}
		done <- err
	}()
	testenv.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		select {
		case err := <-done:
			t.Fatalf("ConnectNATS returned %v with no meta leader", err)
		default:
		}
		if !strings.Contains(logs.String(), "checking jetstream: not ready yet; retrying") {
			return errors.New("no retry logged yet")
		}
		return nil
	})
	cluster.Start(1)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("once the cluster has a leader: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("not connected within 90s of the cluster having a quorum\n%s", logs)
	}
	t.Logf("retry line: %s", strings.SplitN(logs.String(), "\n", 2)[0])
}

// TestConnectNATSPingsASilentServer: a connection pings its server often
// enough to take one on a lost node (silent, its TCP connection never
// closed) for gone within 20 s and reconnect to another member, where
// nats.go's defaults would wait 4 to 6 minutes.
func TestConnectNATSPingsASilentServer(t *testing.T) {
	s := startNATS(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, _, err := natsConfig(s.ClientURL(), nil).ConnectNATS(ctx, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if d := nc.Opts.PingInterval * time.Duration(nc.Opts.MaxPingsOut+1); d > 20*time.Second || nc.Opts.MaxPingsOut < 2 {
		t.Errorf("ping every %v, %d outstanding: a silent server is found after %v, want at most 20s with at least 2 pings",
			nc.Opts.PingInterval, nc.Opts.MaxPingsOut, d)
	}
}
