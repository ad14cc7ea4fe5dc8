package k8senv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the files kube-apiserver needs, written to one directory.
type pki struct {
	caCert, serverCert, serverKey, saPub, saKey string
}

// writePKI makes a CA, a serving certificate for 127.0.0.1 signed by it,
// and a key pair to sign ServiceAccount tokens with. ECDSA keys: quick to
// make, and accepted by kube-apiserver for both.
func writePKI(dir string) (pki, error) {
	p := pki{
		caCert: filepath.Join(dir, "ca.crt"), serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey: filepath.Join(dir, "apiserver.key"), saPub: filepath.Join(dir, "sa.pub"), saKey: filepath.Join(dir, "sa.key"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("making the test CA: %w", err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost", "kubernetes.default.svc"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("making the apiserver's certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	write := func(path, typ string, der []byte) {
		if err == nil {
			err = os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
		}
	}
	srvKeyDER, err1 := x509.MarshalECPrivateKey(srvKey)
	saKeyDER, err2 := x509.MarshalECPrivateKey(saKey)
	saPubDER, err3 := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err1 != nil || err2 != nil || err3 != nil {
		return p, fmt.Errorf("encoding test keys: %v %v %v", err1, err2, err3)
	}
	write(p.caCert, "CERTIFICATE", caDER)
	write(p.serverCert, "CERTIFICATE", srvDER)
	write(p.serverKey, "EC PRIVATE KEY", srvKeyDER)
	write(p.saKey, "EC PRIVATE KEY", saKeyDER)
	write(p.saPub, "PUBLIC KEY", saPubDER)
	return p, err
}
