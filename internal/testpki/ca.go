package testpki

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
	"time"
)

// CA is a test certificate authority; it signs certificates with Cert.
type CA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64 // the last serial number given
}

// NewCA makes a CA and writes its certificate to path.
func NewCA(path string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the test CA's key: %w", err)
	}
	tmpl := template(1, "sluice test CA")
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage |= x509.KeyUsageCertSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("making the test CA: %w", err)
	}
	// Signed by the parsed certificate, not the template, leaves name it
	// by its key id.
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the test CA: %w", err)
	}
	if err := writePEM(path, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, serial: 1}, nil
}

// Cert writes a certificate for 127.0.0.1 and localhost named cn, for
// usage (server or client authentication), to certPath and its key to
// keyPath.
func (ca *CA) Cert(cn string, usage x509.ExtKeyUsage, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating %s's key: %w", cn, err)
	}
	ca.serial++
	tmpl := template(ca.serial, cn)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	tmpl.IPAddresses, tmpl.DNSNames = []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("making %s's certificate: %w", cn, err)
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

// KeyPair writes a fresh private key to keyPath and its public key to
// pubPath: for signing what is not a certificate (ServiceAccount tokens).
func KeyPair(keyPath, pubPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating a key pair: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encoding a public key: %w", err)
	}
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	return writePEM(pubPath, "PUBLIC KEY", pub)
}

func template(serial int64, cn string) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding a private key: %w", err)
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

// writePEM writes der as one PEM block of type typ, readable by its owner
// only.
func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
