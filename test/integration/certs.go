package integration

import (
	"crypto/x509"
	"path/filepath"

	"github.com/sluice-project/sluice/internal/testpki"
)

// Certs are PEM files of a test CA, a server certificate for 127.0.0.1
// and a client certificate, both signed by the CA.
type Certs struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewCerts writes a fresh CA and its server and client certificates into dir.
func NewCerts(dir string) (Certs, error) {
	c := Certs{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	ca, err := testpki.NewCA(c.CA)
	if err != nil {
		return Certs{}, err
	}
	if err := ca.Cert("nats-server", x509.ExtKeyUsageServerAuth, c.ServerCert, c.ServerKey); err != nil {
		return Certs{}, err
	}
	if err := ca.Cert("sluice", x509.ExtKeyUsageClientAuth, c.ClientCert, c.ClientKey); err != nil {
		return Certs{}, err
	}
	return c, nil
}
