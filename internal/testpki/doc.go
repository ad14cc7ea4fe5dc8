// Package testpki writes the PEM files a test needs to run servers with
// TLS on loopback: a fresh CA, certificates it signs for 127.0.0.1 and
// localhost only, and bare key pairs. Keys are ECDSA P-256: quick to make
// and accepted by everything the tests start (NATS, kube-apiserver).
// Certificates are valid from an hour ago for a day, so a clock a little
// off does not matter.
package testpki
