package connect

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// validate returns every problem of c; where names a setting's source
// (flag, variable or file key) for the message.
func validate(c Config, where func(name string) string) []string {
	var ps []string
	add := func(format string, a ...any) { ps = append(ps, fmt.Sprintf(format, a...)) }

	// NATS servers.
	if len(c.NATS.URLs) == 0 {
		add("%s: no NATS server URL", where("nats"))
	}
	for _, u := range c.NATS.URLs {
		if !validNATSURL(u) {
			add("%s %q: want nats://host:port (or tls://, ws://, wss://)", where("nats"), RedactURL(u))
		}
	}

	validateNATSAuth(c, where, add)
	validateNATSTLS(c, where, add)
	if c.StreamReplicas < 1 || c.StreamReplicas > 5 {
		add("%s %d: want 1..5 (1 on one server, 3 on a cluster)", where("stream-replicas"), c.StreamReplicas)
	}
	validateS3(c, where, add)
	return ps
}

// validateNATSAuth checks the NATS authentication: at most one way, its files readable.
func validateNATSAuth(c Config, where func(string) string, add func(string, ...any)) {
	var ways []string
	if c.NATS.CredsFile != "" {
		ways = append(ways, where("nats-creds"))
		if err := readable(c.NATS.CredsFile); err != nil {
			add("%s: %v", where("nats-creds"), err)
		}
	}
	if c.NATS.NKeyFile != "" {
		ways = append(ways, where("nats-nkey"))
		if _, err := nats.NkeyOptionFromSeed(c.NATS.NKeyFile); err != nil {
			add("%s: %v", where("nats-nkey"), err)
		}
	}
	if c.NATS.User != "" {
		ways = append(ways, where("nats-user"))
	} else {
		for name, v := range map[string]string{"nats-password": c.NATS.Password, "nats-password-file": c.NATS.PasswordFile} {
			if v != "" {
				add("%s given without a user (%s)", where(name), names("nats-user"))
			}
		}
	}
	if c.NATS.Password != "" && c.NATS.PasswordFile != "" {
		add("%s and %s: give the password one way, not both", where("nats-password"), where("nats-password-file"))
	}
	if c.NATS.Token != "" {
		ways = append(ways, where("nats-token"))
	} else if c.NATS.TokenFile != "" {
		ways = append(ways, where("nats-token-file"))
	}
	if c.NATS.Token != "" && c.NATS.TokenFile != "" {
		add("%s and %s: give the token one way, not both", where("nats-token"), where("nats-token-file"))
	}
	for name, path := range map[string]string{"nats-password-file": c.NATS.PasswordFile, "nats-token-file": c.NATS.TokenFile} {
		if path != "" {
			if _, err := readSecretFile(path); err != nil {
				add("%s: %v", where(name), err)
			}
		}
	}
	if len(ways) > 1 {
		add("%s: give one way to authenticate to NATS, not %d", strings.Join(ways, " and "), len(ways))
	}
}

// validateNATSTLS checks the NATS TLS files.
func validateNATSTLS(c Config, where func(string) string, add func(string, ...any)) {
	if c.NATS.TLSCA != "" {
		if err := pemCAs(c.NATS.TLSCA); err != nil {
			add("%s: %v", where("nats-tls-ca"), err)
		}
	}
	switch {
	case c.NATS.TLSCert != "" && c.NATS.TLSKey == "":
		add("%s given without its key (%s)", where("nats-tls-cert"), names("nats-tls-key"))
	case c.NATS.TLSKey != "" && c.NATS.TLSCert == "":
		add("%s given without its certificate (%s)", where("nats-tls-key"), names("nats-tls-cert"))
	case c.NATS.TLSCert != "":
		if _, err := tls.LoadX509KeyPair(c.NATS.TLSCert, c.NATS.TLSKey); err != nil {
			add("%s, %s: %v", where("nats-tls-cert"), where("nats-tls-key"), err)
		}
	}
}

// validateS3 checks the S3 endpoint and CA file.
func validateS3(c Config, where func(string) string, add func(string, ...any)) {
	if c.S3.Endpoint != "" {
		u, err := url.Parse(c.S3.Endpoint)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			add("%s %q: want http(s)://host[:port]", where("s3-endpoint"), RedactURL(c.S3.Endpoint))
		case u.User != nil:
			add("%s %q: holds credentials; S3 takes them from the AWS SDK's chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, a role)",
				where("s3-endpoint"), RedactURL(c.S3.Endpoint))
		}
	}
	if c.S3.CAFile != "" {
		if err := pemCAs(c.S3.CAFile); err != nil {
			add("%s: %v", where("s3-ca"), err)
		}
	}
}

func validNATSURL(raw string) bool {
	if !strings.Contains(raw, "://") {
		raw = "nats://" + raw // nats.go takes host:port alone
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return false
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
		return true
	}
	return false
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

func pemCAs(path string) error {
	pem, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s holds no PEM certificate", path)
	}
	return nil
}
