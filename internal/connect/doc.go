// Package connect is how every Sluice command reaches NATS and S3: one set
// of settings (Config), read from flags, SLUICE_* environment variables and
// a YAML config file with precedence flag > env > file > default, validated
// all at once with each problem naming where its value came from.
//
// From a Config it connects to NATS (several servers, creds file, NKey,
// user/password, token, TLS; reconnecting forever) and builds S3 clients
// (credentials only from the AWS SDK's default chain; endpoint, region,
// path-style, custom CA; retries counted in sluice_s3_retries_total), and
// checks at start that both answer, saying which problem it is: server
// unreachable, authorization refused, TLS, no or wrong S3 credentials.
//
// Args and Env hand the same settings to child processes, secrets through
// the environment only (a URL with credentials in it counts as one).
//
// Secrets never reach a message: every URL in an error or a log line goes
// through RedactURL (user:xxxxx@, or xxxxx@ for a token), a refused secret
// is named by where it came from, not its value. A password or token may
// come from a file (--nats-password-file, --nats-token-file: a mounted
// Secret), read again at each reconnect so that a rotated one is used.
//
// A command sets NATS.InboxPrefix to its component's (internal/natsperm),
// so that its least-privilege NATS user subscribes to its own replies only.
//
// The config file (--config FILE or SLUICE_CONFIG) holds the same settings
// as the flags; unknown keys are errors:
//
//	nats:
//	  url: [nats://nats-0:4222, nats://nats-1:4222]   # or "a,b"
//	  creds: /etc/sluice/user.creds   # or nkey: FILE, user + password (or password_file), token (or token_file)
//	  tls: {ca: /etc/sluice/ca.pem, cert: /etc/sluice/client.pem, key: /etc/sluice/client-key.pem}
//	s3:
//	  endpoint: https://minio.internal:9000
//	  region: us-east-1
//	  path_style: true
//	  ca: /etc/sluice/minio-ca.pem
//	stream_replicas: 3
package connect
