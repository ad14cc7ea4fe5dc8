package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

func TestCertsVerifyForLoopbackOnly(t *testing.T) {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	ca, err := NewCA(path("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Cert("server", x509.ExtKeyUsageServerAuth, path("s.pem"), path("s-key.pem")); err != nil {
		t.Fatal(err)
	}
	if err := ca.Cert("client", x509.ExtKeyUsageClientAuth, path("c.pem"), path("c-key.pem")); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(path("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in ca.pem")
	}
	load := func(cert, key string) *x509.Certificate {
		pair, err := tls.LoadX509KeyPair(path(cert), path(key))
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	srv, cli := load("s.pem", "s-key.pem"), load("c.pem", "c-key.pem")
	if srv.SerialNumber.Cmp(cli.SerialNumber) == 0 {
		t.Errorf("server and client share serial %v", srv.SerialNumber)
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
		t.Error("server certificate verifies for example.com")
	}
	if _, err := cli.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if err := KeyPair(path("sa.key"), path("sa.pub")); err != nil {
		t.Fatal(err)
	}
}
