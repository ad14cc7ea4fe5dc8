package connect

import (
	"strconv"
	"strings"

	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/streams"
)

// Config is where NATS and S3 are and how to authenticate to them.
type Config struct {
	NATS NATS
	S3   S3
	// StreamReplicas is JetStream's replication factor for the streams and
	// buckets Sluice creates: 1 on a single server, 3 on a cluster.
	StreamReplicas int
}

// NATS settings. At most one of CredsFile, NKeyFile, User (with
// Password or PasswordFile) and Token (or TokenFile) authenticates.
type NATS struct {
	URLs         []string // secret when they carry userinfo
	CredsFile    string   // JWT + seed, as `nsc` writes it
	NKeyFile     string   // NKey seed file
	User         string
	Password     string // secret: never on argv
	PasswordFile string // holds the password (a mounted Secret); read at each connect
	Token        string // secret: never on argv
	TokenFile    string // holds the token; read at each connect
	TLSCA        string // PEM CA bundle to verify the server with
	TLSCert      string // client certificate (PEM), with TLSKey
	TLSKey       string
	// InboxPrefix replaces _INBOX as the root of the connection's reply
	// subjects: each component has its own (internal/natsperm), so that
	// a least-privilege user may subscribe to its own replies only. Set
	// by the command, not a setting.
	InboxPrefix string
	// RetryAuth keeps reconnecting after the server refused the
	// credentials twice, where nats.go would give up, and retries a first
	// connect refused late (ConnectNATS): an agent let in by the
	// controllers' auth callout is refused while none answers in time (a
	// controller busy, failing over, or restarting with NATS). Set by the
	// command.
	RetryAuth bool
}

// S3 settings. Credentials are not among them: they come from the AWS
// SDK's default chain (AWS_ACCESS_KEY_ID..., AWS_PROFILE and the shared
// files, web identity, instance metadata).
type S3 struct {
	Endpoint  string // empty: AWS
	Region    string // empty: the SDK's (AWS_REGION, profile), else us-east-1
	PathStyle bool   // resolved: on by default when Endpoint is set
	CAFile    string // PEM CA bundle to trust instead of the system's
}

// DefaultNATSURL is where a command looks for NATS when told nothing.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// Default is the configuration with nothing given: a local NATS server,
// AWS S3, one stream replica.
func Default() Config {
	return Config{NATS: NATS{URLs: []string{DefaultNATSURL}}, StreamReplicas: 1}
}

// Streams is the stream options this configuration asks for.
func (c Config) Streams() streams.Options { return streams.Options{Replicas: c.StreamReplicas} }

// Objstore is the S3 client configuration (credentials from the SDK's chain).
func (c Config) Objstore() objstore.Config {
	return objstore.Config{Endpoint: c.S3.Endpoint, Region: c.S3.Region, PathStyle: c.S3.PathStyle, CAFile: c.S3.CAFile}
}

// Validate checks the configuration and returns every problem at once,
// each naming the flag it would be given with.
func (c Config) Validate() error {
	return joinProblems(validate(c, func(name string) string { return "--" + name }))
}

// Parts selects the settings a command takes.
type Parts uint8

const (
	PartNATS    Parts = 1 << iota // --nats and NATS authentication, TLS
	PartS3                        // --s3-*
	PartStreams                   // --stream-replicas (commands that create streams)
	PartAll     = PartNATS | PartS3 | PartStreams
)

// setting is one value, with its flag, environment variable and config
// file key, and how it maps onto Config.
type setting struct {
	name   string // flag name
	env    string
	key    string // dotted YAML key
	part   Parts
	def    string
	usage  string
	secret bool // never on argv (Args), passed by Env
	url    bool // a URL, secret when it carries userinfo
	isBool bool
	get    func(Config) string
	set    func(*Config, string) error
}

func str(f func(*Config) *string) (func(Config) string, func(*Config, string) error) {
	return func(c Config) string { return *f(&c) },
		func(c *Config, v string) error { *f(c) = v; return nil }
}

