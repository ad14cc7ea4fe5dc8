package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/retry"
)

// How a long-lived connection behaves.
const (
	dialTimeout     = 5 * time.Second // one connection attempt
	reconnectWait   = 2 * time.Second // between attempts at the same server
	reconnectJitter = time.Second     // added at random, plain and TLS
	// firstReconnectJitter spreads the first reconnect of the clients a
	// server dropped at once.
	firstReconnectJitter = 100 * time.Millisecond
	jetStreamTimeout     = 3 * time.Second // one attempt of the start-up JetStream check (retried)
	// publishAsyncTimeout reclaims async publish futures never acked.
	publishAsyncTimeout = 30 * time.Second
	// A server on a lost node goes silent, not away: the client pings it
	// every pingInterval and takes it for gone, and reconnects to another
	// member, once maxPingsOut pings went unanswered (nats.go's defaults,
	// 2 minutes and 2, would take 4 to 6 minutes).
	pingInterval = 5 * time.Second
	maxPingsOut  = 3
)

// ConnectNATS connects to the first NATS server of c.NATS.URLs that
// answers, authenticates and checks that JetStream answers. Once
// connected it reconnects forever (servers restart; a long-lived service
// should outlast that), logging disconnects and reconnects. A failure at
// start says which problem it is: ErrNATSUnreachable, ErrNATSAuthorization,
// ErrNATSTLS, ErrNATSServerTooOld (older than MinServerVersion) or
// ErrNoJetStream (errors.Is), naming the URLs.
//
// With c.NATS.RetryAuth (a client let in by the server's auth callout),
// a refusal that may be the server giving up on the callout's answer
// (or a handshake the server interrupted with a PING while it waited) is
// retried with backoff and a Warn line each time, for at most
// authRetryWindow or until ctx ends (retryRefusal).
func (c Config) ConnectNATS(ctx context.Context, name string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if !c.NATS.RetryAuth {
		return c.connectNATS(ctx, name, logger)
	}
	var (
		nc    *nats.Conn
		js    jetstream.JetStream
		start = time.Now()
		took  time.Duration // of the last attempt
	)
	retryable := func(err error) bool {
		return (errors.Is(err, ErrNATSAuthorization) || pingedInHandshake(err)) && retryRefusal(took, time.Since(start))
	}
	err := retry.Do(ctx, logger, retry.Startup(), "connecting to nats: refused, maybe as the auth callout was not answered in time", retryable,
		func(ctx context.Context) error {
			t := time.Now()
			var err error
			nc, js, err = c.connectNATS(ctx, name, logger)
			took = time.Since(t)
			return err
		})
	if (errors.Is(err, ErrNATSAuthorization) || pingedInHandshake(err)) && took >= slowRefusal {
		err = fmt.Errorf("%w (refused after waiting %v each time, as when no auth callout answers in time: retried for %v)",
			err, took.Round(time.Millisecond), time.Since(start).Round(time.Second))
	}
	return nc, js, err
}

// How a callout-authenticated client's first connect retries a refusal.
// The server answers "Authorization Violation" both when the controllers
// refuse the credentials and when none answered within its wait (its
// auth timeout: natsperm.CalloutWait in the shipped configurations, at
// least 1 s), so the two are told apart by the time the refusal took: a
// refusal the controllers answer comes within milliseconds, fails the
// connect at once, and a wrong credential is not retried. One that came
// late is retried, within a bound: under load a real refusal can come
// late too.
const (
	slowRefusal     = time.Second
	authRetryWindow = 2 * time.Minute
)

// pingedInHandshake: the server sent its first PING (2 to 2.4 s after
// CONNECT) before it answered the CONNECT, which nats.go takes for a
// protocol error: the auth callout was still pending on a server whose
// auth timeout is longer than that.
func pingedInHandshake(err error) bool {
	return err != nil && strings.Contains(err.Error(), "expected 'PONG', got 'PING'")
}

// retryRefusal is whether a first connect refused after took, since
// after the first attempt began, is tried again.
func retryRefusal(took, since time.Duration) bool {
	return took >= slowRefusal && since < authRetryWindow
}

