package k8senv

import (
	"crypto/x509"
	"path/filepath"

	"github.com/sluice-project/sluice/internal/testpki"
)

// pki is the files kube-apiserver needs, written to one directory.
type pki struct {
	caCert, serverCert, serverKey, saPub, saKey string
}

// writePKI makes a CA, a serving certificate for 127.0.0.1 signed by it,
// and a key pair to sign ServiceAccount tokens with.
func writePKI(dir string) (pki, error) {
	p := pki{
		caCert: filepath.Join(dir, "ca.crt"), serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey: filepath.Join(dir, "apiserver.key"), saPub: filepath.Join(dir, "sa.pub"), saKey: filepath.Join(dir, "sa.key"),
	}
	ca, err := testpki.NewCA(p.caCert)
	if err != nil {
		return p, err
	}
	if err := ca.Cert("kube-apiserver", x509.ExtKeyUsageServerAuth, p.serverCert, p.serverKey); err != nil {
		return p, err
	}
	return p, testpki.KeyPair(p.saKey, p.saPub)
}
