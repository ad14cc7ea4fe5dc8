package connect

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// resolveWith registers parts on a fresh FlagSet, parses args and resolves
// with env as the whole environment.
func resolveWith(t *testing.T, parts Parts, args []string, env map[string]string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := Register(fs, parts)
	f.LookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.Resolve()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolveDefaults(t *testing.T) {
	c, err := resolveWith(t, PartAll, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Default(), c); diff != "" {
		t.Errorf("defaults (-want,+got):\n%s", diff)
	}
}

// TestResolvePrecedence gives each setting from several sources: the flag
// beats the environment, which beats the file, which beats the default.
func TestResolvePrecedence(t *testing.T) {
	file := writeFile(t, "sluice.yaml", `
nats:
  url: [nats://file-a:4222, nats://file-b:4222]
  user: file-user
  password: file-pass
s3:
  endpoint: http://file-s3:9000
  region: file-region
  path_style: false
stream_replicas: 3
`)
	env := map[string]string{
		"SLUICE_CONFIG":        file,
		"SLUICE_NATS_USER":     "env-user",
		"SLUICE_S3_REGION":     "env-region",
		"SLUICE_NATS_PASSWORD": "env-pass",
	}
	c, err := resolveWith(t, PartAll, []string{"--nats-user", "flag-user", "--stream-replicas", "5"}, env)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		NATS: NATS{
			URLs:     []string{"nats://file-a:4222", "nats://file-b:4222"}, // file only
			User:     "flag-user",                                          // flag > env > file
			Password: "env-pass",                                           // env > file
		},
		S3: S3{
			Endpoint:  "http://file-s3:9000", // file only
			Region:    "env-region",          // env > file
			PathStyle: false,                 // file > default (true with an endpoint)
		},
		StreamReplicas: 5, // flag > file
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("resolved (-want,+got):\n%s", diff)
	}

	// --config beats SLUICE_CONFIG; path-style defaults on with an endpoint.
	other := writeFile(t, "other.yaml", "s3:\n  endpoint: http://other:9000\n")
	c, err = resolveWith(t, PartS3, []string{"--config", other}, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.S3.Endpoint != "http://other:9000" || !c.S3.PathStyle || c.S3.Region != "env-region" {
		t.Errorf("with --config: %+v; want the other file's endpoint, path-style on, env region", c.S3)
	}
}

// TestResolveReportsEveryProblemAtOnce: each problem is reported, each
// naming where its value came from.
func TestResolveReportsEveryProblemAtOnce(t *testing.T) {
	cert := writeFile(t, "cert.pem", "not a cert")
	file := writeFile(t, "bad.yaml", "nats:\n  tls:\n    cert: "+cert+"\n  tokn: x\ns3:\n  ca: /nonexistent/ca.pem\n")
	env := map[string]string{
		"SLUICE_NATS_TOKEN":      "secret-token",
		"SLUICE_STREAM_REPLICAS": "7",
		"SLUICE_NATS_TLS_KEY":    "",
		"SLUICE_S3_PATH_STYLE":   "maybe",
	}
	_, err := resolveWith(t, PartAll, []string{
		"--config", file,
		"--nats", "nats://ok:4222,http://bad:80",
		"--nats-user", "bob",
		"--nats-creds", "/nonexistent/user.creds",
		"--s3-endpoint", "ftp://x",
	}, env)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		`bad.yaml:4: unknown key "nats.tokn"`,
		`--nats "http://bad:80": want nats://host:port`,
		`--nats-creds: open /nonexistent/user.creds`,
		`--nats-creds and --nats-user and SLUICE_NATS_TOKEN: give one way to authenticate to NATS, not 3`,
		`nats.tls.cert (` + file + `:3) given without its key (--nats-tls-key, SLUICE_NATS_TLS_KEY, nats.tls.key)`,
		`SLUICE_STREAM_REPLICAS 7: want 1..5`,
		`SLUICE_S3_PATH_STYLE "maybe": want true or false`,
		`--s3-endpoint "ftp://x": want http(s)://host[:port]`,
		`s3.ca (` + file + `:6): open /nonexistent/ca.pem`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "secret-token") {
		t.Errorf("error shows the token:\n%s", msg)
	}
	if n := len(strings.Split(msg, "\n")); n != 9 {
		t.Errorf("%d problems, want 9:\n%s", n, msg)
	}
}

func TestResolveBadConfigFile(t *testing.T) {
	for name, content := range map[string]string{
		"not yaml":   "nats: [unclosed",
		"not a map":  "- a\n- b\n",
		"list value": "s3:\n  region: [a, b]\n",
	} {
		_, err := resolveWith(t, PartAll, nil, map[string]string{"SLUICE_CONFIG": writeFile(t, "c.yaml", content)})
		if err == nil || !strings.Contains(err.Error(), "SLUICE_CONFIG") {
			t.Errorf("%s: %v; want an error naming SLUICE_CONFIG and the file", name, err)
		}
	}
	_, err := resolveWith(t, PartAll, []string{"--config", "/nonexistent.yaml"}, nil)
	if err == nil || !strings.Contains(err.Error(), "--config: open /nonexistent.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// TestArgsAndEnvGiveAChildTheSameConfig: a child process parsing Args
// with Env as its environment resolves to the parent's Config, and no
// secret is on its command line.
func TestArgsAndEnvGiveAChildTheSameConfig(t *testing.T) {
	parent := Config{
		NATS:           NATS{URLs: []string{"nats://a:4222", "nats://b:4222"}, User: "bob", Password: "pa ss,word"},
		S3:             S3{Endpoint: "http://s3:9000", Region: "eu-west-1", PathStyle: false},
		StreamReplicas: 3,
	}
	for _, parts := range []Parts{PartNATS | PartS3, PartAll} {
		args, env := parent.Args(parts), parent.Env(parts)
		if strings.Contains(strings.Join(args, " "), "pa ss") {
			t.Errorf("secret on argv: %q", args)
		}
		// What the child would inherit from its parent's environment,
		// which Env must override.
		junk := writeFile(t, "junk.yaml", "nats:\n  url: nats://junk:4222\n  token: junk\ns3:\n  ca: /junk\n")
		envMap := map[string]string{"SLUICE_CONFIG": junk, "SLUICE_NATS_TOKEN": "junk", "SLUICE_NATS_CREDS": "/junk",
			"SLUICE_S3_PATH_STYLE": "true", "SLUICE_STREAM_REPLICAS": "2"}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			envMap[k] = v
		}
		child, err := resolveWith(t, parts, args, envMap)
		if err != nil {
			t.Fatalf("child: %v (args %q)", err, args)
		}
		want := parent
		if parts&PartStreams == 0 {
			want.StreamReplicas = 1 // the default, not asked for
			if slices.Contains(args, "--stream-replicas=3") {
				t.Errorf("args %q for parts without streams", args)
			}
		}
		if diff := cmp.Diff(want, child); diff != "" {
			t.Errorf("parts %b: child (-want,+got):\n%s\nargs %q env %q", parts, diff, args, env)
		}
	}
}

func TestResolveUnparsableValueIsOneProblem(t *testing.T) {
	_, err := resolveWith(t, PartAll, nil, map[string]string{"SLUICE_STREAM_REPLICAS": "three"})
	if err == nil || err.Error() != `SLUICE_STREAM_REPLICAS "three": want a number 1..5` {
		t.Errorf("got %v", err)
	}
}