// connectNATS is one attempt of ConnectNATS.
func (c Config) connectNATS(ctx context.Context, name string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	urls := redactURLs(c.NATS.URLs)
	opts, err := c.NATS.options(name, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to nats at %s: %w", urls, err)
	}
	nc, err := nats.Connect(strings.Join(c.NATS.URLs, ","), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to nats at %s: %w", urls, c.NATS.explain(err))
	}
	if err := checkServerVersion(nc.ConnectedServerVersion()); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("nats at %s: %w", urls, err)
	}
	// Named before Close, after which the connection has no URL.
	at := RedactURL(nc.ConnectedUrl())
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(publishAsyncTimeout))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("opening jetstream at %s: %w", at, err)
	}
	if err := waitJetStream(ctx, js, logger); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("nats at %s: %w", at, err)
	}
	logger.Debug("nats connected", "url", RedactURL(nc.ConnectedUrl()), "server", nc.ConnectedServerName())
	return nc, js, nil
}

// ConnectNATSWaiting is ConnectNATS for a long-running service (the
// controller, an agent): a server not reachable yet is retried with
// backoff and a Warn line each time until ctx ends, rather than failing
// the process. Deployed together, a service's pod otherwise crashes while
// NATS starts, and the kubelet's back-off then holds it down for minutes.
func (c Config) ConnectNATSWaiting(ctx context.Context, name string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	return c.connectRetrying(ctx, name, logger, func(err error) bool { return errors.Is(err, ErrNATSUnreachable) })
}

// ConnectNATSWithin is ConnectNATS for a process a user started (an
// agent) that outlasts a server briefly out of reach: one that does not
// answer (a dial or handshake that timed out) is retried for at most
// within; one that refuses the connection (nothing listens there, as at a
// wrong URL) fails at once with one clear error. Behind a Service's
// ClusterIP in front of several servers, a new connection goes to a
// server on a lost node, silent, until the node controller takes its
// endpoints out (tens of seconds); another attempt may reach a live one.
func (c Config) ConnectNATSWithin(ctx context.Context, within time.Duration, name string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return c.connectRetrying(ctx, name, logger, func(err error) bool { return errors.Is(err, ErrNATSUnreachable) && timedOut(err) })
}

// connectRetrying is ConnectNATS, retried with backoff while retryable.
func (c Config) connectRetrying(ctx context.Context, name string, logger *slog.Logger, retryable func(error) bool) (*nats.Conn, jetstream.JetStream, error) {
	var nc *nats.Conn
	var js jetstream.JetStream
	err := retry.Do(ctx, logger, retry.Startup(), "connecting to nats", retryable, func(ctx context.Context) error {
		var err error
		nc, js, err = c.ConnectNATS(ctx, name, logger)
		return err
	})
	return nc, js, err
}

// timedOut: the server did not answer in time, as a silent (lost) one.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, nats.ErrTimeout)
}

// waitJetStream is CheckJetStream until JetStream answers: a cluster
// still forming (no meta leader yet) is retried with backoff and a Warn
// line each time, until ctx ends. JetStream off on the server, or for the
// account, is not waited for.
func waitJetStream(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) error {
	return retry.JetStream(ctx, logger, js.Conn(), "checking jetstream", func(ctx context.Context) error {
		return CheckJetStream(ctx, js)
	})
}

// CheckJetStream asks JetStream for the account's information, which
// needs JetStream enabled and a meta leader in a cluster.
func CheckJetStream(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, jetStreamTimeout)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		switch {
		case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
			return fmt.Errorf("%w: not enabled (start nats-server with -js, or enable it for the account): %v", ErrNoJetStream, err)
		case errors.Is(err, context.DeadlineExceeded):
			// Wrapped, so that waitJetStream retries it.
			return fmt.Errorf("%w: no answer within %v: %w", ErrNoJetStream, jetStreamTimeout, err)
		}
		return fmt.Errorf("%w: %w", ErrNoJetStream, err)
	}
	return nil
}

// reconnectDelay is the wait of a reconnect before its attempt-th pass
// over the server list after the first. nats.go waits before even the
// first try when the list holds one server (a Kubernetes Service), so
// every disconnect cost 2-3 s. The first wait is now under 100 ms: a login
// that expired (controller.Options.AgentLoginTTL) is back at once, and a
// server that is down refuses fast. Later waits are as before.
func reconnectDelay(attempt int) time.Duration {
	if attempt <= 1 {
		return rand.N(firstReconnectJitter)
	}
	return reconnectWait + rand.N(reconnectJitter)
}

