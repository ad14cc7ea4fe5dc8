package connect

import "errors"

// Errors a connection check wraps, so that callers and tests can tell
// them apart with errors.Is.
var (
	// ErrNATSUnreachable: no NATS server answered at any of the URLs.
	ErrNATSUnreachable = errors.New("nats server unreachable")
	// ErrNATSAuthorization: a server answered and refused the credentials
	// (or their absence).
	ErrNATSAuthorization = errors.New("nats authorization failed")
	// ErrNATSTLS: the TLS handshake failed (unknown CA, missing or refused
	// client certificate, TLS wanted on one side only).
	ErrNATSTLS = errors.New("nats tls failed")
	// ErrNATSServerTooOld: the server is older than MinServerVersion.
	ErrNATSServerTooOld = errors.New("nats-server too old")
	// ErrNoJetStream: connected, but JetStream is off or does not answer.
	ErrNoJetStream = errors.New("jetstream not available")

	// ErrS3Unreachable: the S3 endpoint did not answer (refused, DNS, timeout).
	ErrS3Unreachable = errors.New("s3 endpoint unreachable")
	// ErrS3TLS: the endpoint's certificate is not trusted (or TLS failed).
	ErrS3TLS = errors.New("s3 tls failed")
	// ErrS3NoCredentials: the AWS SDK's default chain found no credentials.
	ErrS3NoCredentials = errors.New("no s3 credentials found")
	// ErrS3WrongCredentials: S3 answered that the access key is unknown or
	// the signature (secret key) does not match.
	ErrS3WrongCredentials = errors.New("wrong s3 credentials")
)
