package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/sluice-project/sluice/internal/natsperm"
)

// NATSServer is a nats-server process with JetStream on a file store,
// the shipped authorization (internal/natsperm: the static users and the
// auth callout, through which the controllers let each job's agents in as
// their job) plus one superuser for every other process and the test's
// own checks, TLS that requires a client certificate signed by the
// test's CA, and its HTTP monitoring endpoint on loopback (MonitorPort:
// /varz, read by Varz).
type NATSServer struct {
	*Process
	Port        int
	MonitorPort int
	StoreDir    string
	User        string
	Password    string
	Certs       Certs
	// CalloutSeedFile holds the seed of the auth callout's issuer, which
	// the controllers sign their answers with
	// (--nats-callout-seed-file).
	CalloutSeedFile string
}

// StartNATSServer writes the server's config into dir and starts it.
func StartNATSServer(t testing.TB, bin, dir string, certs Certs) *NATSServer {
	t.Helper()
	s := &NATSServer{
		Port:        MustFreePort(t),
		MonitorPort: MustFreePort(t),
		StoreDir:    filepath.Join(dir, "jetstream"),
		User:        "sluice",
		Password:    "s3cret-itest",
		Certs:       certs,
	}
	// The shipped authorization block, with the superuser added to its
	// users and to those the server checks itself.
	issuer, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := issuer.PublicKey()
	seed, _ := issuer.Seed()
	s.CalloutSeedFile = filepath.Join(dir, "callout.seed")
	if err := os.WriteFile(s.CalloutSeedFile, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{natsperm.CalloutIssuerEnv + "=" + pub}
	for _, r := range natsperm.Roles() {
		env = append(env, r.PasswordEnv()+"=pw-"+r.Name+"-itest")
	}
	auth := natsperm.Render()
	auth = strings.Replace(auth, "  users: [\n", fmt.Sprintf("  users: [\n    { user: %q, password: %q }\n", s.User, s.Password), 1)
	auth = strings.Replace(auth, "auth_users: [", "auth_users: ["+s.User+", ", 1)
	conf := filepath.Join(dir, "nats-server.conf")
	// max_payload stays at the stock 1 MiB: only tasks, positions, job
	// records and signals pass through NATS.
	text := fmt.Sprintf(`listen: "127.0.0.1:%d"
http: "127.0.0.1:%d"
server_name: itest
jetstream {
  store_dir: %q
}
%s
tls {
  cert_file: %q
  key_file: %q
  ca_file: %q
  verify: true
  timeout: 5
}
`, s.Port, s.MonitorPort, s.StoreDir, auth, certs.ServerCert, certs.ServerKey, certs.CA)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Process = StartProcess(t, dir, "nats-server", bin, []string{"-c", conf}, env)
	if err := s.WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return s
}

// URL is the client URL.
func (s *NATSServer) URL() string { return "tls://127.0.0.1:" + strconv.Itoa(s.Port) }

// WaitReady waits until a client can log in and reach JetStream.
func (s *NATSServer) WaitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		nc, err := s.Connect()
		if err == nil {
			js, jerr := jetstream.New(nc)
			if jerr == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, jerr = js.AccountInfo(ctx)
				cancel()
			}
			nc.Close()
			if jerr == nil {
				return nil
			}
			err = jerr
		}
		if !s.Running() {
			return fmt.Errorf("nats-server exited: %v\n%s", s.ExitErr(), s.Tail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server not ready after %v: %w\n%s", within, err, s.Tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ClientArgs are the sluice connection flags that reach this server as
// its superuser.
func (s *NATSServer) ClientArgs() []string {
	return append(s.AgentArgs(), "--nats-user", s.User, "--nats-password", s.Password)
}

// AgentArgs are an agent's connection flags: no user (it connects as its
// job, with the team key job submit wrote), TLS.
func (s *NATSServer) AgentArgs() []string {
	return []string{
		"--nats", s.URL(),
		"--nats-tls-ca", s.Certs.CA,
		"--nats-tls-cert", s.Certs.ClientCert, "--nats-tls-key", s.Certs.ClientKey,
	}
}

// Connect opens a client connection for the test's own checks; it
// reconnects across a server restart.
func (s *NATSServer) Connect() (*nats.Conn, error) {
	return nats.Connect(s.URL(),
		nats.UserInfo(s.User, s.Password),
		nats.RootCAs(s.Certs.CA),
		nats.ClientCert(s.Certs.ClientCert, s.Certs.ClientKey),
		nats.Name("sluice-itest"),
		nats.Timeout(5*time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(200*time.Millisecond),
	)
}

// Varz is the part of the server's /varz the scenarios read: the message
// bytes it received from clients and sent to them since it started.
type Varz struct {
	InMsgs   int64 `json:"in_msgs"`
	OutMsgs  int64 `json:"out_msgs"`
	InBytes  int64 `json:"in_bytes"`
	OutBytes int64 `json:"out_bytes"`
}

// Varz reads the server's /varz from its monitoring port. The counts start
// again at 0 when the server restarts.
func (s *NATSServer) Varz(ctx context.Context) (Varz, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u := "http://127.0.0.1:" + strconv.Itoa(s.MonitorPort) + "/varz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Varz{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Varz{}, fmt.Errorf("reading %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Varz{}, fmt.Errorf("reading %s: %s", u, resp.Status)
	}
	var v Varz
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&v); err != nil {
		return Varz{}, fmt.Errorf("decoding %s: %w", u, err)
	}
	return v, nil
}

// Sub is what the server moved between v and a later reading, later.
func (v Varz) Sub(later Varz) Varz {
	return Varz{InMsgs: later.InMsgs - v.InMsgs, OutMsgs: later.OutMsgs - v.OutMsgs,
		InBytes: later.InBytes - v.InBytes, OutBytes: later.OutBytes - v.OutBytes}
}