// options are the nats.go options for n.
func (n NATS) options(name string, logger *slog.Logger) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(dialTimeout),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected; reconnecting", "url", RedactURL(nc.ConnectedUrl()), "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("nats reconnected", "url", RedactURL(nc.ConnectedUrl()))
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				logger.Warn("nats connection closed", "err", err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			logger.Warn("nats async error", "subject", subjectOf(sub), "err", err)
		}),
	}
	switch {
	case n.CredsFile != "":
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	case n.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(n.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nkey seed: %w", err)
		}
		opts = append(opts, o)
	case n.User != "" && n.PasswordFile != "":
		password, err := fileSecret(n.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("password file: %w", err)
		}
		opts = append(opts, nats.UserInfoHandler(func() (string, string) { return n.User, password() }))
	case n.User != "":
		opts = append(opts, nats.UserInfo(n.User, n.Password))
	case n.Token != "":
		opts = append(opts, nats.Token(n.Token))
	case n.TokenFile != "":
		token, err := fileSecret(n.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("token file: %w", err)
		}
		opts = append(opts, nats.TokenHandler(token))
	}
	if n.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(n.InboxPrefix))
	}
	if n.RetryAuth {
		opts = append(opts, nats.IgnoreAuthErrorAbort())
	}
	if n.TLSCA != "" {
		opts = append(opts, nats.RootCAs(n.TLSCA))
	}
	if n.TLSCert != "" {
		opts = append(opts, nats.ClientCert(n.TLSCert, n.TLSKey))
	}
	return opts, nil
}

// explain turns a failed first connect into the problem it is.
func (n NATS) explain(err error) error {
	switch {
	case isAuthError(err):
		return fmt.Errorf("%w %s (%v)", ErrNATSAuthorization, n.identity(), err)
	case isTLSError(err):
		hint := "check --nats-tls-ca, --nats-tls-cert and --nats-tls-key, and tls:// in the URL"
		var unknown x509.UnknownAuthorityError
		if errors.As(err, &unknown) && n.TLSCA == "" {
			hint = "the server's certificate is signed by a CA this client does not trust: give it with --nats-tls-ca"
		}
		return fmt.Errorf("%w: %v (%s)", ErrNATSTLS, err, hint)
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrTimeout), isNetError(err):
		return fmt.Errorf("%w (is it running, and listening there?): %w", ErrNATSUnreachable, err)
	}
	return err
}

// identity names who tried to connect, without secrets.
func (n NATS) identity() string {
	switch {
	case n.CredsFile != "":
		return "for creds file " + n.CredsFile
	case n.NKeyFile != "":
		return "for nkey seed " + n.NKeyFile
	case n.User != "" && n.PasswordFile != "":
		return fmt.Sprintf("for user %q with the password in %s", n.User, n.PasswordFile)
	case n.User != "":
		return fmt.Sprintf("for user %q", n.User)
	case n.Token != "":
		return "for the token given"
	case n.TokenFile != "":
		return "for the token in " + n.TokenFile
	case hasUserinfo(n.URLs...):
		return "for the credentials in the URL"
	case n.TLSCert != "":
		return "for client certificate " + n.TLSCert
	}
	return "with no credentials given (the server requires them: --nats-creds, --nats-nkey, --nats-user or --nats-token)"
}

func isAuthError(err error) bool {
	for _, e := range []error{nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrAccountAuthExpired} {
		if errors.Is(err, e) {
			return true
		}
	}
	return strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

func isTLSError(err error) bool {
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		header  tls.RecordHeaderError
		alert   tls.AlertError
	)
	switch {
	case errors.Is(err, nats.ErrTLS), errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted),
		errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid),
		errors.As(err, &header), errors.As(err, &alert):
		return true
	}
	return strings.Contains(err.Error(), "tls: ")
}

func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

func subjectOf(s *nats.Subscription) string {
	if s == nil {
		return ""
	}
	return s.Subject
}