// settings lists every connection setting, in the order --help shows them.
var settings = func() []setting {
	s := func(name, env, key string, part Parts, usage string, f func(*Config) *string) setting {
		get, set := str(f)
		return setting{name: name, env: env, key: key, part: part, usage: usage, get: get, set: set}
	}
	secret := func(st setting) setting { st.secret = true; return st }
	url := func(st setting) setting { st.url = true; return st }
	return []setting{
		{name: "nats", env: "SLUICE_NATS_URL", key: "nats.url", part: PartNATS, def: DefaultNATSURL, url: true,
			usage: "NATS server `URLs`, comma-separated (a URL with user:password@ belongs in SLUICE_NATS_URL or the file: every local user sees a command line)",
			get:   func(c Config) string { return strings.Join(c.NATS.URLs, ",") },
			set:   func(c *Config, v string) error { c.NATS.URLs = splitList(v); return nil }},
		s("nats-creds", "SLUICE_NATS_CREDS", "nats.creds", PartNATS, "NATS credentials `file` (JWT and seed)", func(c *Config) *string { return &c.NATS.CredsFile }),
		s("nats-nkey", "SLUICE_NATS_NKEY", "nats.nkey", PartNATS, "NATS NKey seed `file`", func(c *Config) *string { return &c.NATS.NKeyFile }),
		s("nats-user", "SLUICE_NATS_USER", "nats.user", PartNATS, "NATS user `name`", func(c *Config) *string { return &c.NATS.User }),
		secret(s("nats-password", "SLUICE_NATS_PASSWORD", "nats.password", PartNATS, "NATS `password`; on a command line every local user sees it: prefer the environment variable or --nats-password-file", func(c *Config) *string { return &c.NATS.Password })),
		s("nats-password-file", "SLUICE_NATS_PASSWORD_FILE", "nats.password_file", PartNATS, "`file` holding the NATS password (a mounted Secret; read at each connect)", func(c *Config) *string { return &c.NATS.PasswordFile }),
		secret(s("nats-token", "SLUICE_NATS_TOKEN", "nats.token", PartNATS, "NATS authentication `token`; prefer the environment variable or --nats-token-file", func(c *Config) *string { return &c.NATS.Token })),
		s("nats-token-file", "SLUICE_NATS_TOKEN_FILE", "nats.token_file", PartNATS, "`file` holding the NATS token (read at each connect)", func(c *Config) *string { return &c.NATS.TokenFile }),
		s("nats-tls-ca", "SLUICE_NATS_TLS_CA", "nats.tls.ca", PartNATS, "PEM CA bundle `file` that signed the NATS servers' certificates", func(c *Config) *string { return &c.NATS.TLSCA }),
		s("nats-tls-cert", "SLUICE_NATS_TLS_CERT", "nats.tls.cert", PartNATS, "client certificate `file` (PEM) for NATS TLS", func(c *Config) *string { return &c.NATS.TLSCert }),
		s("nats-tls-key", "SLUICE_NATS_TLS_KEY", "nats.tls.key", PartNATS, "client certificate's key `file` (PEM)", func(c *Config) *string { return &c.NATS.TLSKey }),
		{name: "stream-replicas", env: "SLUICE_STREAM_REPLICAS", key: "stream_replicas", part: PartStreams, def: "1",
			usage: "JetStream `replicas` of Sluice's streams and buckets: 1, or 3 on a NATS cluster (1..5)",
			get:   func(c Config) string { return strconv.Itoa(c.StreamReplicas) },
			set: func(c *Config, v string) error {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil {
					return errWant("a number 1..5")
				}
				c.StreamReplicas = n
				return nil
			}},
		url(s("s3-endpoint", "SLUICE_S3_ENDPOINT", "s3.endpoint", PartS3, "S3 endpoint `URL`; empty means AWS", func(c *Config) *string { return &c.S3.Endpoint })),
		s("s3-region", "SLUICE_S3_REGION", "s3.region", PartS3, "S3 `region` (default: the AWS SDK's, AWS_REGION or the profile's, else us-east-1)", func(c *Config) *string { return &c.S3.Region }),
		{name: "s3-path-style", env: "SLUICE_S3_PATH_STYLE", key: "s3.path_style", part: PartS3, isBool: true,
			usage: "path-style S3 addressing (default true when --s3-endpoint is set)",
			get:   func(c Config) string { return strconv.FormatBool(c.S3.PathStyle) },
			set: func(c *Config, v string) error {
				b, err := strconv.ParseBool(strings.TrimSpace(v))
				if err != nil {
					return errWant("true or false")
				}
				c.S3.PathStyle = b
				return nil
			}},
		s("s3-ca", "SLUICE_S3_CA", "s3.ca", PartS3, "PEM CA bundle `file` to trust for the S3 endpoint", func(c *Config) *string { return &c.S3.CAFile }),
	}
}()

// isSecret reports whether s's value in c must stay off argv and out of
// messages: a secret setting, or a URL with credentials in it.
func (s setting) isSecret(c Config) bool {
	return s.secret || (s.url && hasUserinfo(splitList(s.get(c))...))
}

type errWant string

func (e errWant) Error() string { return "want " + string(e) }

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// HasCredentials reports whether n names any credentials of its own (a
// user, token, nkey, creds file, or userinfo in a URL); a client
// certificate alone is not counted, since it may only secure the link.
func (n NATS) HasCredentials() bool {
	return n.CredsFile != "" || n.NKeyFile != "" || n.User != "" || n.Token != "" || n.TokenFile != "" || hasUserinfo(n.URLs...)
}
