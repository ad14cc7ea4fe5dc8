package connect

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestConnectNATSSecretsFromFiles: a password or a token read from a
// file (a mounted Secret), re-read at each connect, so a rotated secret
// is picked up on reconnect.
func TestConnectNATSSecretsFromFiles(t *testing.T) {
	s := startNATS(t, func(o *server.Options) { o.Username, o.Password = "bob", "s3cret" })
	pw := writeFile(t, "password", "s3cret\n") // as `kubectl create secret --from-file` leaves it
	connectOK(t, natsConfig(s.ClientURL(), func(n *NATS) { n.User, n.PasswordFile = "bob", pw }))
	if err := os.WriteFile(pw, []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := connectErr(t, natsConfig(s.ClientURL(), func(n *NATS) { n.User, n.PasswordFile = "bob", pw }))
	if !errors.Is(err, ErrNATSAuthorization) || !strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "wrong") {
		t.Errorf("wrong password in the file: %v; want an authorization error naming the file, not the password", err)
	}

	ts := startNATS(t, func(o *server.Options) { o.Authorization = "tok-123" })
	tok := writeFile(t, "token", "tok-123")
	connectOK(t, natsConfig(ts.ClientURL(), func(n *NATS) { n.TokenFile = tok }))
}

func TestResolveSecretFiles(t *testing.T) {
	pw := writeFile(t, "pw", "from-file\n")
	c, err := resolveWith(t, PartNATS, []string{"--nats-user", "bob", "--nats-password-file", pw}, nil)
	if err != nil || c.NATS.PasswordFile != pw || c.NATS.Password != "" {
		t.Fatalf("password file: %+v, %v", c.NATS, err)
	}
	// Children get the file's path, which is no secret.
	if args := strings.Join(c.Args(PartNATS), " "); !strings.Contains(args, "--nats-password-file="+pw) {
		t.Errorf("child args %q lack the password file", args)
	}

	empty := writeFile(t, "empty", "\n")
	_, err = resolveWith(t, PartNATS, nil, map[string]string{
		"SLUICE_NATS_USER": "bob", "SLUICE_NATS_PASSWORD": "x", "SLUICE_NATS_PASSWORD_FILE": pw,
		"SLUICE_NATS_TOKEN_FILE": empty,
	})
	for _, want := range []string{
		"SLUICE_NATS_PASSWORD and SLUICE_NATS_PASSWORD_FILE: give the password one way, not both",
		"SLUICE_NATS_TOKEN_FILE: " + empty + " is empty",
		"SLUICE_NATS_USER and SLUICE_NATS_TOKEN_FILE: give one way to authenticate to NATS, not 2",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "from-file") {
		t.Errorf("error shows the file's password: %v", err)
	}
	_, err = resolveWith(t, PartNATS, []string{"--nats-password-file", "/nonexistent/pw"}, nil)
	if err == nil || !strings.Contains(err.Error(), "--nats-password-file: open /nonexistent/pw") || !strings.Contains(err.Error(), "without a user") {
		t.Errorf("missing file, no user: %v", err)
	}
}
